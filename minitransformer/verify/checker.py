"""Prove a hand-written backward right: compare it with central finite differences.

For a function y = f(x_1, ..., x_n) we never differentiate y itself (it may be a big array);
we differentiate the scalar

    L(x) = Σ y ∘ dout,      dout ~ N(0, 1), fixed,

whose gradient is exactly what backward computes from the upstream gradient ``dout``. The
random ``dout`` matters: with dout = 1 everywhere, softmax's true gradient is exactly zero
(its outputs always sum to 1), so a softmax whose backward returned zeros would pass. A loss
is also checked with dout = 1 (``unit_dout``), the seed of ``loss.backward()``: cross-entropy
makes its gradient in the forward pass and hands it on as it is for that seed alone, a path
of its own that a random dout never takes.

Numerically, for each input element x_j (all of them for small inputs),

    ∂L/∂x_j ≈ (L(x + h e_j) − L(x − h e_j)) / 2h
            = Σ (y(x + h e_j) − y(x − h e_j)) ∘ dout / 2h,      h = 1e-6, in float64,

whose error is O(h²) from truncation plus O(ε·|y|/h) from rounding: about 1e-10 here.
Differencing y before summing keeps outputs that do not move (a -1e9 fill) from drowning it. Large
inputs are checked along random unit directions v instead, which costs two evaluations per
direction rather than two per element:  ∇L·v ≈ (L(x + hv) − L(x − hv)) / 2h.

The relative error of an input is its largest absolute error divided by the largest gradient
magnitude in the whole case (∞-norms; 2-norms for directions), so entries, or whole inputs,
whose true gradient is zero do not blow it up, while a wrong entry anywhere still shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import backend
from ..autograd.engine import graph_nodes, run_backward
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor


@dataclass
class InputCheck:
    """The comparison for one input or parameter: ``mode`` is "full" (every element) or
    "directional"."""

    label: str                  # "input 0", or a parameter's name
    shape: tuple[int, ...]
    mode: str
    n_checked: int
    max_abs_error: float
    scale: float                # the largest gradient magnitude of this input
    max_rel_error: float = 0.0
    passed: bool = False


@dataclass
class GradcheckReport:
    name: str
    shapes: str
    inputs: list[InputCheck] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)  # Function types met in the graph
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.inputs)

    @property
    def max_abs_error(self) -> float:
        return max((c.max_abs_error for c in self.inputs), default=0.0)

    @property
    def max_rel_error(self) -> float:
        return max((c.max_rel_error for c in self.inputs), default=0.0)

    def __str__(self) -> str:
        lines = [f"gradcheck {self.name} {self.shapes}: {'passed' if self.passed else 'FAILED'}"]
        for c in self.inputs:
            lines.append(f"  {c.label} {c.shape}: {c.mode} ({c.n_checked}), max abs error "
                         f"{c.max_abs_error:.2e}, max rel error {c.max_rel_error:.2e}"
                         f"{'' if c.passed else '  <-- wrong'}")
        return "\n".join(lines)


def check_function(fn: Callable[..., Any], *inputs: Any, name: str | None = None,
                   seed: int = 0, eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-10,
                   max_full: int = 256, n_directions: int = 6,
                   unit_dout: bool = False) -> GradcheckReport:
    """Check the gradient of ``fn(*inputs)`` with respect to each floating-point input.

    ``inputs`` are arrays, Tensors or lists; floating ones are copied to float64 and checked,
    integer and boolean ones (token ids, masks) are passed unchanged. ``fn`` returns a Tensor or
    a tuple of Tensors. An input with more than ``max_full`` elements is checked along
    ``n_directions`` random directions. An input passes when its relative error is at most
    ``rtol`` or its absolute error at most ``atol``. ``unit_dout``: the upstream gradient is 1
    everywhere instead of random (for a loss: what ``loss.backward()`` seeds).
    """
    return _check(fn, inputs, [], name or getattr(fn, "__name__", "function"), seed, eps, rtol,
                  atol, max_full, n_directions, unit_dout)


def check_module(module: Any, *inputs: Any, name: str | None = None, seed: int = 0,
                 eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-10,
                 max_full: int = 256, n_directions: int = 6,
                 unit_dout: bool = False) -> GradcheckReport:
    """Check ``module(*inputs)``: the gradients of its floating inputs and of every parameter.

    The parameters are checked in float64 (copies; the module is restored afterwards, dtype,
    values and gradients). The random generators are reseeded with ``seed`` before every
    evaluation, so a module with dropout in training mode draws the same mask each time.
    """
    params = module.named_parameters()
    saved = [(p.data, p.grad) for _, p in params]

    def fn(*xs: Any) -> Any:
        backend.manual_seed(seed)
        return module(*xs)

    try:
        for _, param in params:
            param.data, param.grad = _to_float64(param.data), None
        return _check(fn, inputs, params, name or type(module).__name__, seed, eps, rtol, atol,
                      max_full, n_directions, unit_dout)
    finally:
        for (_, param), (data, grad) in zip(params, saved, strict=True):
            param.data, param.grad = data, grad


def _check(fn, inputs, params, name, seed, eps, rtol, atol, max_full, n_directions,
           unit_dout=False):
    if not (eps > 0 and n_directions >= 1):  # eps 0 divides by 0; no direction checks nothing
        raise ValueError(f"gradient check of {name}: eps must be > 0 and n_directions at "
                         f"least 1, got eps={eps!r}, n_directions={n_directions!r}.")
    start = time.perf_counter()
    with backend.default_dtype("float64"):
        arrays = [_to_float64(x) for x in inputs]
        n_inputs = len(arrays)
        device = backend.device_of(arrays[0] if arrays else params[0][1].data)
        # Its own stream: inputs built from the same seed must not equal dout (LayerNorm's
        # gradient along dout = x is exactly zero, which would hide a wrong backward).
        generator = backend.get_backend(device).make_rng(seed + _DOUT_SEED_OFFSET)

        # Every checked quantity is a leaf: the float inputs, then the parameters.
        leaves = [Tensor(a, requires_grad=backend.is_floating(a.dtype)) for a in arrays]
        leaves += [param for _, param in params]
        labels = [f"input {i}" for i in range(n_inputs)] + [pname for pname, _ in params]
        checked = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]

        all_outputs = _as_tuple(fn(*leaves[:n_inputs]))
        for y in all_outputs:
            if not isinstance(y, Tensor):
                raise TypeError(f"check_function: {name} returned a {type(y).__name__}, not a "
                                "Tensor or a tuple of Tensors; compute its result with "
                                "minitransformer operations, so that it has a gradient.")
        used = [k for k, y in enumerate(all_outputs) if y.requires_grad]
        outputs = [all_outputs[k] for k in used]
        if not outputs:
            raise ValueError("check_function: the function's outputs do not depend on any "
                             "floating-point input, so there is no gradient to check.")
        douts = [backend.get_array_module(y.data).ones(y.shape, dtype=y.dtype) if unit_dout
                 else generator.standard_normal(y.shape, dtype=y.dtype) for y in outputs]
        functions = {node.name for node in graph_nodes([y.creator for y in outputs])}
        run_backward(outputs, douts)
        values = [leaf.data for leaf in leaves]

        def evaluate(point: list[Any]) -> tuple:
            for (_, param), value in zip(params, point[n_inputs:], strict=True):
                param.data = value
            with no_grad():
                return _as_tuple(fn(*(Tensor(v) for v in point[:n_inputs])))

        def central_difference(plus: list[Any], minus: list[Any]) -> float:
            """(L(plus) - L(minus)) / 2h, differencing each output before summing, so
            outputs that do not move (a -1e9 fill, say) cancel exactly."""
            ys_plus, ys_minus = evaluate(plus), evaluate(minus)
            total = sum(float(((ys_plus[k].data - ys_minus[k].data) * d).sum())
                        for k, d in zip(used, douts, strict=True))
            return total / (2 * eps)

        report = GradcheckReport(name, _describe_shapes(arrays))
        try:
            for i in checked:
                analytic = leaves[i].grad
                if analytic is None:
                    analytic = backend.get_array_module(values[i]).zeros_like(values[i])
                if values[i].size <= max_full:
                    check = _check_every_element(central_difference, values, i, analytic, eps)
                else:
                    check = _check_directions(central_difference, values, i, analytic, eps,
                                              n_directions, generator)
                check.label = labels[i]
                report.inputs.append(check)
        finally:
            evaluate(values)  # leave every parameter holding its unperturbed values
        # Errors relative to the largest gradient of the case: an input whose true gradient
        # is exactly zero (the key bias of attention: softmax ignores a shift shared by a row)
        # is judged against the gradients around it, not against its own rounding noise.
        case_scale = max((c.scale for c in report.inputs), default=0.0)
        for check in report.inputs:
            check.max_rel_error = _relative(check.max_abs_error, case_scale)
            check.passed = check.max_rel_error <= rtol or check.max_abs_error <= atol
    report.functions = functions
    report.seconds = time.perf_counter() - start
    return report


def _check_every_element(central_difference, arrays, i, analytic, eps) -> InputCheck:
    xp = backend.get_array_module(arrays[i])
    x = arrays[i]
    plus, minus = list(arrays), list(arrays)
    plus[i], minus[i] = xp.array(x, copy=True), xp.array(x, copy=True)
    flat_plus, flat_minus = plus[i].reshape(-1), minus[i].reshape(-1)  # views into the copies
    numeric = xp.zeros(x.size, dtype=x.dtype)
    for j in range(x.size):
        original = flat_plus[j].copy()
        flat_plus[j] += eps
        flat_minus[j] -= eps
        numeric[j] = central_difference(plus, minus)
        flat_plus[j] = original
        flat_minus[j] = original
    analytic = analytic.reshape(-1)
    abs_error = float(xp.abs(analytic - numeric).max()) if x.size else 0.0
    scale = float(xp.maximum(xp.abs(analytic), xp.abs(numeric)).max()) if x.size else 0.0
    return InputCheck("", tuple(x.shape), "full", int(x.size), abs_error, scale)


def _check_directions(central_difference, arrays, i, analytic, eps, n_directions,
                      generator) -> InputCheck:
    xp = backend.get_array_module(arrays[i])
    x = arrays[i]
    plus, minus = list(arrays), list(arrays)
    scale = float(xp.sqrt((analytic * analytic).sum()))
    abs_error = 0.0
    for _ in range(n_directions):
        v = generator.standard_normal(x.shape, dtype=x.dtype)
        v = v / xp.sqrt((v * v).sum())  # a unit direction
        plus[i], minus[i] = x + eps * v, x - eps * v
        numeric = central_difference(plus, minus)
        abs_error = max(abs_error, abs(float((analytic * v).sum()) - numeric))
        scale = max(scale, abs(numeric))
    return InputCheck("", tuple(x.shape), "directional", n_directions, abs_error, scale)


_DOUT_SEED_OFFSET = 1_000_003


def _relative(abs_error: float, scale: float) -> float:
    if scale == 0.0:
        return 0.0 if abs_error == 0.0 else float("inf")
    return abs_error / scale


def _to_float64(x: Any) -> Any:
    data = x.data if isinstance(x, Tensor) else x
    array = backend.as_array(data, copy=True)
    if backend.is_floating(array.dtype) and array.dtype != backend.as_dtype("float64"):
        array = array.astype("float64")
    return array


def _as_tuple(result: Any) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _describe_shapes(arrays: list[Any]) -> str:
    return ", ".join(str(tuple(a.shape)) if backend.is_floating(a.dtype)
                     else f"{a.dtype}{tuple(a.shape)}" for a in arrays)
