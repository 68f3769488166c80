"""The one place that knows about NumPy and CuPy.

Every array the autograd core and ``functional/`` touch belongs to a *backend*: an array
module (``xp``: ``numpy`` or ``cupy``) plus the few things the library needs beyond it
(moving arrays to and from the host, a seeded random generator). The rest of the package
asks this module for the array module of an array (``get_array_module``) and never imports
numpy or cupy itself, so the same code runs on the CPU and the GPU.

    use("cpu" | "cuda")                choose the device for new tensors
    MINITRANSFORMER_DEVICE=cuda        the same, from the environment
    get_array_module(x)                numpy, cupy, ... whichever owns x
    to_device(x, "cuda"), to_numpy(x)  move arrays between host and device
    get_default_dtype()                float32; ``with default_dtype("float64"):`` for checks
    manual_seed(0); rng()              seeded random generator of the current device
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# OpenBLAS's threads spin for about 2^28 cycles (a tenth of a second) after every product
# before they sleep, and the worker threads of functional/_blocks.py would share the cores
# with them: attention and layer norm ran far slower in a training step than on their own.
# 2^4 cycles: they sleep at once. Read when OpenBLAS loads, so it only takes effect if NumPy
# is not imported yet; a value already in the environment wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy  # noqa: E402  (after the setting above)

ENV_DEVICE = "MINITRANSFORMER_DEVICE"

_CUDA_INSTALL_HINT = (
    'install the GPU extra with `pip install -e ".[gpu]"` (CuPy for CUDA 12) on a machine '
    "with an NVIDIA GPU, or use the CPU (`minitransformer.use(\"cpu\")` in Python, "
    "`--device cpu` on the command line)"
)


class DeviceError(RuntimeError):
    """A device was asked for that does not exist or cannot be used here."""


@dataclass(frozen=True)
class Backend:
    """An array module and how to reach it from the host.

    ``make_rng(seed)`` returns a generator with ``standard_normal(size, dtype)``,
    ``random(size, dtype)`` and ``integers(low, high, size)``, making arrays of this backend.
    """

    name: str
    xp: Any
    array_types: tuple[type, ...]
    from_host: Callable[[numpy.ndarray], Any]
    to_host: Callable[[Any], numpy.ndarray]
    make_rng: Callable[[int | None], Any]


def _cpu_backend() -> Backend:
    return Backend(
        name="cpu",
        xp=numpy,
        array_types=(numpy.ndarray, numpy.generic),
        from_host=numpy.asarray,
        to_host=numpy.asarray,
        make_rng=numpy.random.default_rng,
    )


def _cuda_backend() -> Backend:
    try:
        import cupy
    except ImportError as exc:
        raise DeviceError(
            f"device 'cuda' needs CuPy, which is not installed: {_CUDA_INSTALL_HINT}."
        ) from exc
    try:
        n_gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken
        raise DeviceError(
            f"device 'cuda' found CuPy but no usable GPU ({exc}): {_CUDA_INSTALL_HINT}."
        ) from exc
    if n_gpus == 0:
        raise DeviceError(f"device 'cuda' found CuPy but no visible GPU: {_CUDA_INSTALL_HINT}.")
    return Backend(
        name="cuda",
        xp=cupy,
        array_types=(cupy.ndarray,),
        from_host=cupy.asarray,
        to_host=cupy.asnumpy,
        make_rng=cupy.random.default_rng,
    )


# Backends are created on first use: "cuda" imports CuPy only when somebody asks for it.
_FACTORIES: dict[str, Callable[[], Backend]] = {"cpu": _cpu_backend, "cuda": _cuda_backend}
_backends: dict[str, Backend] = {"cpu": _cpu_backend()}  # NumPy is always there
_current: str | None = None  # None until first asked: then read from the environment
_default_dtype = numpy.dtype(numpy.float32)
_seed: int | None = None
_rngs: dict[str, Any] = {}


def register_backend(backend: Backend) -> None:
    """Make another array module usable as a device (the test suite's CuPy-like backend)."""
    _backends[backend.name] = backend
    _FACTORIES[backend.name] = lambda: backend


def available_devices() -> list[str]:
    """Names that ``use`` accepts (whether they work on this machine is checked on use)."""
    return sorted(_FACTORIES)


def get_backend(device: str | None = None) -> Backend:
    """The backend of ``device`` (default: the current device)."""
    if type(device) is str and device in _backends:  # "cpu", asked for at every operation
        return _backends[device]
    name = current_device() if device is None else _check_name(device)
    if name not in _backends:
        _backends[name] = _FACTORIES[name]()
    return _backends[name]


def _check_name(device: str) -> str:
    if not isinstance(device, str) or device.lower() not in _FACTORIES:
        choices = ", ".join(repr(d) for d in available_devices())
        raise DeviceError(f"unknown device {device!r}: choose one of {choices}.")
    return device.lower()


def use(device: str) -> None:
    """Make ``device`` ("cpu" or "cuda") the device of new tensors and random numbers."""
    global _current
    name = _check_name(device)
    get_backend(name)  # fail now, with the install hint, rather than at the first tensor
    _current = name


def current_device() -> str:
    """The device new tensors are made on: set by ``use`` or $MINITRANSFORMER_DEVICE, else "cpu"."""
    global _current
    if _current is None:
        from_env = os.environ.get(ENV_DEVICE, "cpu").strip() or "cpu"
        try:
            name = _check_name(from_env)
        except DeviceError as exc:
            raise DeviceError(f"${ENV_DEVICE}={from_env!r}: {exc}") from None
        _current = name
    return _current


@contextlib.contextmanager
def device(name: str) -> Iterator[None]:
    """Temporarily make ``name`` the current device."""
    global _current
    previous = current_device()
    use(name)
    try:
        yield
    finally:
        _current = previous


def backend_of(x: Any) -> Backend:
    """The backend owning array ``x`` (the current one for Python scalars and lists)."""
    if type(x) is numpy.ndarray:  # the common case first: called for every operation
        return _backends["cpu"]
    for backend in list(_backends.values()):
        if isinstance(x, backend.array_types):
            return backend
    return get_backend()


def get_array_module(x: Any) -> Any:
    """``numpy`` for NumPy arrays, ``cupy`` for CuPy arrays, the current module otherwise."""
    return backend_of(x).xp


def device_of(x: Any) -> str:
    return backend_of(x).name


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array of some backend (NumPy scalars count, Python numbers do not)."""
    if type(x) is numpy.ndarray:
        return True
    return any(isinstance(x, b.array_types) for b in list(_backends.values()))


def array_result(x: Any) -> Any:
    """``x`` as an array: NumPy returns full reductions as scalars (numpy.float32), where CuPy
    returns 0-d arrays; make the CPU agree, so every Tensor holds an array."""
    return numpy.asarray(x) if isinstance(x, numpy.generic) else x


def to_numpy(x: Any) -> numpy.ndarray:
    """A NumPy copy (or view, for NumPy input) of array ``x`` on the host."""
    return backend_of(x).to_host(x)


def to_device(x: Any, device: str | None = None) -> Any:
    """Array ``x`` on ``device`` (default: current); unchanged if it is already there."""
    target = get_backend(device)
    if isinstance(x, target.array_types):
        return x
    host = backend_of(x).to_host(x) if is_array(x) else numpy.asarray(x)
    return target.from_host(host)


def as_array(data: Any, dtype: Any = None, device: str | None = None, copy: bool = False) -> Any:
    """An array on ``device`` (default: current, or where ``data`` already is when ``device``
    is None and ``data`` is an array) from Python numbers, nested lists or arrays.

    Python floats take the default dtype; arrays keep theirs unless ``dtype`` is given.
    """
    if is_array(data) and not isinstance(data, numpy.generic):
        target = get_backend(device) if device is not None else backend_of(data)
        moved = to_device(data, target.name)
        return target.xp.array(moved, dtype=dtype, copy=True) if copy else (
            moved if dtype is None else target.xp.asarray(moved, dtype=dtype))
    try:
        host = numpy.array(data, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot make an array from {type(data).__name__} data ({exc}); give "
                        "numbers, nested lists of numbers of equal lengths, or an array.") from None
    if dtype is None and host.dtype.kind == "f" and not isinstance(data, numpy.generic):
        host = host.astype(_default_dtype)
    if host.dtype.kind not in "biuf":
        raise TypeError(f"cannot make an array from {type(data).__name__} data of dtype "
                        f"{host.dtype}; give numbers, nested lists of numbers or an array.")
    return get_backend(device).from_host(host)


# ----------------------------------------------------------------------------- dtypes

def get_default_dtype() -> numpy.dtype:
    """The float dtype of new tensors: float32 for training, float64 inside ``default_dtype``."""
    return _default_dtype


def set_default_dtype(dtype: Any) -> None:
    global _default_dtype
    resolved = as_dtype(dtype)
    if resolved not in (numpy.float16, numpy.float32, numpy.float64):
        raise ValueError(f"default dtype must be float16, float32 or float64, got {resolved}.")
    _default_dtype = resolved


@contextlib.contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    """``with default_dtype("float64"):`` new float tensors are float64 inside the block."""
    previous = _default_dtype
    set_default_dtype(dtype)
    try:
        yield
    finally:
        set_default_dtype(previous)


def as_dtype(dtype: Any) -> numpy.dtype:
    """``numpy.dtype(dtype)``, with an error that names the bad value."""
    try:
        return numpy.dtype(dtype)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a dtype; use e.g. 'float32' or 'float64'.") from None


def is_floating(dtype: Any) -> bool:
    kind = dtype.kind if isinstance(dtype, numpy.dtype) else numpy.dtype(dtype).kind
    return kind == "f"


# ----------------------------------------------------------------------------- random

def manual_seed(seed: int) -> None:
    """Reseed the random generators of every device (parameter init, dropout, ...)."""
    global _seed
    if not isinstance(seed, int | numpy.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")
    _seed = int(seed)
    _rngs.clear()


def rng(device: str | None = None) -> Any:
    """The seeded random generator of ``device`` (default: current), made on first use."""
    backend = get_backend(device)
    if backend.name not in _rngs:
        _rngs[backend.name] = backend.make_rng(_seed)
    return _rngs[backend.name]


def host_rng() -> numpy.random.Generator:
    """The seeded NumPy generator on the host: parameter initialisation draws from it, so a
    model starts from the same numbers on every device."""
    if "host" not in _rngs:
        _rngs["host"] = numpy.random.default_rng(_seed)
    return _rngs["host"]


# ----------------------------------------------------------------------------- memory

def memory_stats(device: str | None = None) -> dict[str, int]:
    """What ``device`` (default: current) holds, in bytes.

    On the GPU, CuPy's memory pool: ``used_bytes`` by live arrays and ``pool_bytes`` held in
    all (freed blocks stay in the pool and serve the next step's arrays of the same size,
    so a training step allocates from the driver only during the first one; release them
    with ``cupy.get_default_memory_pool().free_all_blocks()``). On the CPU, the process's
    peak resident memory so far, ``peak_rss_bytes``.
    """
    backend = get_backend(device)
    if backend.name == "cuda":
        pool = backend.xp.get_default_memory_pool()
        return {"used_bytes": int(pool.used_bytes()), "pool_bytes": int(pool.total_bytes())}
    import sys

    try:
        import resource
    except ImportError:  # Windows has no getrusage
        raise NotImplementedError("memory_stats on the CPU reads the peak resident memory "
                                  "with the resource module, which Windows does not have; use "
                                  "the Task Manager or psutil there.") from None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_rss_bytes": int(peak if sys.platform == "darwin" else peak * 1024)}
