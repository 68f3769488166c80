"""Matrix products on the GPU by cuBLAS itself, so that a CUDA graph can hold them.

cuBLAS supports stream capture, but CuPy refuses to call it while a stream captures (its
``cublas.setStream`` raises NotImplementedError, as of CuPy 14): every ``cupy.matmul`` inside a
capture fails, and a training step is mostly matrix products. So on CuPy the library's products
call ``cublasGemmStridedBatchedEx`` directly, through ctypes, with a cuBLAS handle of its own
and a workspace of its own (cuBLAS's advice for graphs: nothing allocated while capturing).
Eager steps keep ``cupy.matmul``: a call through ctypes cost more host time per product than
CuPy's own (on an H200, a `small` training step of 250 sentences of 16 tokens took 69 ms
against 58 ms, the medians of 22 steps each, alternating in one process), and a replay has
no host time to save on. The handle and its workspace are set up just before a capture
begins, so that nothing is created or allocated for cuBLAS while capturing. Both paths run
cuBLAS with the same compute type (float32 or float64, no TF32), up to the algorithm cuBLAS
picks for each entry point: a replay agrees with the eager step to rounding, not bit for bit.

    matmul(a, b, out=None)       a @ b on CuPy arrays (numpy.matmul's rules): cuBLAS directly
                                 while capturing, cupy.matmul otherwise
    product(a, b, out, xp, run)  the same on any array module, ``run`` making the call
    plan(a, b, xp)               the call's arguments, found from shapes and strides alone
    emulate(gemm, a, b, xp)      what cuBLAS computes from those arguments, in NumPy (tests)

Row-major to column-major. cuBLAS reads matrices column-major; NumPy's are row-major, and the
column-major reading of a row-major (M, N) matrix C is its transpose Cᵀ (N, M). So C = A B is
asked for as Cᵀ = Bᵀ Aᵀ: cuBLAS's first operand is b, its second a, m = N, n = M, k = K, and
C is written row-major, contiguous, with ldc = N. An operand whose rows are contiguous (last
stride 1) is read as it lies (op N, ld = its row stride); one whose columns are contiguous (a
transposed view: first stride 1) is read transposed (op T, ld = its column stride); any other
layout is copied first. The batch axes (broadcast, numpy.matmul's rules) become one strided
batch when every operand steps through them by one stride (0 for an operand broadcast along
all of them); otherwise the operand is copied to a contiguous batch first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from typing import Any

from .. import backend
from ..autograd.graphs import is_capturing, set_up_before_cuda_captures
from ._broadcast import broadcast_shapes

OP_N, OP_T = 0, 1
_DATA_TYPE = {"float32": 0, "float64": 1}           # cudaDataType: CUDA_R_32F, CUDA_R_64F
_COMPUTE_TYPE = {"float32": 68, "float64": 70}       # CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F
_GEMM_DEFAULT = -1                                   # CUBLAS_GEMM_DEFAULT
WORKSPACE_BYTES = 32 << 20                           # cuBLAS's advice for Hopper


@dataclass(frozen=True)
class Gemm:
    """The arguments of one cublasGemmStridedBatchedEx call (operand 1 is b, operand 2 is a),
    and the shape of the result (before a vector operand's axis is dropped)."""

    trans_1: int
    trans_2: int
    m: int
    n: int
    k: int
    ld_1: int
    ld_2: int
    ldc: int
    stride_1: int
    stride_2: int
    stride_c: int
    batch: int
    shape: tuple[int, ...]


def _matrix(x: Any, rows: int, cols: int) -> tuple[int, int] | None:
    """(op, ld) that make cuBLAS read the row-major (rows, cols) matrix x (its last two axes)
    as its transpose, column-major: op N when its rows are contiguous, op T when its columns
    are; None for any other layout. (The stride of an axis of one element means nothing.)"""
    item = x.itemsize
    s_row, s_col = x.strides[-2], x.strides[-1]
    if s_row % item or s_col % item or s_row < 0 or s_col < 0:
        return None
    s_row, s_col = s_row // item, s_col // item
    if (cols == 1 or s_col == 1) and (rows == 1 or s_row >= max(cols, 1)):
        return OP_N, s_row if rows > 1 else max(cols, 1)     # x[i, j] at j + i·ld
    if (rows == 1 or s_row == 1) and (cols == 1 or s_col >= max(rows, 1)):
        return OP_T, s_col if cols > 1 else max(rows, 1)     # x[i, j] at i + j·ld
    return None


def _batch_stride(x: Any, batch_shape: tuple[int, ...]) -> int | None:
    """The one stride (in elements) by which x steps through the flattened batch axes, x
    broadcast to ``batch_shape``; None when no single stride does."""
    lead = x.ndim - 2
    strides = [0] * (len(batch_shape) - lead) + [
        0 if x.shape[i] == 1 else x.strides[i] for i in range(lead)]
    step, expected = None, None
    for n, s in zip(reversed(batch_shape), reversed(strides), strict=True):
        if n == 1:
            continue
        if s % x.itemsize:
            return None
        if step is None:                      # the innermost batch axis of more than one
            step, expected = s, s * n
        elif s != expected:
            return None
        else:
            expected = s * n
    if step is None:
        return 0
    if step < 0:
        return None
    return step // x.itemsize


def plan(a: Any, b: Any, xp: Any) -> tuple[Gemm, Any, Any]:
    """(gemm, a, b) for ``a @ b`` (both at least 2-D, one float dtype, non-empty matrices):
    the operands as given, or copies where their layout asks for one."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch_shape = broadcast_shapes("matmul (batch axes)", a.shape[:-2], b.shape[:-2])
    batch = 1
    for n in batch_shape:
        batch *= n
    operands = []
    for x, rows, cols in ((b, K, N), (a, M, K)):
        layout, stride = _matrix(x, rows, cols), _batch_stride(x, batch_shape)
        if layout is None or stride is None:
            x = xp.ascontiguousarray(xp.broadcast_to(x, batch_shape + x.shape[-2:]))
            layout, stride = _matrix(x, rows, cols), (rows * cols if batch > 1 else 0)
        operands.append((x, layout, stride))
    (b, (op_1, ld_1), stride_1), (a, (op_2, ld_2), stride_2) = operands
    gemm = Gemm(op_1, op_2, N, M, K, ld_1, ld_2, max(N, 1), stride_1, stride_2, M * N, batch,
                batch_shape + (M, N))
    return gemm, a, b


def emulate(gemm: Gemm, a: Any, b: Any, xp: Any) -> Any:
    """What cublasGemmStridedBatchedEx computes from ``gemm`` on the memory of a and b, in
    NumPy: the check of ``plan`` without a GPU. It refuses what cuBLAS refuses (a leading
    dimension under the stored matrix's rows, a size past 32-bit ints) and a read outside an
    operand's memory, reads each operand through as_strided as cuBLAS reads it, and writes C
    with ``ldc`` and ``stride_c`` into a buffer of exactly the result's size."""
    as_strided = xp.lib.stride_tricks.as_strided

    ints = (gemm.m, gemm.n, gemm.k, gemm.ld_1, gemm.ld_2, gemm.ldc, gemm.batch)
    if min(ints) < 1 or max(ints) >= 2 ** 31 or gemm.ldc < gemm.m:
        raise ValueError(f"cuBLAS would refuse these arguments: {gemm}")

    def operand(x, op, ld, stride, rows, cols):  # op(X) as the (batch, rows, cols) it reads
        item = x.itemsize
        stored = (rows, cols) if op == OP_N else (cols, rows)
        if ld < max(1, stored[0]) or stride < 0:
            raise ValueError(f"cuBLAS would refuse ld {ld} for a stored {stored} matrix")
        last = (gemm.batch - 1) * stride + (stored[0] - 1) + (stored[1] - 1) * ld  # elements
        root = x
        while isinstance(root.base, type(x)):
            root = root.base
        start = x.__array_interface__["data"][0]
        end = root.__array_interface__["data"][0] + root.nbytes
        if start + (last + 1) * item > end:
            raise ValueError(f"cuBLAS would read past the operand's memory: {gemm}")
        view = as_strided(x, shape=(gemm.batch,) + stored,
                          strides=(stride * item, item, ld * item))
        return view if op == OP_N else xp.swapaxes(view, -1, -2)

    A = operand(b, gemm.trans_1, gemm.ld_1, gemm.stride_1, gemm.m, gemm.k)   # (batch, m, k)
    B = operand(a, gemm.trans_2, gemm.ld_2, gemm.stride_2, gemm.k, gemm.n)   # (batch, k, n)
    C_col = xp.matmul(A, B)                                                   # (batch, m, n)
    # written column-major with ldc into memory laid out as the row-major (..., M, N) result
    out = xp.full(gemm.batch * gemm.stride_c, xp.nan, dtype=C_col.dtype)
    if (gemm.batch - 1) * gemm.stride_c + (gemm.n - 1) * gemm.ldc + gemm.m > out.size:
        raise ValueError(f"cuBLAS would write past the result: {gemm}")
    item = out.itemsize
    as_strided(out, shape=C_col.shape,
               strides=(gemm.stride_c * item, item, gemm.ldc * item))[...] = C_col
    return out.reshape(gemm.shape)


class _CuBLAS:
    """The cuBLAS library of this process (the one CuPy loaded), a handle and a workspace on
    each device, and the stream each handle was last given."""

    def __init__(self, cupy: Any):
        self.cupy = cupy
        self.lib = ctypes.CDLL(_library_path(cupy))
        self.gemm = self.lib.cublasGemmStridedBatchedEx
        i32, i64, ptr = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
        self.gemm.argtypes = [ptr, i32, i32, i32, i32, i32, ptr, ptr, i32, i32, i64,
                              ptr, i32, i32, i64, ptr, ptr, i32, i32, i64, i32, i32, i32]
        self.gemm.restype = i32
        self.devices: dict[int, list[Any]] = {}   # device -> [handle, workspace, stream]
        self.scalars = {"float32": (ctypes.c_float(1.0), ctypes.c_float(0.0)),
                        "float64": (ctypes.c_double(1.0), ctypes.c_double(0.0))}

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"cuBLAS {what} failed with status {status}.")

    def handle(self) -> Any:
        """This device's handle, on the current stream, with the workspace set."""
        cupy = self.cupy
        device = cupy.cuda.Device().id
        state = self.devices.get(device)
        if state is None:
            handle = ctypes.c_void_p()
            self._check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
            # raw device memory, never freed: no pool's bookkeeping reaches it
            workspace = cupy.cuda.runtime.malloc(WORKSPACE_BYTES)
            state = self.devices[device] = [handle, workspace, None]
        stream = cupy.cuda.get_current_stream().ptr
        if state[2] != stream:  # setting a stream resets the workspace: set both
            self._check(self.lib.cublasSetStream_v2(state[0], ctypes.c_void_p(stream)),
                        "cublasSetStream")
            self._check(self.lib.cublasSetWorkspace_v2(
                state[0], ctypes.c_void_p(state[1]), ctypes.c_size_t(WORKSPACE_BYTES)),
                "cublasSetWorkspace")
            state[2] = stream
        return state[0]

    def run(self, gemm: Gemm, a: Any, b: Any, c: Any) -> None:
        dtype = c.dtype.name
        one, zero = self.scalars[dtype]
        data, compute = _DATA_TYPE[dtype], _COMPUTE_TYPE[dtype]
        status = self.gemm(
            self.handle(), gemm.trans_1, gemm.trans_2, gemm.m, gemm.n, gemm.k,
            ctypes.byref(one), b.data.ptr, data, gemm.ld_1, gemm.stride_1,
            a.data.ptr, data, gemm.ld_2, gemm.stride_2,
            ctypes.byref(zero), c.data.ptr, data, gemm.ldc, gemm.stride_c,
            gemm.batch, compute, _GEMM_DEFAULT)
        self._check(status, "cublasGemmStridedBatchedEx")


def _loaded_cublas() -> str | None:
    """The path of the cuBLAS library in this process's memory map, if one is loaded."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and fields[-1].rsplit("/", 1)[-1].startswith("libcublas.so"):
                    return fields[-1]
    except OSError:  # no /proc: not Linux
        pass
    return None


def _library_path(cupy: Any) -> str:
    """The cuBLAS CuPy uses, found where CuPy loaded it (a first product of CuPy's own loads
    it, where nothing has yet), else by name."""
    found = _loaded_cublas()
    if found is None and not cupy.cuda.get_current_stream().is_capturing():
        one = cupy.ones((1, 1), dtype=cupy.float32)
        one @ one
        found = _loaded_cublas()
    found = found or ctypes.util.find_library("cublas")
    if found is None:
        raise OSError("cuBLAS's library was not found among those this process loaded.")
    return found


_library: _CuBLAS | None = None
_unavailable: str | None = None


def library(cupy: Any) -> _CuBLAS | None:
    """The ctypes cuBLAS of this process, or None (and ``why_unavailable()`` says why);
    ``_set_up`` asks for it, and sets up its handle, before every CUDA capture begins."""
    global _library, _unavailable
    if _library is None and _unavailable is None:
        try:
            _library = _CuBLAS(cupy)
        except (OSError, AttributeError, RuntimeError) as exc:
            if is_capturing():  # a failure of the capture's own making: try again later
                return None
            _unavailable = f"{type(exc).__name__}: {exc}"
    return _library


def why_unavailable() -> str | None:
    return _unavailable


def _set_up() -> None:
    """The handle on the capture stream, with its workspace, before a capture begins."""
    lib = library(backend.get_backend("cuda").xp)
    if lib is not None:
        lib.handle()


set_up_before_cuda_captures(_set_up)


class _Int32Overflow(Exception):
    """A size, leading dimension or batch count past cuBLAS's 32-bit ints."""


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` for CuPy arrays with numpy.matmul's rules: while a CUDA graph is captured, by
    one cuBLAS call (module docstring); otherwise, and for what that does not cover (other or
    mixed dtypes, sizes past 32-bit ints, no cuBLAS found), by ``cupy.matmul``, whose host
    time per call was the lower on an H200 (module docstring)."""
    cupy = backend.get_array_module(a)
    lib = library(cupy) if is_capturing() else None
    if (lib is None or a.dtype != b.dtype or a.dtype.name not in _DATA_TYPE
            or a.ndim == 0 or b.ndim == 0):
        return cupy.matmul(a, b) if out is None else cupy.matmul(a, b, out=out)
    try:
        return product(a, b, out, cupy, lib.run)
    except _Int32Overflow:
        return cupy.matmul(a, b) if out is None else cupy.matmul(a, b, out=out)



def product(a: Any, b: Any, out: Any, xp: Any, run: Any) -> Any:
    """``a @ b`` (at least 1-D each, one dtype) by ``run(gemm, a, b, c)``, which writes the
    contiguous result c: the vector operands, ``out`` and empty sizes are handled here."""
    vector_a, vector_b = a.ndim == 1, b.ndim == 1
    a2 = a[None, :] if vector_a else a                                  # (..., M, K)
    b2 = b[:, None] if vector_b else b                                  # (..., K, N)
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit (K {a2.shape[-1]}"
                         f" against {b2.shape[-2]}).")
    M, K, N = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    batch_shape = broadcast_shapes("matmul (batch axes)", a2.shape[:-2], b2.shape[:-2])
    final = batch_shape + ((M,) if not vector_a else ()) + ((N,) if not vector_b else ())
    if out is not None and out.shape != final:
        raise ValueError(f"matmul: out has shape {out.shape}, the product {final}.")
    direct = out is not None and out.dtype == a.dtype and out.flags.c_contiguous
    c = out if direct else xp.empty(final, dtype=a.dtype)
    if c.size:
        if K == 0:
            c.fill(0)
        else:
            gemm, a2, b2 = plan(a2, b2, xp)
            if max(gemm.m, gemm.n, gemm.k, gemm.ld_1, gemm.ld_2, gemm.ldc, gemm.batch) >= 2 ** 31:
                raise _Int32Overflow
            run(gemm, a2, b2, c)
    if out is None or direct:
        return c
    out[...] = c
    return out
