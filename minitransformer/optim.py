"""Adam (Kingma & Ba, 2015) and the paper's learning-rate schedule (§5.3).

    m ← β₁ m + (1 − β₁) g            v ← β₂ v + (1 − β₂) g²
    m̂ = m / (1 − β₁ᵗ)                v̂ = v / (1 − β₂ᵗ)
    θ ← θ − lr · m̂ / (√v̂ + ε)

The paper used β₁ = 0.9, β₂ = 0.98, ε = 1e-9 and varied the rate as

    lrate = d_model^−0.5 · min(step^−0.5, step · warmup_steps^−1.5),    warmup_steps = 4000

rising linearly for the first warmup_steps, then decaying with the inverse square root.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable
from typing import Any

from . import backend
from .autograd.tensor import Tensor
from .functional import _compiled, _cuda
from .functional._blocks import for_element_blocks
from .functional._products import matmul as product
from .nn.module import Module, Parameter


class Adam:
    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.98), eps: float = 1e-9):
        if isinstance(params, Module) or not isinstance(params, Iterable):
            raise TypeError(f"Adam takes the parameters to optimise, got a "
                            f"{type(params).__name__}; pass model.parameters().")
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got no parameters to optimise.")
        for p in self.params:
            if not (isinstance(p, Tensor) and p.is_floating):
                what = f"tensor of {p.dtype}" if isinstance(p, Tensor) else type(p).__name__
                raise TypeError(f"Adam optimises floating-point tensors, got a {what}; pass "
                                "model.parameters().")
        if not (_is_number(lr) and lr >= 0):
            raise ValueError(f"Adam needs a finite learning rate lr >= 0, got lr={lr!r}.")
        if not (isinstance(betas, tuple | list) and len(betas) == 2
                and all(_is_number(b) and 0 <= b < 1 for b in betas)):
            raise ValueError(f"Adam needs two betas in [0, 1), such as (0.9, 0.98), got "
                             f"betas={betas!r}.")
        if not (_is_number(eps) and eps > 0):
            raise ValueError(f"Adam needs a finite eps > 0, such as 1e-9, got eps={eps!r}.")
        self.lr, self.betas, self.eps = lr, betas, eps
        self.step_count = 0
        self.m = [p.xp.zeros_like(p.data) for p in self.params]  # first moments
        self.v = [p.xp.zeros_like(p.data) for p in self.params]  # second moments
        self._scratch: dict[Any, Any] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """One update of every parameter that has a gradient, in place (its array, and its
        moments), raising its version count: a graph recorded before the step can no longer
        run its backward (``Tensor._version``)."""
        self.step_count += 1
        self.update(*self.step_scalars(self.step_count))

    def step_scalars(self, step_count: int) -> tuple[float, float]:
        """(step size, ε̂) of update number ``step_count``: both bias corrections folded into
        the step size, lr·√(1−β₂ᵗ)/(1−β₁ᵗ), and ε scaled to match, ε·√(1−β₂ᵗ)."""
        beta1, beta2 = self.betas
        correction2 = math.sqrt(1 - beta2 ** step_count)
        return self.lr * correction2 / (1 - beta1 ** step_count), self.eps * correction2

    def update(self, step_size: Any, eps_hat: Any) -> None:
        """The update of ``step`` with the given scalars: Python floats, or 0-d arrays of
        the parameters' dtype on their device, which a captured step (translation/graphs.py)
        reads there, since a float would be baked into its graph."""
        beta1, beta2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            p._bump_version()  # a graph that saved p.data can no longer run its backward
            g, xp = p.grad, p.xp
            if _cuda.is_cupy(xp):  # the whole update in one kernel
                _cuda.adam_(p.data, g, m, v, beta1, beta2, step_size, eps_hat)
                continue
            # Every operation writes into m, v, p.data or one scratch buffer of p's shape
            # (shared by all parameters on a device): no temporaries, g left untouched. Large
            # parameters are updated in blocks of elements on worker threads.
            arrays = (p.data, g, m, v)
            if _compiled.enabled(xp, *arrays) and all(a.flags.c_contiguous for a in arrays):
                # the same update, one compiled pass over each block
                kernel = functools.partial(_compiled.kernels().adam_update, beta1=beta1,
                                           beta2=beta2, step_size=float(step_size),
                                           eps_hat=float(eps_hat))
                for_element_blocks(kernel, arrays, xp)
                continue
            update = functools.partial(_adam_update, xp=xp, beta1=beta1, beta2=beta2,
                                       step_size=step_size, eps_hat=eps_hat)
            for_element_blocks(update, (p.data, g, m, v, self._scratch_for(p)), xp)

    def _scratch_for(self, p: Parameter) -> Any:
        """A buffer of p's shape and dtype: a view of the largest parameter's worth of memory,
        allocated once per device and dtype."""
        key = (p.device, p.data.dtype)
        buffer = self._scratch.get(key)
        if buffer is None:
            size = max(q.data.size for q in self.params
                       if (q.device, q.data.dtype) == key)
            buffer = self._scratch[key] = p.xp.empty(size, dtype=p.data.dtype)
        return buffer[: p.data.size].reshape(p.data.shape)

    def state_dict(self) -> dict[str, Any]:
        state = {"step_count": self.step_count, "lr": self.lr}
        for i, (m, v) in enumerate(zip(self.m, self.v, strict=True)):
            state[f"m.{i}"] = backend.to_numpy(m).copy()
            state[f"v.{i}"] = backend.to_numpy(v).copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n_saved = sum(key.startswith("m.") for key in state)
        if n_saved != len(self.params):
            raise ValueError(f"optimizer state holds moments for {n_saved} parameters, the "
                             f"model has {len(self.params)}; it was saved from another model.")
        for i, p in enumerate(self.params):
            for name, moments in (("m", self.m), ("v", self.v)):
                saved = state[f"{name}.{i}"]
                if tuple(saved.shape) != p.shape:
                    raise ValueError(f"optimizer moment {name}.{i} has shape "
                                     f"{tuple(saved.shape)}, parameter {i} has {p.shape}.")
                moments[i] = p.xp.asarray(backend.to_device(saved, p.device), dtype=p.dtype)
        self.step_count = int(state["step_count"])
        self.lr = float(state["lr"])


def _is_number(value: Any) -> bool:
    """A finite real number (nan or inf as a rate would turn every weight into nan)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def _adam_update(theta: Any, g: Any, m: Any, v: Any, scratch: Any, xp: Any, beta1: float,
                 beta2: float, step_size: Any, eps_hat: Any) -> None:
    """One Adam update of θ, m and v (all or a block of their elements), in place."""
    m *= beta1                                               # m = β₁ m + (1 − β₁) g
    m += xp.multiply(g, 1 - beta1, out=scratch)
    v *= beta2                                               # v = β₂ v + (1 − β₂) g²
    xp.multiply(g, g, out=scratch)
    scratch *= 1 - beta2
    v += scratch
    xp.sqrt(v, out=scratch)                                  # θ -= step · m / (√v + ε̂)
    scratch += eps_hat
    xp.divide(m, scratch, out=scratch)
    scratch *= step_size
    theta -= scratch


def noam_rate(step: int, d_model: int, warmup_steps: int = 4000, scale: float = 1.0) -> float:
    """The paper's rate at ``step`` (counted from 1): scale · d_model^−0.5 ·
    min(step^−0.5, step · warmup^−1.5)."""
    if step < 1:
        raise ValueError(f"the schedule counts steps from 1, got {step}.")
    if not (d_model > 0 and warmup_steps > 0):  # 0 ** -1.5 divides by 0; a negative is complex
        raise ValueError(f"the schedule needs d_model > 0 and warmup_steps > 0, got d_model="
                         f"{d_model!r}, warmup_steps={warmup_steps!r}.")
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def clip_grad_norm(params: Iterable[Parameter], max_norm: float | None) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm`` (None:
    only measure). Returns the norm before clipping (inf or nan if a gradient is)."""
    if max_norm is not None and not (isinstance(max_norm, numbers.Real) and max_norm > 0):
        # a negative limit would flip every gradient's sign, 0 would erase them
        raise ValueError(f"clip_grad_norm: max_norm must be a number > 0, or None to only "
                         f"measure; got {max_norm!r}.")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    # g·g through the library's products: one BLAS thread (see functional/_products.py)
    norm = math.sqrt(sum(float(product(g.ravel(), g.ravel())) for g in grads))
    if max_norm is not None and norm > max_norm and math.isfinite(norm):
        scale = max_norm / (norm + 1e-6)
        for g in grads:
            g *= scale
    return norm
