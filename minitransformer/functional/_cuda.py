"""Fused CUDA kernels for the CuPy backend: the same arithmetic as the NumPy code paths of the
layers, with each chain of elementwise steps done in one pass over memory.

On a GPU an elementwise operation costs a kernel launch and a full read and write of its
arrays, whatever its arithmetic; softmax written as NumPy operations is seven of them. Here
each elementwise chain is one ``cupy.ElementwiseKernel``, and what works on whole rows (layer
norm, softmax, the loss's row statistics) is one warp-per-row kernel (``ROW_KERNELS``, a
``cupy.RawModule``), written in CUDA C. The layers call these only on CuPy arrays
(``is_cupy``); the NumPy path next to each call is the readable reference, and
``tests/test_cuda.py`` checks every kernel against it on a GPU.

    N rows   C features (d_model)   V vocabulary   T queries   S keys

Kernels are compiled on first use and cached by CuPy. CuPy's memory pool keeps the blocks of
freed arrays for the next step, so after the first step a training step allocates nothing
from the driver; ``backend.memory_stats("cuda")`` reports the pool's use.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import backend


def is_cupy(xp: Any) -> bool:
    """True for the ``cupy`` module (not NumPy, not the strict CPU simulation)."""
    return getattr(xp, "__name__", "") == "cupy"


@functools.cache
def _kernels() -> Any:
    return make_kernels(backend.get_backend("cuda").xp)


# Row kernels: one warp (32 threads) per row of a C-contiguous (rows, C) array, each thread
# taking every 32nd feature, the row's sums and maximum exchanged by warp shuffles. A layer
# norm or a softmax is then one launch instead of a reduction kernel per statistic plus the
# elementwise passes, and on a GPU driven from Python every launch costs more host time
# than these rows take to compute.
ROW_KERNELS = r"""
template <typename T> __device__ T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}
template <typename T> __device__ T warp_max(T v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// y = gain ∘ x̂ + bias, x̂ = (x - μ) · rstd, rstd = 1 / √(mean((x - μ)²) + eps), per row
template <typename T> __device__ void layer_norm_forward(
        const T* x, const T* gain, const T* bias, T eps, int rows, int C,
        T* x_hat, T* y, T* rstd) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const size_t at = (size_t)row * C;
    T sum = 0;
    for (int c = lane; c < C; c += 32) sum += x[at + c];
    const T mean = warp_sum(sum) / C;
    // x - mean keeps the rounding of mean: take its own mean out too (see normalization.py)
    T shift = 0;
    for (int c = lane; c < C; c += 32) shift += x[at + c] - mean;
    shift = warp_sum(shift) / C;
    T squares = 0;
    for (int c = lane; c < C; c += 32) {
        const T d = (x[at + c] - mean) - shift;
        squares += d * d;
    }
    const T r = (T)1 / sqrt(warp_sum(squares) / C + eps);
    for (int c = lane; c < C; c += 32) {
        const T h = ((x[at + c] - mean) - shift) * r;
        x_hat[at + c] = h;
        y[at + c] = h * gain[c] + bias[c];
    }
    if (lane == 0) rstd[row] = r;
}

// dx = rstd (g - mean(g) - x̂ mean(g ∘ x̂)), g = dout ∘ gain, per row
template <typename T> __device__ void layer_norm_backward(
        const T* dout, const T* gain, const T* x_hat, const T* rstd, int rows, int C, T* dx) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const size_t at = (size_t)row * C;
    T sum_g = 0, sum_gx = 0;
    for (int c = lane; c < C; c += 32) {
        const T g = dout[at + c] * gain[c];
        sum_g += g;
        sum_gx += g * x_hat[at + c];
    }
    const T mean_g = warp_sum(sum_g) / C, mean_gx = warp_sum(sum_gx) / C, r = rstd[row];
    for (int c = lane; c < C; c += 32)
        dx[at + c] = r * (dout[at + c] * gain[c] - mean_g - x_hat[at + c] * mean_gx);
}

// s = exp(s - m) / Σ exp(s - m), m the row maximum, in place; 0 for a row of -∞ only, nan
// for a row with a nan or +∞ score (its Σ is nan), as on the CPU: an overflow stays visible
template <typename T> __device__ void softmax_rows(T* s, int rows, int S) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    T* r = s + (size_t)row * S;
    T m = r[0];
    for (int j = lane; j < S; j += 32) m = max(m, r[j]);
    m = warp_max(m);
    if (isinf(m) && m < 0) m = 0;            // no key: every exp(-∞ - 0) is 0, and so is Σ
    T total = 0;
    for (int j = lane; j < S; j += 32) total += exp(r[j] - m);
    total = warp_sum(total);
    for (int j = lane; j < S; j += 32)
        r[j] = total > 0 || isnan(total) ? exp(r[j] - m) / total : (T)0;
}

// m = max_v z, total = Σ_v exp(z - m), sum_z = Σ_v z, per row of the (N, V) logits
template <typename T> __device__ void logit_statistics(
        const T* z, int rows, int V, T* row_max, T* total, T* sum_z) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const T* r = z + (size_t)row * V;
    T m = r[0], plain = 0;
    for (int v = lane; v < V; v += 32) { m = max(m, r[v]); plain += r[v]; }
    m = warp_max(m);
    T sum = 0;
    for (int v = lane; v < V; v += 32) sum += exp(r[v] - m);
    sum = warp_sum(sum);
    plain = warp_sum(plain);
    if (lane == 0) { row_max[row] = m; total[row] = sum; sum_z[row] = plain; }
}

#define MINITRANSFORMER_ROW_KERNELS(T)                                                      \
extern "C" __global__ void minitransformer_layer_norm_forward_##T(                         \
        const T* x, const T* gain, const T* bias, T eps, int rows, int C,                    \
        T* x_hat, T* y, T* rstd) {                                                         \
    layer_norm_forward(x, gain, bias, eps, rows, C, x_hat, y, rstd); }                      \
extern "C" __global__ void minitransformer_layer_norm_backward_##T(                        \
        const T* dout, const T* gain, const T* x_hat, const T* rstd, int rows, int C,        \
        T* dx) {                                                                           \
    layer_norm_backward(dout, gain, x_hat, rstd, rows, C, dx); }                            \
extern "C" __global__ void minitransformer_softmax_rows_##T(T* s, int rows, int S) {        \
    softmax_rows(s, rows, S); }                                                            \
extern "C" __global__ void minitransformer_logit_statistics_##T(                           \
        const T* z, int rows, int V, T* row_max, T* total, T* sum_z) {                     \
    logit_statistics(z, rows, V, row_max, total, sum_z); }

MINITRANSFORMER_ROW_KERNELS(float)
MINITRANSFORMER_ROW_KERNELS(double)
"""
ROWS_PER_BLOCK = 4                      # warps of a block: 128 threads


def make_kernels(cupy: Any) -> Any:
    """The kernels as ``cupy`` objects, not yet compiled: CuPy compiles each one on its first
    call, for that call's dtypes (the row kernels: the module, on its first use, for both).
    ``tests/test_cuda_compile.py`` compiles them all without a GPU."""

    class Kernels:
        # Dropout: keep = [u >= p], y = x · keep / (1 - p). A product, not a select, as on
        # the CPU: a dropped inf or NaN stays NaN, so a NaN check sees it on either device.
        dropout_forward = cupy.ElementwiseKernel(
            "T x, float32 u, float32 p, T scale", "T y, bool keep",
            "keep = u >= p; y = x * (T)keep * scale;",
            "minitransformer_dropout_forward")
        # Dropout backward: dx = dout · keep / (1 - p).
        dropout_backward = cupy.ElementwiseKernel(
            "T dout, bool keep, T scale", "T dx",
            "dx = dout * (T)keep * scale;",
            "minitransformer_dropout_backward")
        # Attention scores: S = scale · (Q Kᵀ), -∞ where the mask forbids (in place).
        mask_and_scale = cupy.ElementwiseKernel(
            "bool keep, T scale, T neg_inf", "T s",
            "s = keep ? s * scale : neg_inf;",
            "minitransformer_mask_and_scale")
        # Softmax backward: dS = P ∘ (dP - rowsum(dout ∘ out)) (in place on dP).
        softmax_backward = cupy.ElementwiseKernel(
            "T p, T delta", "T d",
            "d = p * (d - delta);",
            "minitransformer_softmax_backward")
        # Cross-entropy backward: dz = scale_n · (exp(z - m_n) / Σ_n - ε/V - (1 - ε)[v = y_n]),
        # for element i of the (N, V) logits: row n = i / V, class v = i % V.
        cross_entropy_backward = cupy.ElementwiseKernel(
            "raw T z, raw T m, raw T total, raw T scale, raw int64 target, T eps, int64 V",
            "T dz",
            """
            const long long n = i / V, v = i % V;
            const T p = exp(z[i] - m[n]) / total[n];
            const T q = eps / V + (v == target[n] ? (T)1 - eps : (T)0);
            dz = scale[n] == (T)0 ? (T)0 : scale[n] * (p - q);  // ignored rows: 0, never nan
            """,
            "minitransformer_cross_entropy_backward")
        # Adam: m = β₁m + (1-β₁)g, v = β₂v + (1-β₂)g², θ -= step · m / (√v + ε̂).
        adam = cupy.ElementwiseKernel(
            "T g, T beta1, T beta2, T step, T eps", "T param, T m, T v",
            """
            m = beta1 * m + (1 - beta1) * g;
            v = beta2 * v + (1 - beta2) * g * g;
            param -= step * m / (sqrt(v) + eps);
            """,
            "minitransformer_adam")
        # Layer norm forward and backward, softmax, the logits' row statistics: ROW_KERNELS.
        rows = cupy.RawModule(code=ROW_KERNELS)

    return Kernels


def _rows(array: Any) -> int:
    """How many rows of its last axis ``array`` holds (none when that axis is empty)."""
    return array.size // array.shape[-1] if array.shape[-1] else 0


def _row_kernel(name: str, array: Any, rows: int, *args: Any) -> None:
    """Launch row kernel ``name`` for ``array``'s dtype, one warp on each of ``rows`` rows
    (nothing to launch for none: a grid of no blocks is a CUDA error); Python ints in ``args``
    go as 32-bit ints."""
    if rows == 0:
        return
    ctype = {"float32": "float", "float64": "double"}[array.dtype.name]
    kernel = _kernels().rows.get_function(f"minitransformer_{name}_{ctype}")
    blocks = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    int32 = backend.get_array_module(array).int32                  # the kernels' `int` sizes
    kernel((blocks,), (32 * ROWS_PER_BLOCK,),
           tuple(int32(a) if isinstance(a, int) else a for a in args))


def dropout_forward(x: Any, u: Any, p: float) -> tuple[Any, Any]:
    """(y, keep) with keep = [u >= p] and y = x · keep / (1 - p)."""
    return _kernels().dropout_forward(x, u, p, x.dtype.type(1.0 / (1.0 - p)))


def dropout_backward(dout: Any, keep: Any, p: float) -> Any:
    return _kernels().dropout_backward(dout, keep, dout.dtype.type(1.0 / (1.0 - p)))


def layer_norm_forward(x: Any, gain: Any, bias: Any, eps: float) -> tuple[Any, Any, Any]:
    """(y, x̂, rstd (..., 1)) for x (..., C): one row kernel."""
    cupy = backend.get_array_module(x)
    x = cupy.ascontiguousarray(x)
    C, rows = x.shape[-1], _rows(x)
    x_hat, y = cupy.empty_like(x), cupy.empty_like(x)
    rstd = cupy.empty(x.shape[:-1] + (1,), dtype=x.dtype)
    t = x.dtype.type
    _row_kernel("layer_norm_forward", x, rows, x, cupy.ascontiguousarray(gain, x.dtype),
                cupy.ascontiguousarray(bias, x.dtype), t(eps), rows, C,
                x_hat, y, rstd)
    return y, x_hat, rstd


def layer_norm_backward(dout: Any, gain: Any, x_hat: Any, rstd: Any) -> Any:
    """dx = rstd (g - mean(g) - x̂ mean(g ∘ x̂)), g = dout ∘ gain: one row kernel."""
    cupy = backend.get_array_module(dout)
    dout = cupy.ascontiguousarray(dout)
    C, rows = dout.shape[-1], _rows(dout)
    dx = cupy.empty_like(dout)
    _row_kernel("layer_norm_backward", dout, rows, dout, cupy.ascontiguousarray(gain),
                cupy.ascontiguousarray(x_hat), cupy.ascontiguousarray(rstd), rows,
                C, dx)
    return dx


def masked_softmax_(scores: Any, mask: Any, scale: float) -> Any:
    """softmax(scale · scores) over the last axis, -∞ where ``mask`` is False, in place on
    ``scores`` (..., T, S) when it is C-contiguous (else on a copy; use the result); a row
    with no key left becomes 0. Two launches: mask and scale, then the row kernel."""
    cupy = backend.get_array_module(scores)
    scores = cupy.ascontiguousarray(scores)
    if mask is None:
        scores *= scale
    else:
        t = scores.dtype.type
        _kernels().mask_and_scale(mask, t(scale), t(-float("inf")), scores)
    rows = _rows(scores)
    _row_kernel("softmax_rows", scores, rows, scores, rows, scores.shape[-1])
    return scores


def softmax_backward_(dP: Any, P: Any, delta: Any) -> Any:
    """dS = P ∘ (dP - delta), in place on dP."""
    _kernels().softmax_backward(P, delta, dP)
    return dP


def cross_entropy_statistics(z: Any) -> tuple[Any, Any, Any]:
    """(row maximum m, Σ_v exp(z - m), Σ_v z) of the (N, V) logits, each (N,), in one row
    kernel: no (N, V) buffer."""
    cupy = backend.get_array_module(z)
    z = cupy.ascontiguousarray(z)
    N, V = z.shape
    row_max, total, sum_z = (cupy.empty(N, dtype=z.dtype) for _ in range(3))
    _row_kernel("logit_statistics", z, _rows(z), z, N, V, row_max, total,
                sum_z)
    return row_max, total, sum_z


def cross_entropy_backward(z: Any, row_max: Any, total: Any, row_scale: Any, targets: Any,
                           eps: float) -> Any:
    """dz = row_scale · (softmax(z) - q), q the smoothed one-hot target, in one pass."""
    cupy = backend.get_array_module(z)
    contiguous = cupy.ascontiguousarray
    dz = cupy.empty(z.shape, dtype=z.dtype)
    _kernels().cross_entropy_backward(
        contiguous(z), contiguous(row_max), contiguous(total),
        contiguous(row_scale.reshape(-1).astype(z.dtype)),
        contiguous(targets.reshape(-1).astype(cupy.int64)), z.dtype.type(eps), z.shape[-1], dz)
    return dz


def adam_(param: Any, grad: Any, m: Any, v: Any, beta1: float, beta2: float, step: Any,
          eps: Any) -> None:
    """One Adam update of ``param``, ``m`` and ``v`` in place, in one pass. ``step`` and
    ``eps`` may be 0-d arrays of param's dtype on the GPU (read there by a captured step)."""
    t = param.dtype.type

    def scalar(x: Any) -> Any:
        return x if backend.is_array(x) and not isinstance(x, t) else t(x)
    _kernels().adam(grad, t(beta1), t(beta2), scalar(step), scalar(eps), param, m, v)
