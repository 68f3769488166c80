"""Data parallelism's two collectives on a model: one copy of the weights, one sum of gradients.

Every process holds the whole model and computes the gradient of its own share of the step's
batches. If each gradient is the gradient of a *sum* of token losses, their sum over processes
is the gradient of the sum over the whole step, exactly what one process would compute with
every batch, so dividing it by the step's number of target tokens gives the same mean
gradient (up to the order of the additions; the trainer divides each batch's sum before
backward, ``cross_entropy``'s ``normalizer``). Each process then applies the same Adam update
to the same weights, and the copies stay identical without ever being sent again.

The gradients travel as one flat buffer, ``n`` numbers for ``n`` weights: one all-reduce per
step, not one per parameter (each collective pays a latency; a few large messages use the
network well). A buffer of NumPy arrays goes through MPI; of CuPy arrays, through NCCL, on the
GPU. The parameters' gradients become views into the reduced buffer: no copy back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .communicator import Communicator


def broadcast_arrays(arrays: Sequence[Any], communicator: Communicator, root: int = 0) -> None:
    """Overwrite ``arrays`` (same shapes on every process) with root's, in place."""
    if communicator.size == 1 or not arrays:
        return
    for group in _by_dtype(arrays):
        xp = _array_module(group[0])
        flat = xp.concatenate([a.reshape(-1) for a in group])
        communicator.broadcast(flat, root)
        offset = 0
        for a in group:
            a[...] = flat[offset:offset + a.size].reshape(a.shape)
            offset += a.size


def broadcast_parameters(params: Sequence[Any], communicator: Communicator,
                         root: int = 0) -> None:
    """Give every process root's weights (at the start of a run: the processes' random
    initialisations differ unless seeded alike, and a resumed run's were read by root)."""
    broadcast_arrays([p.data for p in params], communicator, root)


def allreduce_gradients(params: Sequence[Any], communicator: Communicator) -> None:
    """Sum each parameter's gradient over the processes, in place.

    A parameter that has no gradient on some process (``grad`` None: it was not used by that
    share of the batches) contributes zeros there; one that has none on every process keeps
    ``grad`` None, as in a single process."""
    if communicator.size == 1:
        return
    has_grad = np.array([p.grad is not None for p in params], dtype=np.float64)
    communicator.allreduce_sum(has_grad)
    used = [p for p, flag in zip(params, has_grad, strict=True) if flag > 0]
    for group in _by_dtype([p.data for p in used], items=used):
        xp = _array_module(group[0].data)
        flat = xp.empty(sum(p.data.size for p in group), dtype=group[0].data.dtype)
        offset = 0
        for p in group:
            part = flat[offset:offset + p.data.size]
            if p.grad is None:
                part[...] = 0
            else:
                part[...] = p.grad.reshape(-1)
            offset += p.data.size
        communicator.allreduce_sum(flat)
        offset = 0
        for p in group:
            p.grad = flat[offset:offset + p.data.size].reshape(p.data.shape)
            offset += p.data.size


def allreduce_scalars(values: Sequence[float], communicator: Communicator) -> list[float]:
    """The sums over the processes of a few numbers (a loss, a count), in float64."""
    if communicator.size == 1:
        return [float(v) for v in values]
    buffer = np.array(values, dtype=np.float64)
    communicator.allreduce_sum(buffer)
    return [float(v) for v in buffer]


def _by_dtype(arrays: Sequence[Any], items: Sequence[Any] | None = None) -> list[list[Any]]:
    """``items`` (default: the arrays) grouped by their array's dtype, in order: one buffer
    per dtype."""
    groups: dict[Any, list[Any]] = {}
    for array, item in zip(arrays, items if items is not None else arrays, strict=True):
        groups.setdefault(np.dtype(array.dtype), []).append(item)
    return list(groups.values())


def _array_module(array: Any) -> Any:
    from .. import backend

    return backend.get_array_module(array)
