"""Chapter 14's exercises, measured: reversal against copying, without source positions, and
without the encoder's self-attention.

Each run trains chapter 14's tiny model (2 + 2 layers, d_model = 32, 4 heads, no dropout)
as chapter 14 does (2,000 steps of 32 sequences of one random length 4..8, Adam at 1e-3 with
100 warmup steps), then reports on 100 unseen sequences:

* exact: the fraction reproduced exactly by greedy decoding;
* tokens: the fraction of output tokens right, teacher-forced;
* diagonal: where the last decoder layer's cross-attention looks (heads averaged) for a fixed
  sentence of 7 tokens, as the source position each output attends to most; and how much of
  its weight is on the source token it must emit;
* encoder: where the first encoder layer's self-attention looks, per head, for the same
  sentence (the position each source position attends to most);
* without encoder self-attention: exact and tokens again after the trained model's encoder
  self-attention sub-layers are switched off (their residual passes x through unchanged);
  and a fifth run trains a reversal model with them off from the start.

    python lessons/answers/measure_reversal.py       # about 3 minutes on 2 cores
    python lessons/answers/measure_reversal.py --steps 300
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Module, Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.decode import greedy_decode

PAD, BOS, EOS, VOCAB = 0, 1, 2, 13           # chapter 14's task; tokens 3..12 are the words
EXAMPLE = np.array([[3, 4, 5, 6, 7, 8, 9]])   # chapter 14's sentence for the attention
# (task, source positions, encoder self-attention)
RUNS = (("reverse", True, True), ("copy", True, True), ("reverse", False, True),
        ("copy", False, True), ("reverse", True, False))


def batch(generator: np.random.Generator, n: int, task: str) -> tuple[np.ndarray, ...]:
    length = int(generator.integers(4, 9))
    src = generator.integers(3, VOCAB, size=(n, length))
    tgt = src[:, ::-1] if task == "reverse" else src
    tgt_in = np.concatenate([np.full((n, 1), BOS), tgt], axis=1)
    tgt_out = np.concatenate([tgt, np.full((n, 1), EOS)], axis=1)
    return src, tgt_in, tgt_out


class NoPositions(Module):
    """A positional encoding that adds nothing: ``forward(x, start)`` returns x."""

    def forward(self, x: Any, start: int = 0) -> Any:
        return x


class Silent(Module):
    """An attention sub-layer that contributes nothing (its residual passes x through)."""

    def forward(self, query: Any, key: Any, value: Any, mask: Any = None, **_: Any) -> Any:
        return query * 0.0


def train(task: str, positions: bool, encoder_self_attention: bool, steps: int,
          seed: int = 0) -> Transformer:
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Transformer(TransformerConfig.named("tiny", VOCAB, p_dropout=0.0))
    if not positions:
        model.src_positions = NoPositions()
    if not encoder_self_attention:
        for layer in model.encoder.layers:
            layer.self_attn = Silent()
    optimizer = Adam(model.parameters(), lr=1e-3)
    for step in range(1, steps + 1):
        optimizer.lr = 1e-3 * min(1.0, step / 100)
        optimizer.zero_grad()
        src, tgt_in, tgt_out = batch(rng, 32, task)
        F.cross_entropy(model(src, tgt_in), tgt_out, ignore_index=PAD).backward()
        optimizer.step()
    return model.eval()


def scores(model: Transformer, task: str) -> dict[str, float]:
    """Exact greedy reproductions and teacher-forced token accuracy on 100 unseen sequences
    (one batch per length, 4 to 8, 20 sequences each)."""
    exact, right, total = [], 0, 0
    for length in range(4, 9):
        rng = np.random.default_rng(1000 + length)
        src = rng.integers(3, VOCAB, size=(20, length))
        tgt = src[:, ::-1] if task == "reverse" else src
        outputs = greedy_decode(model, src, BOS, EOS)
        exact += [out == list(t) for out, t in zip(outputs, tgt, strict=True)]
        tgt_in = np.concatenate([np.full((20, 1), BOS), tgt], axis=1)
        with mt.no_grad():
            predicted = model(src, tgt_in).numpy().argmax(axis=-1)[:, :-1]  # (20, length)
        right += int((predicted == tgt).sum())
        total += tgt.size
    return {"exact": float(np.mean(exact)), "tokens": right / total}


def cross_attention(model: Transformer, task: str) -> dict[str, Any]:
    """The last decoder layer's cross-attention on EXAMPLE: the source position each output
    attends to most (heads averaged), and the mean weight on the position it must emit."""
    target = EXAMPLE[:, ::-1] if task == "reverse" else EXAMPLE
    decoder_in = np.concatenate([[[BOS]], target], axis=1)
    cross = model.decoder.layers[-1].cross_attn
    cross.record_weights = True
    with mt.no_grad():
        model(EXAMPLE, decoder_in)
    cross.record_weights = False
    weights = cross.weights.numpy()[0].mean(axis=0)[:-1]               # (T, S), heads averaged
    n = EXAMPLE.shape[1]
    wanted = np.arange(n)[::-1] if task == "reverse" else np.arange(n)
    return {"attends_to": weights.argmax(axis=1).tolist(),
            "weight_on_wanted": float(weights[np.arange(n), wanted].mean())}


def without_encoder_self_attention(model: Transformer, task: str) -> dict[str, float]:
    saved = [layer.self_attn for layer in model.encoder.layers]
    for layer in model.encoder.layers:
        layer.self_attn = Silent()
    try:
        return scores(model, task)
    finally:
        for layer, attention in zip(model.encoder.layers, saved, strict=True):
            layer.self_attn = attention


def encoder_attention(model: Transformer) -> list[list[int]]:
    """Per head of the first encoder layer, the position each source position of EXAMPLE
    attends to most."""
    attention = model.encoder.layers[0].self_attn
    attention.record_weights = True
    with mt.no_grad():
        model.encode(EXAMPLE)
    attention.record_weights = False
    return attention.weights.numpy()[0].argmax(axis=-1).tolist()               # (H, S)


def measure(steps: int = 2000) -> dict[tuple[str, bool, bool], dict[str, Any]]:
    """(task, source positions, encoder self-attention) -> the scores of its trained model."""
    threads = mt.get_num_threads()
    mt.set_num_threads(1)  # tiny matrices: one thread is fastest, and fair to a shared machine
    try:
        results = {}
        for task, positions, encoder_self_attention in RUNS:
            model = train(task, positions, encoder_self_attention, steps)
            result = {**scores(model, task), **cross_attention(model, task)}
            if positions and encoder_self_attention:
                result["encoder layer 0, per head"] = encoder_attention(model)
                ablated = without_encoder_self_attention(model, task)
                result.update({f"{key} without encoder self-attention": value
                               for key, value in ablated.items()})
            results[task, positions, encoder_self_attention] = result
        return results
    finally:
        mt.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    start = time.perf_counter()
    for (task, positions, encoder), result in measure(args.steps).items():
        print(f"{task}, {'with' if positions else 'without'} source positions"
              f"{'' if encoder else ', trained without encoder self-attention'}:")
        for key, value in result.items():
            print(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
