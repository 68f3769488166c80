"""Token embedding: look rows of a (V, C) table up by token id (§3.4).

§3.4: "we use learned embeddings to convert the input tokens and output tokens to vectors of
dimension d_model". A lookup is a product with one-hot rows, y = onehot(ids) W, so its
gradient is the transposed product, a scatter-add of the output gradients into the table:

    y[n] = W[ids[n]]                   for every position n
    dW = onehot(ids)ᵀ dout,  i.e.  dW[v] = Σ_{n : ids[n] = v} dout[n]

A token that appears several times collects the sum of its gradients; rows of tokens that do
not appear get zero. With a ``padding_idx``, padding positions embed to the zero vector whatever
the table holds, so they carry nothing into the model and, exactly, the padding row gets no
gradient (PyTorch instead reads the row and forces its gradient to zero, which agrees with the
derivative only while the row stays zero).

Dimensions: ids (...) integer, typically (B, T); W (V, C) with V the vocabulary and
C = d_model; y (..., C).
"""

from __future__ import annotations

from .. import backend
from ..autograd.function import Function
from ..autograd.graphs import is_capturing
from ..autograd.tensor import Tensor
from . import _compiled
from .indexing import on_device_of


class Embedding(Function):
    def __init__(self, padding_idx: int | None = None):
        self.padding_idx = padding_idx

    def forward(self, ids, weight):
        if weight.ndim != 2:
            raise ValueError(f"embedding: weight must be a 2-D table (V, C), got shape "
                             f"{tuple(weight.shape)}.")
        V, C = weight.shape
        if self.padding_idx is not None and not 0 <= self.padding_idx < V:
            raise ValueError(f"embedding: padding_idx {self.padding_idx} is outside the "
                             f"vocabulary of {V} entries (valid ids 0..{V - 1}).")
        _check_ids(ids, V)
        xp = backend.get_array_module(weight)
        # 1. y[n] = W[ids[n]], and 0 where ids[n] is padding
        y = xp.take(weight, ids, axis=0)                                # (..., C)
        if self.padding_idx is not None:
            padding = ids == self.padding_idx                           # (...)
            if xp is backend.get_backend("cpu").xp:
                y[padding] = 0
            else:  # a GPU would count the mask's positions on the host first, waiting for
                xp.copyto(y, 0, where=padding[..., None])  # the device: one pass instead
        self.saved = ids
        self.V = V
        return y

    def backward(self, dout):
        ids = self.saved
        xp = backend.get_array_module(dout)
        C = dout.shape[-1]
        # fwd 1: y[n] = W[ids[n]]  ->  dW[v] = Σ_{n: ids[n] = v} dout[n] (scatter-add: a
        # repeated id accumulates, where dW[ids] = dout would keep only one of its rows)
        dW = xp.zeros((self.V, C), dtype=dout.dtype)                   # (V, C)
        if _compiled.enabled(xp, dout):  # the same sums, added in the same order, compiled
            _compiled.kernels().scatter_add_rows(ids.reshape(-1), dout.reshape(-1, C), dW)
        else:
            xp.add.at(dW, ids.reshape(-1), dout.reshape(-1, C))         # (N,), (N, C)
        if self.padding_idx is not None:
            dW[self.padding_idx] = 0  # fwd 1: padding positions never read the row
        return None, dW


def _check_ids(ids, V: int) -> None:
    """Token ids must be integers in [0, V): name the offending ids otherwise."""
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding: token ids must be integers, got dtype {ids.dtype}; "
                        "convert them with .astype('int64') on the array.")
    if ids.size == 0 or is_capturing():  # a captured step's caller checks before replays
        return
    xp = backend.get_array_module(ids)
    outside = ids < 0
    if V <= xp.iinfo(ids.dtype).max:  # (int8 ids cannot reach a vocabulary of 200)
        outside |= ids >= V
    if not bool(outside.any()):  # one read on the host (a GPU waits for it)
        return
    low, high = int(ids.min()), int(ids.max())
    bad = sorted({i for i in (low, high) if not 0 <= i < V})
    if bad:
        which = f"token id {bad[0]} is" if len(bad) == 1 else f"token ids {low} and {high} are"
        raise ValueError(f"embedding: {which} outside the vocabulary of {V} entries "
                         f"(valid ids 0..{V - 1}).")


def embedding(ids, weight, padding_idx=None):
    """Rows of ``weight`` (V, C) at integer ``ids`` (...) -> (..., C). ``ids`` may be a Tensor,
    an array or a list; it is moved to the weight's device. Positions holding ``padding_idx``
    give zero vectors."""
    ids = Tensor(on_device_of(weight, ids))  # a Tensor: kept as integers, never cast to float
    if ids.dtype.kind not in "iu":  # before the call, whose dtype checks would speak of floats
        raise TypeError(f"embedding: token ids must be integers, got dtype {ids.dtype}; "
                        "convert them with .astype('int64') on the array.")
    return Embedding(padding_idx)(ids, weight)
