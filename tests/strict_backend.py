"""A CPU array backend as strict as CuPy, for testing the GPU code paths without a GPU.

The library reaches NumPy or CuPy only through ``minitransformer.backend`` (``xp``). With
NumPy alone, mistakes that break on a GPU pass unnoticed: an array built with ``numpy``
instead of ``xp``, a NumPy array mixed into device arithmetic, ``numpy.concatenate`` called on
device arrays. This module registers a third device, ``"strict"``, whose arrays
(``StrictArray``) wrap NumPy arrays but refuse those mistakes, so the tests catch them on a
machine without a GPU::

    install()  # once, from the test suite's conftest.py
    with minitransformer.backend.device("strict"):
        ...  # every array is a StrictArray, computed by NumPy

Copied from ``cupy.ndarray``:

* no implicit conversion to NumPy: ``numpy.asarray(x)`` raises TypeError; ``x.get()``,
  ``strict_xp.asnumpy(x)`` and ``float(x)`` / ``int(x)`` / ``bool(x)`` are the explicit ways;
* no mixing with NumPy arrays in operators, ufuncs and ``strict_xp`` functions (TypeError
  "Unsupported type <class 'numpy.ndarray'>"); Python and NumPy scalars are fine;
* ``strict_xp.asarray`` / ``strict_xp.array`` take NumPy arrays and copy them (the explicit
  host-to-device transfer); ``strict_xp.ndarray`` is the array type;
* NumPy ufuncs applied to StrictArrays compute and return StrictArrays (``__array_ufunc__``),
  and results are arrays, 0-d included, never NumPy scalars (``x.sum()`` is a 0-d array).

Deliberately stricter than CuPy:

* every NumPy top-level function refuses StrictArrays (CuPy's ``__array_function__`` forwards
  many to CuPy): library code must call ``xp.concatenate``, never ``numpy.concatenate``;
* NumPy arrays are refused as indices, and NumPy arrays and lists as values in ``x[i] = v``
  (CuPy accepts them and copies them to the device);
* ``.data`` and ``.ctypes`` (host memory) are not reachable.

Copied from CuPy where it differs from NumPy: an integer index array (or list) out of range
wraps round (``x[[0, 3]]`` of three rows takes rows 0 and 0), in reading, writing, ``take``,
``take_along_axis``, ``put`` and ``ufunc.at``, where NumPy raises IndexError; code that relies
on NumPy's error for a device index fails here as on a GPU.

``host_reads()`` logs every read of device values on the host (``.get()``, ``float(x)``,
``bool(x)``, and the nonzero and boolean indexing that CuPy sizes by reading a count): on a
GPU each one waits for the kernels queued before it, so tests bound how many a step makes.

``strict_graphs.py`` adds a stand-in for CUDA stream capture, through the two hooks below
(``CAPTURE``): while it records, every operation is reported to it, and what CUDA refuses
during a capture (reading an array on the host, copying host data in, drawing random numbers
from a generator) raises.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy

from minitransformer import backend

_IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. "
    "Please use `.get()` to construct a NumPy array explicitly."
)
_SCALARS = (bool, int, float, complex, numpy.generic)
_HOST_MEMORY = ("data", "ctypes")  # CuPy's are device pointers: no host buffer to hand out
_HOST_READS = ("item", "tolist", "tobytes")  # methods that hand the values to the host


class CAPTURE:
    """The stream capture in progress (strict_graphs.py), or None: ``active.operation(func,
    args, kwargs, result)`` is told every operation, ``active.refuse(what)`` raises for what a
    capture cannot contain."""

    active: Any = None


def _host(what: str) -> None:
    """``what`` moves data between host and device: refused while a capture records."""
    if CAPTURE.active is not None:
        CAPTURE.active.refuse(what)


_READ_LOGS: list[list[str]] = []  # the logs of the open ``host_reads`` blocks


def _read(what: str) -> None:
    """``what`` waits for the device: it reads values on the host (or, as CuPy's nonzero and
    boolean indexing do, a count that sizes its result). Refused while a capture records;
    logged by every open ``host_reads`` block."""
    _host(what)
    for log in _READ_LOGS:
        log.append(what)


@contextlib.contextmanager
def host_reads() -> Iterator[list[str]]:
    """What the code inside the block read from the device on the host, one entry a read: on
    a GPU each one waits for every kernel queued before it (a synchronisation of the stream).

        with host_reads() as reads:
            beam_search(...)
        assert len(reads) <= steps + 1
    """
    log: list[str] = []
    _READ_LOGS.append(log)
    try:
        yield log
    finally:
        _READ_LOGS.remove(log)


_VALUE_SHAPED = {"nonzero", "flatnonzero", "argwhere", "unique", "compress", "extract"}


def _value_shaped(func: Any, key: Any = None) -> str | None:
    """What a call of ``func`` (or an index ``key``) reads on the host to size its result, as
    CuPy does (nonzero, boolean indexing), or None."""
    name = getattr(func, "__name__", "")
    if name in _VALUE_SHAPED:
        return name
    keys = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, StrictArray) and k.dtype == bool for k in keys):
        return "boolean indexing"
    return None


def _wrapped_round(key: Any, shape: tuple) -> Any:
    """An index with its integer arrays (lists too, which CuPy turns into arrays) taken modulo
    their axis's size, as CuPy's gathers and scatters read them: CuPy wraps an index out of
    range round, NumPy refuses it. The axes are walked here, apart from the library's own
    reading of an index, which the tests hold to NumPy's: after an ellipsis, the parts that
    follow take the last axes."""
    parts = [_as_positions(p) if isinstance(p, list | tuple) else p
             for p in (key if isinstance(key, tuple) else (key,))]

    def span(part: Any) -> int:
        if part is None or part is Ellipsis or isinstance(part, bool | numpy.bool_):
            return 0
        return part.ndim if isinstance(part, numpy.ndarray) and part.dtype == bool else 1
    wrapped, axis = [], 0
    for i, part in enumerate(parts):
        if part is Ellipsis:
            axis = len(shape) - sum(span(p) for p in parts[i + 1:])
        elif (isinstance(part, numpy.ndarray) and part.dtype.kind in "iu"
              and 0 <= axis < len(shape) and shape[axis]):
            part = part % shape[axis]
        wrapped.append(part)
        axis += span(part)
    return tuple(wrapped) if isinstance(key, tuple) else wrapped[0]


def _as_positions(part: list | tuple) -> Any:
    """A list or tuple in an index as CuPy reads it: an array, an empty one of integers."""
    array = numpy.asarray(part)
    return array.astype(numpy.intp) if array.size == 0 else array


def _getitem(a: numpy.ndarray, key: Any) -> Any:
    return a[_wrapped_round(key, a.shape)]


def _setitem(a: numpy.ndarray, key: Any, value: Any) -> None:
    a[_wrapped_round(key, a.shape)] = value


INDEXING = (_getitem, _setitem)  # x[key] and x[key] = value, as a capture records them


def _take(a: numpy.ndarray, indices: Any, axis: int | None = None, out: Any = None) -> Any:
    """``cupy.take``: indices out of range wrap round."""
    return numpy.take(a, indices, axis=axis, out=out, mode="wrap")


def _take_along_axis(arr: numpy.ndarray, indices: Any, axis: int | None = -1) -> Any:
    """``cupy.take_along_axis`` (fancy indexing underneath): indices out of range wrap round."""
    n = arr.size if axis is None else arr.shape[axis]
    return numpy.take_along_axis(arr, indices % n if n else indices, axis)


def _put(a: numpy.ndarray, indices: Any, values: Any, mode: str = "wrap") -> None:
    """``cupy.put``: wrapping by default."""
    numpy.put(a, indices, values, mode=mode)


def _ufunc_at(ufunc: numpy.ufunc) -> Callable[..., None]:
    """``ufunc.at`` as CuPy's scatter runs it: indices out of range wrap round."""
    def at(a: numpy.ndarray, indices: Any, b: Any = None) -> None:
        key = _wrapped_round(indices, a.shape)
        ufunc.at(a, key) if b is None else ufunc.at(a, key, b)
    at.__name__ = f"{ufunc.__name__}.at"
    return at


def _unsupported(value: Any) -> TypeError:
    return TypeError(
        f"Unsupported type {type(value)}: NumPy arrays do not mix with device arrays; "
        "copy them over with xp.asarray(...) first."
    )


def _unwrap(obj: Any, seen: dict[int, StrictArray], allow_host: bool = False) -> Any:
    """``obj`` with StrictArrays replaced by their NumPy arrays, looking inside lists and
    tuples. NumPy arrays are refused, or copied when ``allow_host`` (``xp.asarray``).
    ``seen`` maps each unwrapped array to its StrictArray, so results can be mapped back."""
    if isinstance(obj, StrictArray):
        seen[id(obj._a)] = obj
        return obj._a
    if isinstance(obj, numpy.ndarray):
        if allow_host:
            _host("copying a host array to the device (xp.asarray of a NumPy array)")
            return obj.copy()
        raise _unsupported(obj)
    if isinstance(obj, list | tuple):
        items = [_unwrap(item, seen, allow_host) for item in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _wrap(obj: Any, seen: dict[int, StrictArray] | None = None) -> Any:
    """``obj`` with NumPy arrays and scalars turned into StrictArrays (tuples, named tuples and
    lists included). An array that came in as a StrictArray (``out=``) goes back as that one."""
    if isinstance(obj, numpy.ndarray):
        if seen is not None and id(obj) in seen:
            return seen[id(obj)]
        return StrictArray(obj)
    if isinstance(obj, numpy.generic):
        return StrictArray(numpy.asarray(obj))
    if isinstance(obj, list):
        return [_wrap(item, seen) for item in obj]
    if isinstance(obj, tuple):
        items = [_wrap(item, seen) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


def _call(
    func: Callable[..., Any], args: Any, kwargs: dict[str, Any], allow_host: bool = False
) -> Any:
    if _READ_LOGS and (name := _value_shaped(func)) is not None:
        _read(f"{name}: the result's size is read on the host")
    seen: dict[int, StrictArray] = {}
    args = _unwrap(args, seen, allow_host)
    kwargs = {key: _unwrap(value, seen, allow_host) for key, value in kwargs.items()}
    if CAPTURE.active is None:
        return _wrap(func(*args, **kwargs), seen)
    return CAPTURE.active.operation(func, args, kwargs, lambda raw: _wrap(raw, seen))


def _operand(other: Any) -> Any:
    """An operand of an operator, or a value for ``x[i] = v``: a StrictArray or a scalar."""
    if isinstance(other, StrictArray):
        return other._a
    if isinstance(other, _SCALARS):
        return other
    raise _unsupported(other)


class StrictFunction:
    """A NumPy callable (function, ufunc, method) taking and returning StrictArrays.

    Attributes are forwarded, so ufunc methods keep working: ``strict_xp.add.at(a, i, v)``.
    """

    __slots__ = ("_func", "_allow_host")

    def __init__(self, func: Callable[..., Any], allow_host: bool = False) -> None:
        self._func = func
        self._allow_host = allow_host

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call(self._func, args, kwargs, self._allow_host)

    def __getattr__(self, name: str) -> Any:
        if name in StrictFunction.__slots__:
            raise AttributeError(name)
        if name == "at" and isinstance(self._func, numpy.ufunc):
            return StrictFunction(_ufunc_at(self._func))
        return _wrap_attribute(getattr(self._func, name))

    def __repr__(self) -> str:
        return f"<strict {self._func!r}>"


def _wrap_attribute(attr: Any) -> Any:
    """Functions become StrictFunctions, arrays StrictArrays; classes (dtypes) stay as they are."""
    if callable(attr) and not isinstance(attr, type):
        return StrictFunction(attr)
    return _wrap(attr)


_OBSERVERS: list[Callable[[numpy.ndarray], None]] = []


@contextlib.contextmanager
def created_dtypes() -> Iterator[set[numpy.dtype]]:
    """The dtypes of every array the strict device creates inside the block (results of
    operators, ufuncs, reductions, matmuls and ``xp`` functions, temporaries included)."""
    seen: set[numpy.dtype] = set()
    _OBSERVERS.append(lambda array: seen.add(array.dtype))
    try:
        yield seen
    finally:
        _OBSERVERS.pop()


class StrictArray:
    """A NumPy array that behaves like a ``cupy.ndarray``: see the module docstring."""

    __slots__ = ("_a",)
    __hash__ = None  # type: ignore[assignment]  # mutable, like numpy and cupy arrays

    def __init__(self, array: numpy.ndarray) -> None:
        if not isinstance(array, numpy.ndarray):
            raise TypeError(f"StrictArray wraps a numpy.ndarray, not {type(array)}.")
        self._a = array
        for observe in _OBSERVERS:
            observe(array)

    # -- leaving the "device": only explicitly
    def get(self) -> numpy.ndarray:
        """A NumPy copy on the host (``cupy.ndarray.get``)."""
        _read("x.get(): copying an array to the host")
        return self._a.copy()

    def __array__(self, *args: Any, **kwargs: Any) -> numpy.ndarray:
        raise TypeError(_IMPLICIT)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        name = getattr(func, "__name__", repr(func))
        raise TypeError(
            f"{func.__module__}.{name}() was given a StrictArray: device arrays need the "
            f"array module, call xp.{name}(...) (xp = get_array_module(x))."
        )

    def __array_ufunc__(self, ufunc: numpy.ufunc, method: str, *inputs: Any, **kwargs: Any):
        return _call(_ufunc_at(ufunc) if method == "at" else getattr(ufunc, method), inputs,
                     kwargs)

    # -- attributes and methods of the wrapped array
    @property
    def shape(self) -> tuple[int, ...]:
        return self._a.shape

    @property
    def dtype(self) -> numpy.dtype:
        return self._a.dtype

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def size(self) -> int:
        return self._a.size

    def __getattr__(self, name: str) -> Any:
        # Refusing private and dunder names keeps __array_interface__, __array_struct__,
        # __dlpack__ (the ways NumPy would find the host buffer) out of reach.
        if name.startswith("_") or name in _HOST_MEMORY:
            raise AttributeError(f"'StrictArray' object has no attribute {name!r}")
        if name in _HOST_READS:
            _read(f"x.{name}(): reading an array on the host")
        return _wrap_attribute(getattr(self._a, name))

    # -- indexing
    def __getitem__(self, key: Any) -> Any:
        if _READ_LOGS and _value_shaped(None, key) is not None:
            _read("boolean indexing: the selected count is read on the host")
        key = _unwrap(key, {})
        if CAPTURE.active is None:
            return _wrap(_getitem(self._a, key))
        return CAPTURE.active.operation(_getitem, (self._a, key), {}, _wrap)

    def __setitem__(self, key: Any, value: Any) -> None:
        if _READ_LOGS and _value_shaped(None, key) is not None:
            _read("boolean indexing: the selected count is read on the host")
        key, value = _unwrap(key, {}), _operand(value)
        if CAPTURE.active is None:
            _setitem(self._a, key, value)
        else:
            CAPTURE.active.operation(_setitem, (self._a, key, value), {}, _wrap)

    # -- Python protocols
    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Iterator[Any]:
        return (_wrap(item) for item in self._a)

    def __bool__(self) -> bool:
        _read("bool(x): reading an array on the host")
        return bool(self._a)

    def __float__(self) -> float:
        _read("float(x): reading an array on the host")
        return float(self._a)

    def __int__(self) -> int:
        _read("int(x): reading an array on the host")
        return int(self._a)

    def __complex__(self) -> complex:
        _read("complex(x): reading an array on the host")
        return complex(self._a)

    def __index__(self) -> int:
        if self._a.size != 1 or self._a.dtype.kind not in "iu":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        _read("using an array as an index: reading it on the host")
        return int(self._a.item())

    def __copy__(self) -> StrictArray:
        return StrictArray(self._a.copy())

    def __deepcopy__(self, memo: dict[int, Any]) -> StrictArray:
        return StrictArray(self._a.copy())

    def __repr__(self) -> str:
        # "array(...)" -> "StrictArray(...)", continuation lines shifted to stay aligned
        return "Strict" + repr(self._a).replace("array", "Array", 1).replace("\n", "\n      ")

    def __str__(self) -> str:
        _read("str(x): reading an array on the host")
        return str(self._a)

    def __format__(self, spec: str) -> str:
        _read("format(x): reading an array on the host")
        return format(self._a, spec)


def _operator(name: str, inplace: bool = False) -> Callable[..., Any]:
    """The StrictArray operator ``name``: NumPy's, on a StrictArray or scalar operand."""
    method = getattr(numpy.ndarray, name)

    def operator(self: StrictArray, *other: Any) -> Any:
        operands = (self._a, *map(_operand, other))
        if CAPTURE.active is not None:
            result = CAPTURE.active.operation(method, operands, {}, _wrap)
        else:
            result = _wrap(method(*operands))
        return self if inplace else result

    operator.__name__ = name
    return operator


for _op in "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift".split():
    setattr(StrictArray, f"__{_op}__", _operator(f"__{_op}__"))
    setattr(StrictArray, f"__r{_op}__", _operator(f"__r{_op}__"))
    setattr(StrictArray, f"__i{_op}__", _operator(f"__i{_op}__", inplace=True))
for _op in "divmod rdivmod eq ne lt le gt ge neg pos abs invert".split():
    setattr(StrictArray, f"__{_op}__", _operator(f"__{_op}__"))


class StrictGenerator:
    """``numpy.random.default_rng(seed)`` making StrictArrays (``cupy.random.default_rng``)."""

    __slots__ = ("_rng",)

    def __init__(self, seed: int | None = None) -> None:
        self._rng = numpy.random.default_rng(seed)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"'StrictGenerator' object has no attribute {name!r}")
        if CAPTURE.active is not None:
            CAPTURE.active.refuse(f"drawing random numbers (generator.{name}): a replay would "
                                  "repeat the capture's draw; draw them outside the graph")
        return _wrap_attribute(getattr(self._rng, name))


def _asnumpy(x: Any) -> numpy.ndarray:
    """``cupy.asnumpy``: a host copy of a StrictArray; anything else through numpy.asarray."""
    return x.get() if isinstance(x, StrictArray) else numpy.asarray(x)


def _get_array_module(*args: Any) -> Any:
    """``cupy.get_array_module``: strict_xp if any argument is a StrictArray, else numpy."""
    return strict_xp if any(isinstance(arg, StrictArray) for arg in args) else numpy


class StrictModule(types.ModuleType):
    """A NumPy (sub)module whose functions take and return StrictArrays (``strict_xp``)."""

    def __init__(self, module: types.ModuleType, overrides: dict[str, Any]) -> None:
        super().__init__(f"strict_xp:{module.__name__}")
        self._module = module
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._overrides:
            value = self._overrides[name]
        else:
            attr = getattr(self._module, name)
            if isinstance(attr, types.ModuleType):
                value = StrictModule(attr, {})
            elif callable(attr) and not isinstance(attr, type):
                value = StrictFunction(attr)
            else:
                return attr  # dtypes, finfo, constants (pi, newaxis): unchanged
        setattr(self, name, value)  # cache: the next look-up does not come here
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._module)) | set(self._overrides))


strict_xp = StrictModule(
    numpy,
    {
        "ndarray": StrictArray,
        "asarray": StrictFunction(numpy.asarray, allow_host=True),
        "array": StrictFunction(numpy.array, allow_host=True),
        "asnumpy": _asnumpy,
        "take": StrictFunction(_take),
        "take_along_axis": StrictFunction(_take_along_axis),
        "put": StrictFunction(_put),
        "get_array_module": _get_array_module,
        "random": StrictModule(numpy.random, {"default_rng": StrictGenerator}),
    },
)

STRICT_BACKEND = backend.Backend(
    name="strict",
    xp=strict_xp,
    array_types=(StrictArray,),
    from_host=lambda a: (_host("copying a host array to the device"),
                         StrictArray(numpy.array(a, copy=True)))[1],
    to_host=lambda a: a.get(),
    make_rng=StrictGenerator,
)


def install() -> backend.Backend:
    """Register the ``"strict"`` device with ``minitransformer.backend`` (idempotent)."""
    backend.register_backend(STRICT_BACKEND)
    return STRICT_BACKEND
