"""The exercise ``masks``: the learner writes ``padding_mask(ids, pad_id)``, (B, 1, 1, S) bool,
True at real tokens, and ``causal_mask(T)``, (T, T) bool, True where key j <= query i: the
library's conventions (nn.Transformer.source_mask, functional.causal_mask).

Graded by what the masks do in a real Transformer, not by comparing arrays alone: after the
shapes and dtypes, the learner's causal mask must keep the decoder causal (changing the target
from position j on leaves the outputs before j as they were), the learner's padding mask must
make padding invisible (appending padding to a source leaves the outputs of its real tokens as
they were), and with both masks the whole model must give the library's outputs. The
mistakes are recognised from the arrays the learner's functions return (``CAUSAL_MISTAKES``,
``PADDING_MISTAKES``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...autograd.tensor import Tensor
from ...nn.transformer import Transformer
from ._common import AlgorithmTask, Failed, Learner, TaskCase, tiny_model

PAD, VOCAB = 3, 13  # a padding id that is not 0: `ids != 0` is a mistake to catch

# ----------------------------------------------------------------------------- the mistakes


def _right_causal(T: int) -> Any:
    return np.tril(np.ones((T, T), dtype=bool))


# (the wrong causal mask as a function of T, the hint)
CAUSAL_MISTAKES: list[tuple[Callable[[int], Any], str]] = [
    (lambda T: _right_causal(T).T, "the mask is transposed (the upper triangle): row i is "
     "query i and column j key j, so True above the diagonal lets position i see the later "
     "positions j > i; keep j <= i, the lower triangle (np.tril)."),
    (lambda T: ~_right_causal(T), "the mask is inverted: True must mean may attend (PyTorch's "
     "attn_mask uses True for masked); True on and below the diagonal."),
    (lambda T: np.tril(np.ones((T, T), dtype=bool), -1), "the diagonal is missing: position "
     "i may attend to itself (j <= i, not j < i), or the first position sees nothing."),
    (lambda T: np.ones((T, T), dtype=bool), "the mask is all True: it hides nothing, and "
     "every position sees the whole target."),
]

# (the wrong padding mask as a function of (ids, pad_id), as a (B, S) array; the hint)
PADDING_MISTAKES: list[tuple[Callable[[Any, int], Any], str]] = [
    (lambda ids, pad: ids == pad, "the mask is inverted: True at the padding; True must mean "
     "a real token, one that may be attended to."),
    (lambda ids, pad: ids != 0, "it compares the ids with 0, not with pad_id: the padding "
     "id is whatever the tokenizer says (here 3)."),
    (lambda ids, pad: np.ones(ids.shape, dtype=bool), "the mask is all True: the padding is "
     "not hidden."),
]


def _inspect(learner: Learner, name: str, args: tuple, wrong: list, right: Any) -> str | None:
    """The hint of the wrong mask that the learner's ``name(*args)`` returns, if it is one."""
    try:
        got = np.asarray(learner.call(name, *args))
    except Failed:
        return None
    for make, hint in wrong:
        bad = make(*args)
        if got.size == bad.size and np.array_equal(got.reshape(bad.shape), bad):
            return hint
    if got.size == right.size and np.array_equal(got.reshape(right.shape), right) and \
            got.shape != right.shape:
        return "the right entries in the wrong shape: see the first cases."
    return None


def _causal_hint(learner: Learner) -> str | None:
    return _inspect(learner, "causal_mask", (5,), CAUSAL_MISTAKES, _right_causal(5))


def _padding_hint(learner: Learner) -> str | None:
    ids = np.array([[4, 0, 7, PAD, PAD], [5, 6, 8, 9, 0]])  # 0 is a real token here
    return _inspect(learner, "padding_mask", (ids, PAD), PADDING_MISTAKES, ids != PAD)


# ----------------------------------------------------------------------------- shapes

def _check_array(got: Any, shown: str, shape: tuple, hint: str | None = None) -> None:
    if not isinstance(got, np.ndarray):
        what = type(got).__name__
        raise Failed(f"{shown} returned a {what}, not a NumPy array" + (
            ": return its array (tensor.data)." if what == "Tensor" else "."))
    if got.dtype != bool:
        raise Failed(f"{shown} has dtype {got.dtype}, not bool.", "attention masks are "
                     "boolean, True where attention is allowed: np.tril(np.ones(...)) gives "
                     "floats; ask for dtype=bool, or build the mask from a comparison.")
    if got.shape != shape:
        raise Failed(f"{shown} has shape {got.shape}, expected {shape}.", hint)


def _causal_shapes(learner: Learner, seed: int) -> None:
    for T in (1, 4, 7):
        got = learner.call("causal_mask", T, shown=f"causal_mask({T})")
        _check_array(got, f"causal_mask({T})", (T, T))


def _padding_shape_hint(shape: tuple, B: int, S: int) -> str | None:
    if shape in ((B, S),):
        return ("the mask is broadcast against the scores (B, H, T, S): give it axes for the "
                "heads and the queries, ids[:, None, None, :].")
    if shape in ((B, 1, S, 1), (B, S, 1), (B, 1, S)):
        return ("the padding is in the keys, the last axis of the scores (B, H, T, S): a "
                "padding key is hidden from every query, so the mask is (B, 1, 1, S).")
    return None


def _padding_shapes(learner: Learner, seed: int) -> None:
    g = np.random.default_rng(seed)
    for pad in (0, PAD):
        ids = g.integers(4, VOCAB, size=(2, 5))
        ids[0, 3:] = pad
        shown = f"padding_mask(ids {ids.shape}, {pad})"
        got = learner.call("padding_mask", ids, pad, shown=shown)
        hint = _padding_shape_hint(np.shape(got), 2, 5)
        _check_array(got, shown, (2, 1, 1, 5), hint)


# ----------------------------------------------------------------------------- in a model

@contextlib.contextmanager
def masks_of(model: Transformer, source: Callable | None = None,
             target: Callable | None = None) -> Iterator[Transformer]:
    """``model`` with its source and target masks replaced, for the block."""
    if source is not None:
        model.source_mask = source
    if target is not None:
        model.target_mask = target
    try:
        yield model
    finally:
        for name, given in (("source_mask", source), ("target_mask", target)):
            if given is not None:
                delattr(model, name)


def _run(model: Transformer, src: Any, tgt: Any) -> tuple[Any, Any]:
    """(memory, logits) of a batch, as arrays; a mask the model refuses is a failed case."""
    try:
        memory = model.encode(src)
        return memory.data, model.decode(tgt, memory, model.source_mask(src)).data
    except (TypeError, ValueError) as exc:
        raise Failed(f"the model refused the mask: {exc}") from None


def _learner_causal(learner: Learner, model: Transformer) -> Callable:
    def target_mask(ids: Any) -> Any:
        ids = np.asarray(ids.data if isinstance(ids, Tensor) else ids)
        T = ids.shape[1]
        causal = np.asarray(learner.call("causal_mask", T, shown=f"causal_mask({T})"))
        return (ids != model.config.pad_id)[:, None, None, :] & causal[None, None]
    return target_mask


def _learner_padding(learner: Learner, model: Transformer) -> Callable:
    def source_mask(ids: Any) -> Any:
        ids = np.asarray(ids.data if isinstance(ids, Tensor) else ids)
        return np.asarray(learner.call("padding_mask", ids, model.config.pad_id,
                                       shown=f"padding_mask(ids {ids.shape}, {PAD})"))
    return source_mask


def _largest(a: Any, b: Any) -> tuple[float, tuple[int, ...]]:
    diff = np.abs(a - b).max(axis=-1)                                    # (B, T)
    index = tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))
    return float(diff[index]), index


def _causality(learner: Learner, seed: int) -> None:
    g = np.random.default_rng(seed)
    model = tiny_model(seed, vocab=VOCAB, pad_id=PAD)
    src, tgt = g.integers(4, VOCAB, size=(2, 5)), g.integers(4, VOCAB, size=(2, 6))
    with masks_of(model, target=_learner_causal(learner, model)):
        _, logits = _run(model, src, tgt)
        for j in range(1, tgt.shape[1]):
            changed = tgt.copy()
            changed[:, j:] = (changed[:, j:] - 4 + 1 + g.integers(0, 8)) % (VOCAB - 4) + 4
            _, other = _run(model, src, changed)
            change, (b, i) = _largest(other[:, :j], logits[:, :j])
            if change > 1e-10:
                raise Failed(f"changing the target from position {j} on changed the decoder's "
                             f"output at the earlier position {i} (of sentence {b}, by "
                             f"{change:.3g}): position {i} sees later positions.",
                             _causal_hint(learner))
    _, expected = _run(model, src, tgt)
    change, (b, i) = _largest(logits, expected)
    if change > 1e-10:
        raise Failed(f"the decoder is causal with your mask, but its output at position {i} "
                     f"(of sentence {b}) differs by {change:.3g} from the library's masks': "
                     f"position {i} does not see all of the positions 0 to {i}.",
                     _causal_hint(learner))


def _padding_invariance(learner: Learner, seed: int) -> None:
    g = np.random.default_rng(seed)
    model = tiny_model(seed, vocab=VOCAB, pad_id=PAD)
    lengths, width = (4, 6), 8
    src = np.full((2, width), PAD)
    for row, length in enumerate(lengths):
        src[row, :length] = g.integers(4, VOCAB, size=length)
    tgt = g.integers(4, VOCAB, size=(2, 3))
    with masks_of(model, source=_learner_padding(learner, model)):
        memory, logits = _run(model, src, tgt)
        for row, length in enumerate(lengths):
            alone_memory, alone = _run(model, src[row:row + 1, :length], tgt[row:row + 1])
            change = max(float(np.abs(memory[row, :length] - alone_memory[0]).max()),
                         float(np.abs(logits[row] - alone[0]).max()))
            if change > 1e-10:
                raise Failed(f"sentence {row} ({length} tokens) gives different outputs alone "
                             f"and padded with {width - length} padding tokens (by "
                             f"{change:.3g}): its tokens attend to the padding.",
                             _padding_hint(learner))
    expected_memory, expected = _run(model, src, tgt)
    change = max(float(np.abs(memory - expected_memory).max()),
                 float(np.abs(logits - expected).max()))
    if change > 1e-10:
        raise Failed(f"padding changes nothing with your mask, but the outputs differ by "
                     f"{change:.3g} from the library's masks': a real token is hidden.",
                     _padding_hint(learner))


def _whole_model(learner: Learner, seed: int) -> None:
    g = np.random.default_rng(seed)
    model = tiny_model(seed, vocab=VOCAB, pad_id=PAD)
    src, tgt = g.integers(4, VOCAB, size=(3, 6)), g.integers(4, VOCAB, size=(3, 5))
    src[0, 4:], src[2, 5:], tgt[1, 3:] = PAD, PAD, PAD
    expected = model(src, tgt).data
    padding = _learner_padding(learner, model)

    def target(ids: Any) -> Any:
        ids = np.asarray(ids.data if isinstance(ids, Tensor) else ids)
        T = ids.shape[1]
        causal = np.asarray(learner.call("causal_mask", T, shown=f"causal_mask({T})"))
        return padding(ids) & causal[None, None]
    with masks_of(model, source=padding, target=target):
        try:
            logits = model(src, tgt).data
        except (TypeError, ValueError) as exc:
            raise Failed(f"the model refused padding_mask(tgt) & causal_mask(T)[None, None]: "
                         f"{exc}") from None
    change, (b, i) = _largest(logits, expected)
    if change > 1e-10:
        raise Failed(f"the Transformer's output at target position {i} of sentence {b} differs "
                     f"by {change:.3g} from the library's masks'.",
                     _causal_hint(learner) or _padding_hint(learner))


CASES = (
    TaskCase("causal_mask's shape and dtype", "T = 1, 4, 7: (T, T) bool", _causal_shapes),
    TaskCase("padding_mask's shape and dtype", "ids (2, 5), pad_id 0 and 3: (B, 1, 1, S) bool",
             _padding_shapes),
    TaskCase("causality in the decoder",
             "tiny Transformer, tgt (2, 6): the target changed from each position j on",
             _causality),
    TaskCase("padding invariance in the encoder and the cross-attention",
             f"sources of 4 and 6 tokens, alone and padded to 8 with pad_id {PAD}",
             _padding_invariance),
    TaskCase("the whole Transformer with both masks",
             "src (3, 6) and tgt (3, 5), both with padding: logits against the library's",
             _whole_model),
)

TASK = AlgorithmTask(
    name="masks",
    class_name="padding_mask, causal_mask",
    functions=("padding_mask", "causal_mask"),
    summary="the padding and causal masks (§3.2.3), graded by what they do in a model",
    cases=CASES,
    verdict="the decoder stays causal, padding changes no real token's output, and the "
            "Transformer gives the library's outputs",
)
