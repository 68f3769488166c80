"""Fused CUDA kernels for the CuPy backend: the same arithmetic as the NumPy code paths of the
layers, with each chain of elementwise steps done in one pass over memory.

On a GPU an elementwise operation costs a kernel launch and a full read and write of its
arrays, whatever its arithmetic; softmax written as NumPy operations is seven of them. Here
each chain is one ``cupy.ElementwiseKernel`` (or a ``cupy.ReductionKernel`` where a row is
summed), written in CUDA C. The layers call these only on CuPy arrays (``is_cupy``); the NumPy
path next to each call is the readable reference, and ``tests/test_cuda.py`` checks every
kernel against it on a GPU.

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


def make_kernels(cupy: Any) -> Any:
    """The kernels as ``cupy`` objects, not yet compiled: CuPy compiles each one on its first
    call, for that call's dtypes. ``tests/test_cuda_compile.py`` compiles them without a GPU."""

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
        # Layer norm: Σ_c (x - μ)² per row (μ broadcast from (N, 1)).
        squared_deviation_sum = cupy.ReductionKernel(
            "T x, T mean", "T y", "(x - mean) * (x - mean)", "a + b", "y = a", "0",
            "minitransformer_squared_deviation_sum")
        # Layer norm: x̂ = (x - μ) · rstd, y = gain ∘ x̂ + bias.
        layer_norm_forward = cupy.ElementwiseKernel(
            "T x, T mean, T rstd, T gain, T bias", "T x_hat, T y",
            "x_hat = (x - mean) * rstd; y = x_hat * gain + bias;",
            "minitransformer_layer_norm_forward")
        # Layer norm backward: dx = rstd (dout ∘ gain - mean(g) - x̂ mean(g ∘ x̂)).
        layer_norm_backward = cupy.ElementwiseKernel(
            "T dout, T gain, T x_hat, T rstd, T mean_g, T mean_gx", "T dx",
            "dx = rstd * (dout * gain - mean_g - x_hat * mean_gx);",
            "minitransformer_layer_norm_backward")
        # Attention scores: S = scale · (Q Kᵀ), -∞ where the mask forbids (in place).
        mask_and_scale = cupy.ElementwiseKernel(
            "bool keep, T scale, T neg_inf", "T s",
            "s = keep ? s * scale : neg_inf;",
            "minitransformer_mask_and_scale")
        # Softmax: Σ_j exp(s_j - m) per row, m the row maximum (0 for a fully masked row).
        exp_sum = cupy.ReductionKernel(
            "T s, T m", "T y", "exp(s - m)", "a + b", "y = a", "0",
            "minitransformer_exp_sum")
        # Softmax: P = exp(s - m) / Σ, 0 where the row had no key (Σ = 0) (in place).
        normalize = cupy.ElementwiseKernel(
            "T m, T total", "T s",
            "s = total > 0 ? exp(s - m) / total : (T)0;",
            "minitransformer_softmax_normalize")
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
            dz = scale[n] * (p - q);
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

    return Kernels


def dropout_forward(x: Any, u: Any, p: float) -> tuple[Any, Any]:
    """(y, keep) with keep = [u >= p] and y = x · keep / (1 - p)."""
    return _kernels().dropout_forward(x, u, p, x.dtype.type(1.0 / (1.0 - p)))


def dropout_backward(dout: Any, keep: Any, p: float) -> Any:
    return _kernels().dropout_backward(dout, keep, dout.dtype.type(1.0 / (1.0 - p)))


def layer_norm_forward(x: Any, gain: Any, bias: Any, eps: float) -> tuple[Any, Any, Any]:
    """(y, x̂, rstd (..., 1)) for x (..., C)."""
    cupy = backend.get_array_module(x)
    C = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)                                      # (..., 1)
    var = _kernels().squared_deviation_sum(x, mean, axis=-1, keepdims=True) / C
    rstd = 1.0 / cupy.sqrt(var + eps)                                          # (..., 1)
    x_hat, y = _kernels().layer_norm_forward(x, mean, rstd, gain, bias)
    return y, x_hat, rstd


def layer_norm_backward(dout: Any, gain: Any, x_hat: Any, rstd: Any) -> Any:
    """dx = rstd (g - mean(g) - x̂ mean(g ∘ x̂)), g = dout ∘ gain."""
    C = x_hat.shape[-1]
    mean_g = (dout @ gain)[..., None] / C                                      # (..., 1)
    mean_gx = ((dout * x_hat) @ gain)[..., None] / C                           # (..., 1)
    return _kernels().layer_norm_backward(dout, gain, x_hat, rstd, mean_g, mean_gx)


def masked_softmax_(scores: Any, mask: Any, scale: float) -> Any:
    """softmax(scale · scores) over the last axis, -∞ where ``mask`` is False, in place on
    ``scores`` (..., T, S); a row with no key left becomes 0."""
    cupy = backend.get_array_module(scores)
    kernels = _kernels()
    if mask is None:
        scores *= scale
    else:
        t = scores.dtype.type
        kernels.mask_and_scale(mask, t(scale), t(-float("inf")), scores)
    row_max = scores.max(axis=-1, keepdims=True)                               # (..., T, 1)
    row_max = cupy.where(cupy.isneginf(row_max), scores.dtype.type(0), row_max)
    total = kernels.exp_sum(scores, row_max, axis=-1, keepdims=True)           # (..., T, 1)
    kernels.normalize(row_max, total, scores)
    return scores


def softmax_backward_(dP: Any, P: Any, delta: Any) -> Any:
    """dS = P ∘ (dP - delta), in place on dP."""
    _kernels().softmax_backward(P, delta, dP)
    return dP


def cross_entropy_statistics(z: Any) -> tuple[Any, Any]:
    """(row maximum m, Σ_v exp(z - m)) of the (N, V) logits, both (N,): no (N, V) buffer."""
    row_max = z.max(axis=-1)                                                   # (N,)
    total = _kernels().exp_sum(z, row_max[:, None], axis=-1)                   # (N,)
    return row_max, total


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


def adam_(param: Any, grad: Any, m: Any, v: Any, beta1: float, beta2: float, step: float,
          eps: float) -> None:
    """One Adam update of ``param``, ``m`` and ``v`` in place, in one pass."""
    t = param.dtype.type
    _kernels().adam(grad, t(beta1), t(beta2), t(step), t(eps), param, m, v)
