"""A stand-in for CUDA stream capture on the strict device, to test captured steps without a GPU.

CUDA records the kernels a stream is given while it captures, runs none of them, and replays
them later on the same device addresses. The stand-in does the same with the strict device's
operations (``strict_backend.CAPTURE``):

* while recording, each operation is computed (the code goes on with real shapes) and kept
  with its arguments: the very NumPy buffers, and Python scalars baked in, as a kernel's
  arguments are;
* when the recording ends, memory is what CUDA would leave: arrays made before the capture
  hold their values from before (whatever the recorded operations wrote into them is undone)
  and arrays the capture made hold garbage (NaN, or bytes 0xA5): nothing has run yet;
* ``launch`` runs the operations again, in order, on the same buffers, after garbling the
  arrays the capture allocated: on a GPU their memory may be shared by the graph's arrays of
  other moments, so nothing written there before a launch survives to be read (the random
  numbers a replay reads are written to ``static_empty`` buffers, outside that memory);
* refused while recording, as CUDA refuses them (``CaptureRefused``): reading an array on the
  host (get, item, tolist, float, int, bool, str, an array used as an index), copying host
  data to the device, operations whose result's shape depends on values (nonzero, boolean
  indexing: CuPy reads a count on the host), and drawing from a random generator: a replay
  would repeat the capture's numbers (stricter than CuPy, whose generators would go on from
  device state that no seed set between replays reaches).

Allocations (``empty``, ``empty_like``) record nothing: on a GPU they are no kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy
from strict_backend import _VALUE_SHAPED, CAPTURE, INDEXING, StrictArray

from minitransformer.autograd import graphs

_ALLOCATIONS = {"empty", "empty_like"}


class CaptureRefused(RuntimeError):
    """What CUDA answers with cudaErrorStreamCaptureUnsupported."""


def _root(array: numpy.ndarray) -> numpy.ndarray:
    """The array owning ``array``'s memory (a view's base, its base's base, ...)."""
    while isinstance(array.base, numpy.ndarray):
        array = array.base
    return array


def _ndarrays(obj: Any) -> Iterator[numpy.ndarray]:
    """The NumPy arrays in ``obj`` (nested tuples, lists, dicts; a bound method's array)."""
    if isinstance(obj, numpy.ndarray):
        yield obj
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _ndarrays(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _ndarrays(item)
    elif isinstance(getattr(obj, "__self__", None), numpy.ndarray):
        yield obj.__self__


def _store(result: Any, fresh: Any) -> None:
    """Write a replayed operation's ``fresh`` result into the arrays of the recorded
    ``result`` (their addresses are what later operations read)."""
    if isinstance(result, StrictArray):
        target = result._a
        if isinstance(fresh, numpy.ndarray) and numpy.may_share_memory(target, fresh):
            return  # written in place, or a view of memory the replay already wrote
        target[...] = fresh
    elif isinstance(result, list | tuple) and isinstance(fresh, list | tuple):
        for r, f in zip(result, fresh, strict=True):
            _store(r, f)


def _strict_arrays(obj: Any) -> Iterator[StrictArray]:
    if isinstance(obj, StrictArray):
        yield obj
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _strict_arrays(item)


class StrictCapture:
    """Records one graph of strict-device operations, and replays it."""

    def __init__(self) -> None:
        self.operations: list[tuple[Callable[..., Any], tuple, dict, Any]] = []
        self.saved: dict[int, tuple[numpy.ndarray, numpy.ndarray]] = {}  # before the capture
        self.made: dict[int, numpy.ndarray] = {}  # roots the capture allocated
        self.launches = 0

    def record(self, fn: Callable[[], Any]) -> Any:
        if CAPTURE.active is not None:
            raise CaptureRefused("a capture is already recording")
        CAPTURE.active = self
        try:
            return fn()
        finally:
            CAPTURE.active = None
            self._as_cuda_leaves_it()

    def refuse(self, what: str) -> None:
        raise CaptureRefused(f"operation not permitted when stream is capturing: {what}")

    def operation(self, func: Callable[..., Any], args: tuple, kwargs: dict,
                  wrap: Callable[[Any], Any]) -> Any:
        name = getattr(func, "__name__", "")
        if name in _VALUE_SHAPED or (func in INDEXING and any(
                a.dtype == bool for a in _ndarrays(args[1]))):  # CuPy counts the mask on the host
            what = "boolean indexing" if func in INDEXING else name
            self.refuse(f"{what}: the result's shape depends on values")
        for array in _ndarrays((args, kwargs, func)):  # keep what existed before, once
            root = _root(array)
            if id(root) not in self.made and id(root) not in self.saved:
                self.saved[id(root)] = (root, root.copy())
        result = wrap(func(*args, **kwargs))
        if name not in _ALLOCATIONS:
            self.operations.append((func, args, kwargs, result))
        for made in _strict_arrays(result):
            root = _root(made._a)
            if id(root) not in self.saved:
                self.made[id(root)] = root
        return result

    def _as_cuda_leaves_it(self) -> None:
        for root, before in self.saved.values():
            if root.flags.writeable:
                root[...] = before
        self._garble(self.made.values())
        self.saved.clear()  # the buffers stay alive through the operations that use them

    @staticmethod
    def _garble(roots: Any) -> None:
        for root in roots:
            if not root.flags.writeable:
                continue
            if root.dtype.kind in "fc":
                root[...] = numpy.nan
            elif root.flags.c_contiguous:
                root.reshape(-1).view(numpy.uint8)[...] = 0xA5  # garbage bytes
            else:
                root[...] = 1

    def static_empty(self, shape: tuple[int, ...], dtype: Any) -> StrictArray:
        """An array outside the capture's memory: not garbled at a launch."""
        return StrictArray(numpy.empty(shape, dtype=dtype))

    def launch(self, before: Callable[[], None]) -> None:
        before()
        self.launches += 1
        # memory the capture allocated may be shared by the graph's arrays of other moments
        # (a pool hands a block freed early in the step to a later array): what it held
        # before the launch is gone, as _as_cuda_leaves_it garbles it after the capture
        self._garble(self.made.values())
        for func, args, kwargs, result in self.operations:
            _store(result, func(*args, **kwargs))


def install() -> None:
    """Let the strict device capture graphs (idempotent)."""
    graphs.register_capture("strict", StrictCapture)
