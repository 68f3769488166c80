"""The memory estimates grow with the sizes the searches that use them move along.

``translate`` lowers its batch by bisection over ``decoding_bytes`` and takes the batch of the
longest sentences as the one that needs the most; ``largest_beam`` bisects over the beam of one
sentence. An estimate that fell somewhere as such a size grew would make them name a smaller
size than the largest that fits, or miss the batch that needs the most. These properties are
checked over configurations and shapes drawn at random (hypothesis), rather than at the few
points the other tests check.

Two sizes the need does not always grow with, as the code allocates:

- the beam, across greedy search and beam 2 (greedy holds a (B, V) array to choose from, beam
  search works on blocks of about 2 MiB, so for a large batch and vocabulary greedy needs
  more), and from half the vocabulary on (each group of candidates then one token). Only
  ``largest_beam`` crosses the first, for one sentence, where greedy search needs less below
  vocabularies of hundreds of thousands of words; it says that beyond the second its beam may
  not be the widest that fits.
- ``--max-tokens``: the token batcher cuts the sorted pairs elsewhere for each bound, and a
  smaller bound can make a batch of longer pairs that needs more (the last test shows it on
  the built-in task). So ``train``'s refusal promises what bisection finds, a ``--max-tokens``
  that fits while the next one up does not, and that is what is checked.
"""

import functools
import re
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from train_task import make_task

from minitransformer.functional import _blocks
from minitransformer.nn import TransformerConfig
from minitransformer.translation import memory
from minitransformer.translation.memory import MemoryLimitError
from minitransformer.translation.training import (
    TrainConfig,
    check_training_memory,
    training_memory,
)

configs = st.builds(
    lambda layers, heads, head, d_ff, vocab, max_len: TransformerConfig.named(
        "tiny", vocab, n_layers=layers, n_heads=heads, d_model=heads * head, d_ff=d_ff,
        max_len=max_len),
    st.integers(1, 6), st.integers(1, 8), st.integers(1, 64), st.integers(1, 4096),
    st.integers(5, 40_000), st.integers(8, 2048))
DECODING_SIZES = ("batch", "source_len", "output_len", "beam_size", "alignments")


@settings(max_examples=400, deadline=None)
@given(configs, st.fixed_dictionaries({
    "batch": st.integers(1, 600), "source_len": st.integers(1, 300),
    "output_len": st.integers(1, 400), "beam_size": st.integers(1, 64),
    "alignments": st.integers(0, 300)}), st.sampled_from(DECODING_SIZES),
    st.integers(1, 50), st.booleans(), st.integers(1, 8))
def test_decoding_needs_more_for_every_larger_size(config, sizes, which, more, gpu, workers):
    larger = {**sizes, which: sizes[which] + more}
    if which == "beam_size":  # beam search against beam search, below half the vocabulary
        assume(sizes["beam_size"] >= 2 and 2 * larger["beam_size"] <= config.tgt_vocab_size)
    before = _blocks.WORKERS  # the shares of a batch on the CPU, one per worker
    _blocks.WORKERS = workers
    try:
        assert (memory.decoding_bytes(config, **sizes, gpu=gpu)
                <= memory.decoding_bytes(config, **larger, gpu=gpu))
    finally:
        _blocks.WORKERS = before


@settings(max_examples=300, deadline=None)
@given(configs, st.lists(st.integers(1, 300), min_size=3, max_size=3),
       st.integers(0, 2), st.integers(1, 50))
def test_a_step_and_a_validation_need_more_for_a_larger_batch_or_length(config, shape, which,
                                                                        more):
    larger = list(shape)
    larger[which] += more  # B, S or T
    assert memory.step_bytes(config, *shape) <= memory.step_bytes(config, *larger)
    assert memory.validation_bytes(config, *shape) <= memory.validation_bytes(config, *larger)


@settings(max_examples=200, deadline=None)
@given(configs, st.integers(1, 300), st.integers(1, 400), st.integers(0, 2**34),
       st.booleans())
def test_the_beam_largest_beam_names_fits_and_the_next_does_not(config, source_len, output_len,
                                                                 available, gpu):
    widest = memory.largest_beam(config, source_len, output_len, available, gpu=gpu)

    def need(beam: int) -> int:
        return memory.decoding_bytes(config, 1, source_len, output_len, beam, gpu=gpu)
    if widest:
        assert need(widest) <= available
    if widest < config.tgt_vocab_size:
        assert need(widest + 1) > available


@functools.cache
def task():
    """The built-in task's tokenizer and data, a tiny model's configuration, its settings."""
    tokenizer, data = make_task()
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    settings_ = TrainConfig(max_tokens=200, max_steps=2, bleu_sentences=0, progress=False)
    return tokenizer, data, config, settings_


def training_need(max_tokens: int, multiple: int = 0) -> int:
    tokenizer, data, config, settings_ = task()
    return training_memory(config, replace(settings_, max_tokens=max_tokens,
                                           shape_multiple=multiple),
                           data, len(tokenizer.to_bytes()))[0]


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 1.0), st.sampled_from([0, 8]))
def test_a_refused_run_names_a_max_tokens_that_fits_and_the_next_does_not(where, multiple):
    tokenizer, data, config, settings_ = task()
    settings_ = replace(settings_, shape_multiple=multiple)
    size = len(tokenizer.to_bytes())
    low, high = training_need(1, multiple), training_need(settings_.max_tokens, multiple)
    limit = int(low + where * (high - 1 - low))  # from what one pair needs to just too little
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(memory.ENVIRONMENT_VARIABLE, str(limit))
        with pytest.raises(MemoryLimitError) as refused:
            check_training_memory(config, settings_, data, size)
        named = int(re.search(r"give --max-tokens (\d+) \(with", str(refused.value))[1])
        assert training_need(named, multiple) <= limit < training_need(named + 1, multiple)
        check_training_memory(config, replace(settings_, max_tokens=named), data, size)


def test_a_larger_max_tokens_can_need_less_so_no_smaller_one_is_promised():
    """Why the refusal names one --max-tokens and not "or less" (training.py): on the built-in
    task, a larger bound cuts the batches so that the largest needs less."""
    needs = [training_need(m) for m in range(20, 400)]
    assert any(a > b for a, b in zip(needs, needs[1:], strict=False))
