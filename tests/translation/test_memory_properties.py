"""The memory estimates grow with every size they are given: the property the searches that
use them rest on.

``translate`` lowers its batch by bisection over ``decoding_bytes`` and takes the batch of the
longest sentences as the one that needs the most; ``largest_beam`` bisects over the beam. An
estimate that fell somewhere as a size grew would make them name a smaller size than the
largest that fits, or miss the batch that needs the most. These properties are checked over
configurations and shapes drawn at random (hypothesis), rather than at the few points the other
tests check.

``train`` bisects over ``--max-tokens`` too, but there the need does not always grow: the token
batcher cuts the sorted pairs elsewhere for another bound, and a smaller bound can make a batch
of longer pairs that needs more (in a trial on 500 random pairs of 3 to 40 tokens and the
`small` model, the largest step was up to 7.6 % larger for the smaller of two bounds, in 0.8 %
of the pairs of bounds from 400 to 4,000 tokens). What the refusal promises instead is
checked: a ``--max-tokens`` that fits while the next one up does not.
"""

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
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


@pytest.fixture(scope="module")
def monkeypatch_limit():
    """Sets MINITRANSFORMER_MEMORY_LIMIT for one example (a module's fixture: hypothesis runs
    every example of a test inside one call of it), and takes it away after the module."""
    with pytest.MonkeyPatch.context() as patch:
        yield lambda limit: patch.setenv(memory.ENVIRONMENT_VARIABLE, str(limit))

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


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 1.0), st.sampled_from([0, 8]))
def test_a_refused_run_names_a_max_tokens_that_fits_and_the_next_does_not(monkeypatch_limit,
                                                                          where, multiple):
    """The one search whose need does not always grow: batches cut for more tokens can need
    less (a smaller bound makes a batch of longer pairs), so the message promises only what
    bisection finds, a --max-tokens that fits while the next one up does not."""
    tokenizer, data = make_task()
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    settings_ = TrainConfig(max_tokens=200, max_steps=2, bleu_sentences=0, progress=False,
                            shape_multiple=multiple)
    size = len(tokenizer.to_bytes())

    def need(max_tokens: int) -> int:
        return training_memory(config, replace(settings_, max_tokens=max_tokens), data, size)[0]
    low, high = need(1), need(settings_.max_tokens)
    limit = int(low + where * (high - 1 - low))  # from what one pair needs to just too little
    monkeypatch_limit(limit)
    with pytest.raises(MemoryLimitError) as refused:
        check_training_memory(config, settings_, data, size)
    named = int(re.search(r"give --max-tokens (\d+) \(with", str(refused.value))[1])
    assert need(named) <= limit < need(named + 1)
    check_training_memory(config, replace(settings_, max_tokens=named), data, size)


@settings(max_examples=200, deadline=None)
@given(configs, st.integers(1, 300), st.integers(1, 400), st.integers(0, 2**34))
def test_the_widest_beam_that_fits_does_fit_and_one_more_does_not(config, source_len,
                                                                  output_len, available):
    widest = memory.largest_beam(config, source_len, output_len, available)
    if widest:
        assert memory.decoding_bytes(config, 1, source_len, output_len, widest) <= available
    if widest < config.tgt_vocab_size:
        assert memory.decoding_bytes(config, 1, source_len, output_len, widest + 1) > available
