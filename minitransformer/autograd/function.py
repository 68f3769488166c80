"""``Function``: one differentiable operation, the unit every layer is built from.

The contract (DESIGN.md):

* ``forward(*arrays)`` takes raw arrays (NumPy or CuPy, never Tensors) and returns one array or
  a tuple of arrays. It keeps on ``self.saved`` exactly what ``backward`` needs, and on other
  attributes only small configuration (an axis, a shape).
* ``backward(*douts)`` takes the gradient of each output (same shapes as the outputs) and
  returns the gradient of each input, same shape and dtype as that input, ``None`` for inputs
  that are not differentiable (token ids, masks). It never modifies ``douts`` or ``saved``.
* Calling the Function on Tensors runs ``forward`` and, when a gradient is wanted, records the
  node in the graph; the engine (``engine.py``) later calls ``backward`` and then ``release``.
  When it records, ``needs_input_grad`` (one bool per input) is set before ``forward`` runs,
  as PyTorch's ``ctx.needs_input_grad``; without a gradient it keeps its default ``()``.
* Recording also notes the version (``Tensor._version``) of every input whose memory an
  array of ``saved`` (an array, or tuples and lists of them) shares: ``backward`` may read
  those arrays, so if one of them is updated in place in the meantime (an optimizer step
  before ``backward()``), the engine refuses the backward. A Function whose outputs are views
  of its first input's data sets ``returns_views``: they get that input's version count, so an
  update of the input is seen through them too.

A Function instance is used once: ``Mul()(a, b)``. Each concrete Function is followed by its
lowercase wrapper (``def mul(a, b): return Mul()(a, b)``).
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import backend
from .grad_mode import is_grad_enabled
from .tensor import Tensor


class Function:
    saved: Any = None                     # arrays kept for backward, freed after it ran
    needs_input_grad: tuple[bool, ...] = ()
    # Set when the call is recorded in the graph:
    next_edges: tuple | None = None       # per input: (creator, output index), a leaf, or None
    input_meta: tuple = ()                # per input: (shape, dtype) the gradient must have
    output_meta: tuple = ()               # per output: (shape, dtype, device)
    output_refs: tuple = ()               # weak references to the output Tensors
    input_versions: tuple = ()            # per input saved: (index, version counter, count)
    released: bool = False
    returns_views = False                 # outputs view the first input's data (reshape...)

    def forward(self, *arrays: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def backward(self, *douts: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement backward")

    @property
    def name(self) -> str:
        return type(self).__name__

    def release(self) -> None:
        """Free what forward saved; called by the engine once backward has run."""
        self.saved = None
        self.next_edges = None
        self.input_versions = ()
        self.released = True

    def __call__(self, *inputs: Any) -> Any:
        tensors = inputs
        for x in inputs:
            if not isinstance(x, Tensor):
                tensors = _as_tensors(inputs, self)
                break
        arrays = [t.data for t in tensors]
        _check_float_dtypes(self, arrays)
        record = False
        if is_grad_enabled():
            for t in tensors:
                if t.requires_grad:
                    record = True
                    break
        if record:  # known to forward too: it may skip or prepare work for backward
            self.needs_input_grad = tuple(t.requires_grad for t in tensors)
        outputs = self.forward(*arrays)
        single = not isinstance(outputs, tuple)
        if not record:  # decoding's case, kept short: it runs for every operation of a step
            self.saved = None  # nobody will call backward: let the cache go now
            results = ((_result(backend.array_result(outputs)),) if single else
                       tuple(_result(backend.array_result(y)) for y in outputs))
        else:
            outputs = tuple(map(backend.array_result, (outputs,) if single else outputs))
            self.next_edges = tuple(t.grad_edge() if t.requires_grad else None for t in tensors)
            self.input_meta = tuple((t.shape, t.dtype) for t in tensors)
            self.input_versions = _saved_input_versions(tensors, self.saved)
            self.output_meta = tuple((y.shape, y.dtype, backend.device_of(y)) for y in outputs)
            results = tuple(
                Tensor._from_function(y, self, index) if backend.is_floating(y.dtype)
                else Tensor(y)
                for index, y in enumerate(outputs)
            )
            self.output_refs = tuple(weakref.ref(t) for t in results)
        if self.returns_views:  # an update of the input in place is one of these views too
            for result in results:
                result._version_counter = tensors[0]._version_counter
        return results[0] if single else results

    def __repr__(self) -> str:
        return f"<{self.name}{' (released)' if self.released else ''}>"


def _result(y: Any) -> Tensor:
    """An output that nobody will differentiate, as a Tensor."""
    return Tensor._wrap(y) if backend.is_array(y) else Tensor(y)


def _saved_input_versions(tensors: list[Tensor], saved: Any) -> tuple:
    """(index, version counter, count now) of each input whose memory an array of ``saved``
    (an array, or tuples and lists of them) may share: the input itself, a view of it, or an
    array it views. Inputs whose arrays are not saved (add's, embedding's table) are not
    tracked: updating them cannot change what backward reads."""
    arrays = _arrays_in(saved)
    if not arrays:
        return ()
    may_share_memory = backend.get_array_module(arrays[0]).may_share_memory
    versions = []
    for i, t in enumerate(tensors):
        data = t.data
        for array in arrays:
            if may_share_memory(data, array):
                versions.append((i, t._version_counter, t._version_counter[0]))
                break
    return tuple(versions)


def _arrays_in(saved: Any) -> list:
    """The arrays of ``saved``: itself, or those in its (nested) tuples and lists."""
    if not isinstance(saved, tuple | list):
        return [saved] if saved is not None and backend.is_array(saved) else []
    arrays = []
    for item in saved:
        if isinstance(item, tuple | list):
            arrays += _arrays_in(item)
        elif item is not None and backend.is_array(item):
            arrays.append(item)
    return arrays


def _check_float_dtypes(function: Function, arrays: list) -> None:
    """Refuse inputs of two float dtypes: a float64 input would leak float64 into a float32
    step."""
    float_dtype = None
    for array in arrays:
        dtype = array.dtype
        if dtype.kind == "f":
            if float_dtype is None:
                float_dtype = dtype
            elif dtype != float_dtype:
                names = " and ".join(sorted({str(float_dtype), str(dtype)}))
                raise TypeError(f"{function.name}: inputs of dtypes {names} are mixed; cast one "
                                "with .astype(...) so that all have the same float dtype.")


def _as_tensors(inputs: tuple, function: Function) -> list[Tensor]:
    """Wrap non-Tensor inputs. Arrays keep their dtype (token ids stay integers), except
    0-d float arrays; those and Python numbers take the dtype of the first floating Tensor
    input, so ``x * 2`` and ``x * numpy.float64(2)`` stay float32. Arrays move to the device
    of that Tensor."""
    reference = next((x for x in inputs if isinstance(x, Tensor) and x.is_floating), None)
    if reference is None:
        reference = next((x for x in inputs if isinstance(x, Tensor)), None)
    float_dtype = reference.dtype if reference is not None and reference.is_floating else None
    tensors = []
    for x in inputs:
        if isinstance(x, Tensor):
            tensors.append(x)
        elif backend.is_array(x):
            array = backend.to_device(backend.array_result(x),
                                      reference.device if reference is not None else None)
            if float_dtype is not None and array.ndim == 0 and array.dtype.kind == "f":
                array = array.astype(float_dtype)
            tensors.append(Tensor(array))
        else:  # a Python number
            if x is None or isinstance(x, str | bytes):  # None would become nan, silently
                raise TypeError(f"{function.name}: an input is {x!r}, not a number, an array or a "
                                "Tensor; check the value passed (None is often a missing "
                                "return value).")
            xp = reference.xp if reference is not None else backend.get_backend().xp
            tensors.append(Tensor(xp.asarray(x, dtype=float_dtype)))
    return tensors
