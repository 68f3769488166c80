"""Sentences in, sentences out: tokenize, batch by length, decode, detokenize; and the
translator (model and tokenizer) that a checkpoint holds.

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
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .. import backend
from ..data.tokenizer import Tokenizer
from ..threads import get_num_threads
from .checkpoint import CheckpointError, load_checkpoint, restore_model
from .decode import _is_index, beam_search, greedy_decode

SENTENCES_PER_THREAD = 128  # a batch on the CPU: this many for each worker thread,
MAX_CPU_BATCH = 256         # but no more than this many
GPU_BATCH = 256             # a batch on the GPU


def default_batch_size(model: Any) -> int:
    """Sentences per batch when none is given: SENTENCES_PER_THREAD for each CPU thread, at
    most MAX_CPU_BATCH, or GPU_BATCH when the model is on the GPU."""
    device = backend.device_of(next(iter(model.parameters())).data)
    if device != "cpu":
        return GPU_BATCH
    return min(SENTENCES_PER_THREAD * get_num_threads(), MAX_CPU_BATCH)


def translate(model: Any, tokenizer: Any, sentences: list[str], beam_size: int = 1,
              length_penalty: float = 0.6, batch_size: int | None = None) -> list[str]:
    """Translations of ``sentences``, in order: greedy when ``beam_size`` is 1, else beam
    search (§6.1: beam 4, length penalty 0.6, at most source length + 50 tokens). Sentences
    are decoded in batches of similar length, ``batch_size`` at a time (default:
    ``default_batch_size``); the translations do not depend on it."""
    if batch_size is None:
        batch_size = default_batch_size(model)
    elif not _is_index(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (sentences per batch), got "
                         f"{batch_size!r}.")
    max_len = model.config.max_len
    encoded = []
    for sentence in sentences:
        ids = tokenizer.encode(sentence.strip())
        if len(ids) > max_len - 1:
            print(f"warning: a source of {len(ids)} tokens was cut to {max_len - 1}, the "
                  "model's longest input.", file=sys.stderr)
            ids = ids[: max_len - 1]
        encoded.append(ids)
    outputs = [""] * len(sentences)
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
    pad = model.config.pad_id
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in rows)
        src = [[*encoded[i], *[pad] * (width - len(encoded[i]))] for i in rows]
        # each sentence's limit is its own length + 50, whatever its batch (decode.py)
        if beam_size == 1:
            ids = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id)
        else:
            ids = beam_search(model, src, tokenizer.bos_id, tokenizer.eos_id, beam_size,
                              length_penalty)
        for i, out in zip(rows, ids, strict=True):
            outputs[i] = tokenizer.decode(out)
    return outputs


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
    return (restore_model(checkpoint), Tokenizer.from_bytes(checkpoint.tokenizer_bytes),
            None if languages is None else (languages[0], languages[1]))
