"""Sentences in, sentences out: tokenize, batch by length, decode, detokenize; and the
translator (model and tokenizer) that a checkpoint holds.

``translate`` returns the translations as strings; ``translate_n_best`` returns for each
sentence a ``Translation``: its n best hypotheses, each with its pieces, per-piece
log-probabilities, log-probability and score, and (when asked) its alignment to the source.

Used by training (validation BLEU), ``minitransformer translate`` and ``evaluate``. Empty lines
translate to empty lines; characters the tokenizer has never seen become its unknown token
rather than an error; sources longer than the model's positional table are cut to fit.

Batches hold SENTENCES_PER_THREAD sentences for each CPU thread, at most MAX_CPU_BATCH:
decoding splits a batch into one share per thread (decode.py), and a step costs a few
milliseconds of fixed work per share whatever its size, so a share of about 128 sentences
spreads that cost over enough of them. With 2 threads, beam search over 500 Multi30k test
sentences took 2.96 s in batches of 256, 3.20 s in batches of 100, 3.96 s in batches of 50,
and 3.26 s in batches of 500 (bench/results/compare_torch.epyc.decoding-batch-sizes.md, a
2-core AMD EPYC). The cap keeps the memory of a batch bounded on many cores: a beam-4 step of
256 sentences holds (1024, V) logits (150 MB at V = 37,000) and, for the `base` model,
self-attention caches of 25 MB per output token.

Memory is estimated before it is spent (``memory.decoding_bytes``): when the batch holding
the longest sentences would need more than is available, every batch is made smaller, to the
largest size that fits, and a warning on standard error says so once, with the numbers; when
not even that sentence alone fits, ``memory.MemoryLimitError`` says how much it needs, how
much there is, and the widest beam that would fit. The translations are the same either way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import backend
from ..data.tokenizer import Tokenizer
from ..functional._layout import frozen_weights
from ..threads import get_num_threads
from . import memory
from .alignment import check_layer, cross_attention, hard_alignment, pharaoh, to_words
from .checkpoint import CheckpointError, load_checkpoint, restore_model
from .decode import Hypothesis, _is_index, beam_search, greedy_decode

SENTENCES_PER_THREAD = 128  # a batch on the CPU: this many for each worker thread,
MAX_CPU_BATCH = 256         # but no more than this many
GPU_BATCH = 256             # a batch on the GPU


@dataclass(frozen=True)
class Alignment:
    """(source, output) index pairs, "i-j" in Pharaoh format: over pieces, and over words
    (pieces merged at each ▁)."""

    pieces: list[tuple[int, int]]
    words: list[tuple[int, int]]


@dataclass(frozen=True)
class TranslatedHypothesis:
    """One hypothesis of ``translate_n_best``, in text and pieces."""

    text: str                     # detokenized, as `translate` prints it
    pieces: list[str]             # the output's pieces, EOS ("</s>") last when it finished
    token_log_probs: list[float]  # log P of each piece given those before it and the source
    log_prob: float               # log P(output | source), as the search accumulated it
    score: float                  # log_prob / lp(|Y|), what beam search ranks by
    finished: bool                # ended with EOS; False when cut at the length limit
    alignment: Alignment | None   # with alignment_layer


@dataclass(frozen=True)
class Translation:
    """A source sentence and its hypotheses, best first (none for an empty sentence)."""

    source: str
    source_pieces: list[str]
    hypotheses: list[TranslatedHypothesis]

    def to_json(self) -> dict[str, Any]:
        """A dict for one line of ``translate --json`` (alignments as "i-j" strings)."""
        record = asdict(self)
        for hyp, out in zip(self.hypotheses, record["hypotheses"], strict=True):
            if hyp.alignment is None:
                del out["alignment"]
            else:
                out["alignment"] = {"pieces": pharaoh(hyp.alignment.pieces),
                                    "words": pharaoh(hyp.alignment.words)}
        return record


def default_batch_size(model: Any) -> int:
    """Sentences per batch when none is given: SENTENCES_PER_THREAD for each CPU thread, at
    most MAX_CPU_BATCH, or GPU_BATCH when the model is on the GPU."""
    device = backend.device_of(next(iter(model.parameters())).data)
    if device != "cpu":
        return GPU_BATCH
    return min(SENTENCES_PER_THREAD * get_num_threads(), MAX_CPU_BATCH)


def beam_problem(vocab_size: int, beam_size: Any) -> str | None:
    """Why ``beam_size`` cannot translate into a target vocabulary of ``vocab_size``, or None:
    a wider beam has more places than the first step has continuations, and no translation
    needs the exhaustive search such a beam becomes (``beam_search`` allows it, for that)."""
    if _is_index(beam_size) and beam_size > vocab_size:
        return (f"a beam of {beam_size} is wider than the model's target vocabulary of "
                f"{vocab_size} pieces, more places than its first step can fill; give a beam "
                f"of at most {vocab_size} (--beam).")
    return None


def _check_beam(model: Any, beam_size: Any) -> None:
    problem = beam_problem(model.config.tgt_vocab_size, beam_size)
    if problem:
        raise ValueError(problem)


def translation_session(model: Any) -> Any:
    """A context for many ``translate`` calls with a model whose weights do not change while it
    is open (``minitransformer translate`` reading a stream, line by line): the copies of its
    weights laid out for small products (``functional/_layout.py``) are made once, by any
    product of two rows or more (a beam of one sentence), and serve every call. Without it
    each call makes its own, and only where a product has 64 rows or more (a batch)."""
    return frozen_weights((p.data for p in model.parameters()), copy_rows=2)


def translate(model: Any, tokenizer: Any, sentences: list[str], beam_size: int = 1,
              length_penalty: float = 0.6, batch_size: int | None = None,
              graphs: Any = None) -> list[str]:
    """Translations of ``sentences``, in order: greedy when ``beam_size`` is 1, else beam
    search (§6.1: beam 4, length penalty 0.6, at most source length + 50 tokens), which may
    be at most the target vocabulary wide. Sentences are decoded in batches of similar
    length, ``batch_size`` at a time (default: ``default_batch_size``), fewer where memory
    is short (see above); the translations do not depend on it. On the GPU, ``graphs`` (a
    ``DecodingGraphs`` of the model) replays the decoding steps as CUDA graphs."""
    _check_beam(model, beam_size)
    outputs = [""] * len(sentences)
    # the weights laid out for decoding's products once for all batches (decode.py)
    with frozen_weights(p.data for p in model.parameters()):
        for rows, src in _batches(model, tokenizer, sentences, batch_size,
                                  beam_size=beam_size):
            # each sentence's limit is its own length + 50, whatever its batch (decode.py)
            if beam_size == 1:
                ids = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id,
                                    graphs=graphs)
            else:
                ids = beam_search(model, src, tokenizer.bos_id, tokenizer.eos_id, beam_size,
                                  length_penalty, graphs=graphs)
            for i, out in zip(rows, ids, strict=True):
                outputs[i] = tokenizer.decode(out)
    return outputs


def translate_n_best(model: Any, tokenizer: Any, sentences: list[str], beam_size: int = 4,
                     length_penalty: float = 0.6, n_best: int = 1,
                     batch_size: int | None = None,
                     alignment_layer: int | None = None, graphs: Any = None
                     ) -> list[Translation]:
    """``translate`` with everything the search knows: for each sentence a ``Translation``,
    its ``n_best`` best hypotheses (1 with greedy decoding, ``beam_size`` 1), each with its
    text, pieces, per-token log-probabilities, log P and score (the ranking of beam search,
    log P / lp(|Y|), finished hypotheses first); with ``alignment_layer`` (a decoder layer,
    -1 the last) also its alignment to the source (``alignment.py``). The first hypothesis's
    text is what ``translate`` returns. An empty sentence has no hypotheses. ``graphs`` as
    for ``translate``."""
    if beam_size == 1 and n_best != 1:
        raise ValueError(f"greedy decoding (beam size 1) keeps one hypothesis, so n_best "
                         f"must be 1, got {n_best!r}; use a beam of at least {n_best!r}.")
    _check_beam(model, beam_size)
    if alignment_layer is not None:
        check_layer(model, alignment_layer)
    eos = tokenizer.eos_id
    found: list[list[Hypothesis]] = [[] for _ in sentences]
    weights: list[list[Any]] = [[] for _ in sentences]
    encoded: list[list[int]] = [[] for _ in sentences]
    aligned = n_best if alignment_layer is not None else 0
    with frozen_weights(p.data for p in model.parameters()):  # as in translate
        for rows, src in _batches(model, tokenizer, sentences, batch_size, encoded, beam_size,
                                  aligned):
            if beam_size == 1:
                lists = greedy_decode(model, src, tokenizer.bos_id, eos, n_best=1,
                                      length_penalty=length_penalty, graphs=graphs)
            else:
                lists = beam_search(model, src, tokenizer.bos_id, eos, beam_size,
                                    length_penalty, n_best=n_best, graphs=graphs)
            for i, hyps in zip(rows, lists, strict=True):
                found[i] = hyps
            if alignment_layer is not None:  # one teacher-forced pass for the batch's hypotheses
                pairs = [(i, [*h.tokens, eos] if h.finished else h.tokens)
                         for i in rows for h in found[i]]
                every = cross_attention(model, [encoded[i] for i, _ in pairs],
                                        [out for _, out in pairs], tokenizer.bos_id,
                                        alignment_layer)
                for (i, _), w in zip(pairs, every, strict=True):
                    weights[i].append(w)
    return [_translation(tokenizer, *args)
            for args in zip(sentences, encoded, found, weights, strict=True)]


def _translation(tokenizer: Any, sentence: str, src_ids: list[int], hyps: list[Hypothesis],
                 weights: list[Any]) -> Translation:
    """One sentence's Translation from its hypotheses and (when asked) their
    cross-attention weights (H, T, S)."""
    piece = tokenizer.id_to_piece
    source_pieces = [piece(i) for i in src_ids]
    translated = []
    for h, w in zip(hyps, weights or [None] * len(hyps), strict=True):
        pieces = [piece(i) for i in (h.tokens + [tokenizer.eos_id] * h.finished)]
        alignment = None
        if w is not None:
            pairs = hard_alignment(w, len(h.tokens))
            alignment = Alignment(pairs, to_words(pairs, source_pieces, pieces[:len(h.tokens)]))
        translated.append(TranslatedHypothesis(tokenizer.decode(h.tokens), pieces,
                                               h.token_log_probs, h.log_prob, h.score,
                                               h.finished, alignment))
    return Translation(sentence, source_pieces, translated)


def _batches(model: Any, tokenizer: Any, sentences: list[str], batch_size: int | None,
             encoded: list[list[int]] | None = None, beam_size: int = 1,
             aligned: int = 0) -> Iterator[tuple[list[int], list]]:
    """The non-empty sentences tokenized (cut to the model's longest input, with a warning),
    sorted by length and padded into batches of ``batch_size``, or fewer where decoding them
    with ``beam_size`` (and aligning ``aligned`` hypotheses of each) would not fit in memory:
    (their indices, their ids). ``encoded``, when given, receives every sentence's ids."""
    if batch_size is None:
        batch_size = default_batch_size(model)
    elif not _is_index(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (sentences per batch), got "
                         f"{batch_size!r}.")
    max_len = model.config.max_len
    encoded = [[] for _ in sentences] if encoded is None else encoded
    for n, sentence in enumerate(sentences):
        ids = tokenizer.encode(sentence.strip())
        if len(ids) > max_len - 1:
            print(f"warning: a source of {len(ids)} tokens was cut to {max_len - 1}, the "
                  "model's longest input.", file=sys.stderr)
            ids = ids[: max_len - 1]
        encoded[n] = ids
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
    if order:
        batch_size = _fitting_batch_size(model, len(encoded[order[-1]]), len(order),
                                         batch_size, beam_size, aligned)
    pad = model.config.pad_id
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in rows)
        yield rows, [[*encoded[i], *[pad] * (width - len(encoded[i]))] for i in rows]


def _fitting_batch_size(model: Any, longest: int, n: int, batch_size: int, beam_size: int,
                        aligned: int) -> int:
    """``batch_size``, or the largest smaller size whose batch of the ``longest`` sentences
    (of ``n``) decodes in the memory available, saying so on standard error; a
    MemoryLimitError when that sentence alone does not fit. The batch that holds the longest
    sentence needs the most: its width and output limit (its length + 50) are the largest."""
    parameter = next(iter(model.parameters())).data
    device = backend.device_of(parameter)
    available = memory.available_memory(device)
    config, f = model.config, parameter.dtype.itemsize
    L = min(longest + 50, config.max_len)

    def need(b: int) -> int:
        return memory.decoding_bytes(config, b, longest, L, beam_size, b * aligned, f,
                                     gpu=device == "cuda")

    wanted = min(batch_size, n)
    if available is None or need(wanted) <= available:
        return batch_size
    search = f"with beam {beam_size}" if beam_size > 1 else "greedily"
    if aligned:
        search += " and aligning their hypotheses"
    if need(1) > available:
        widest = memory.largest_beam(config, longest, L, available, f,
                                     gpu=device == "cuda") if not aligned else 0
        fix = (f"give a beam of {widest} or less (--beam {widest})" if 1 <= widest < beam_size
               else memory.free_some() + (", or leave out the alignments" if aligned else ""))
        memory.check(need(1), available, f"decoding a sentence of {longest} tokens {search}",
                     fix, device)
    low, high = 1, wanted - 1  # need(low) fits, need(wanted) does not
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if need(mid) <= available else (low, mid - 1)
    print(f"warning: decoding {wanted} sentences at a time {search} would need about "
          f"{memory.format_bytes(need(wanted))} of memory, more than the "
          f"{memory.format_bytes(available)} available ({memory.describe_available(device)}), so "
          f"they are decoded {low} at a time (--batch-size sets it).", file=sys.stderr)
    return low


def load_translator(path: str | Path) -> tuple[Any, Any]:
    """The model and tokenizer stored in a checkpoint."""
    model, tokenizer, _ = load_translator_and_languages(path)
    return model, tokenizer


def load_translator_and_languages(path: str | Path
                                  ) -> tuple[Any, Any, tuple[str, str] | None]:
    """The model, the tokenizer and the (source, target) languages it was trained on, when the
    checkpoint records them (`train` does, for a corpus with named languages)."""
    checkpoint = load_checkpoint(path)
    if checkpoint.tokenizer_bytes is None:
        raise CheckpointError(f"{path} holds no tokenizer, so it cannot translate text; use "
                              "a checkpoint written by `minitransformer train`.")
    languages = checkpoint.state.get("languages")
    if not (isinstance(languages, list) and len(languages) == 2
            and all(isinstance(lang, str) and lang for lang in languages)):
        languages = None
    model, tokenizer = restore_model(checkpoint), Tokenizer.from_bytes(checkpoint.tokenizer_bytes)
    sizes = {model.config.src_vocab_size, model.config.tgt_vocab_size}
    if sizes != {tokenizer.vocab_size}:
        raise CheckpointError(f"{path} holds a tokenizer of {tokenizer.vocab_size} pieces for a "
                              f"model of {' and '.join(map(str, sorted(sizes)))}, so they were "
                              "not trained together; use a checkpoint written by one run of "
                              "`minitransformer train`.")
    return model, tokenizer, None if languages is None else (languages[0], languages[1])
