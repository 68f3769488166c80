"""One forward pass recorded module by module: who ran, inside whom, on what shapes.

The pictures of the model are drawn from this record, not typed by hand: the names are those
the model registers (``decoder.layers.0.cross_attn``), the nesting is the order the code
called the modules in (``attn_residual`` calls ``self_attn``), and every shape is one the
forward pass computed.

``Module`` has no hooks, so ``record`` puts a wrapper on each module's instance for the one
call (an attribute in front of the class's ``forward``) and removes it afterwards; the
model's own code runs unchanged, in eval mode and without a graph, and each module's mode
(``training``) and attention's ``record_weights`` are put back as they were.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..backend import is_array, to_numpy
from ..nn.attention import MultiHeadAttention
from ..nn.config import TransformerConfig
from ..nn.module import Module
from ..nn.transformer import Transformer


@dataclass
class Mask:
    shape: tuple[int, ...]
    causal: bool        # query i sees no key j > i (a padding mask has one query row: False)
    first: np.ndarray   # the first sentence's mask, (queries or 1, keys), on the host


@dataclass
class Call:
    """One call of one module during the pass."""

    name: str                          # as registered: "encoder.layers.0.self_attn"
    module: Module
    inputs: list[tuple | None]         # each positional argument's shape (None: not an array)
    output: tuple[int, ...] | None
    masks: list[Mask] = field(default_factory=list)  # its boolean array arguments
    same_inputs: bool = False          # the first arguments were one tensor (self-attention)
    weights: tuple[int, ...] | None = None  # attention weights (B, H, T, S)
    children: list[Call] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return type(self.module).__name__

    def find(self, name: str) -> Call | None:
        """The first call of the module ``name`` in this call or below it."""
        for call in self.walk():
            if call.name == name:
                return call
        return None

    def feed_forward_width(self) -> tuple[int, ...] | None:
        """The (..., d_ff) shape inside a PositionwiseFeedForward call (one Function, so no
        call of its layers shows it); None for other modules."""
        if self.kind != "PositionwiseFeedForward" or not self.inputs or self.inputs[0] is None:
            return None
        return self.inputs[0][:-1] + (self.module.w_1.weight.shape[0],)

    def walk(self) -> list[Call]:
        """This call and every call below it, in the order they started."""
        calls, stack = [], [self]
        while stack:
            call = stack.pop()
            calls.append(call)
            stack.extend(reversed(call.children))
        return calls


def record(model: Module, *args: Any, **kwargs: Any) -> tuple[Call, Any]:
    """Run ``model(*args, **kwargs)`` once and return (the call tree, the output)."""
    modules = list(model.named_modules())
    modes = [(m, m.training) for _, m in modules]
    attention = [(m, m.record_weights, m.weights) for _, m in modules
                 if isinstance(m, MultiHeadAttention)]
    stack: list[Call] = []
    top: list[Call] = []
    try:
        model.eval()
        for m, _, _ in attention:
            m.record_weights = True
        for name, module in modules:
            object.__setattr__(module, "forward", _recording(name, module, stack, top))
        with no_grad():
            output = model(*args, **kwargs)
    finally:
        for _, module in modules:
            module.__dict__.pop("forward", None)
        for m, training in modes:
            object.__setattr__(m, "training", training)
        for m, flag, weights in attention:
            m.record_weights, m.weights = flag, weights
    return top[0], output


def _recording(name: str, module: Module, stack: list[Call], top: list[Call]) -> Any:
    forward = type(module).forward.__get__(module)

    def recording_forward(*args: Any, **kwargs: Any) -> Any:
        call = Call(name, module, [_shape(a) for a in args], None,
                    masks=[_mask(a) for a in (*args, *kwargs.values()) if _is_mask(a)],
                    same_inputs=len(args) > 1 and all(a is args[0] for a in args[1:3]))
        (stack[-1].children if stack else top).append(call)
        stack.append(call)
        try:
            output = forward(*args, **kwargs)
        finally:
            stack.pop()
        call.output = _shape(output)
        if isinstance(module, MultiHeadAttention) and module.weights is not None:
            call.weights = tuple(module.weights.shape)
        return output

    return recording_forward


def _array(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


def _shape(x: Any) -> tuple[int, ...] | None:
    x = _array(x)
    return tuple(int(n) for n in x.shape) if is_array(x) else None


def _is_mask(x: Any) -> bool:
    x = _array(x)
    return is_array(x) and x.dtype.kind == "b"


def _mask(x: Any) -> Mask:
    m = to_numpy(_array(x))
    first = m.reshape((-1, *m.shape[-2:]))[0] if m.ndim >= 2 else m[None]   # (T or 1, S)
    rows, cols = first.shape
    above = np.triu(np.ones((rows, cols), bool), k=1)  # key j > query i
    return Mask(tuple(m.shape), bool(rows > 1 and not (m & above).any()), first.copy())


def record_transformer(model: Transformer | TransformerConfig,
                       batch: tuple = (2, 7, 6)) -> tuple[Transformer, Call]:
    """A Transformer's forward pass on one batch, recorded: (the model, its call tree).

    ``model`` may be a configuration, whose model is built here (drawing its initial weights
    from the library's generator, as ``Transformer(config)`` does). ``batch`` is either the
    sizes (B, S, T), for random token ids other than padding, or (source ids (B, S), target
    ids (B, T)).
    """
    if isinstance(model, TransformerConfig):
        model = Transformer(model)
    if not isinstance(model, Transformer):
        raise TypeError(f"expected a Transformer or a TransformerConfig, got "
                        f"{type(model).__name__}.")
    sizes = len(batch) == 3 and all(isinstance(n, numbers.Integral) and not isinstance(n, bool)
                                    and n > 0 for n in batch)
    if sizes:
        B, S, T = (int(n) for n in batch)
        config, rng = model.config, np.random.default_rng(0)
        src = _ids(rng, (B, S), config.src_vocab_size, config.pad_id)            # (B, S)
        tgt = _ids(rng, (B, T), config.tgt_vocab_size, config.pad_id)            # (B, T)
    elif len(batch) == 2 and not any(isinstance(ids, numbers.Number) for ids in batch):
        src, tgt = batch
    else:
        raise ValueError(f"batch must be the sizes (B, S, T), three positive integers, or "
                         f"(source ids, target ids), got {batch!r}.")
    call, _ = record(model, src, tgt)
    return model, call


def _ids(rng: np.random.Generator, shape: tuple[int, int], vocab: int, pad_id: int) -> Any:
    """Random token ids of ``shape`` from the vocabulary, padding left out."""
    ids = rng.integers(0, max(vocab - 1, 1), shape)
    return ids + (ids >= pad_id) if vocab > 1 else ids
