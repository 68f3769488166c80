"""``Module`` and ``Parameter``: layers that own their weights.

A Module registers every ``Parameter`` and sub-Module assigned to it, in the order of
assignment, so ``named_parameters()`` is deterministic (``encoder.layers.0.self_attn.w_q.weight``
...). A Parameter shared by two modules (tied embeddings, §3.4) is listed once, under the name
it was first registered with. Train/eval mode is an attribute of each module (``training``),
set for a whole tree by ``train()`` and ``eval()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import backend
from ..autograd.tensor import Tensor


class Parameter(Tensor):
    """A float tensor that a Module owns and an optimizer updates (a leaf that needs grad)."""

    __slots__ = ()

    def __init__(self, data: Any, name: str | None = None):
        super().__init__(data, requires_grad=True, name=name)


class Module:
    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() "
                               "before assigning attributes.")
        # as PyTorch: a registered parameter or submodule is replaced by its own kind (or
        # None), never silently dropped from parameters() and state_dict() by another value
        for registry, kind in ((self._parameters, Parameter), (self._modules, Module)):
            if name in registry and value is not None and not isinstance(value, kind):
                raise TypeError(
                    f"cannot assign a value of type {type(value).__name__} to "
                    f"{type(self).__name__}.{name}, "
                    f"which is a {kind.__name__}: assign a {kind.__name__} (or None)"
                    + (f", or change the values in place with {name}.data[...] = ..."
                       if kind is Parameter else "") + ".")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    # ------------------------------------------------------------------ the tree
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every module below it, depth first, in registration order."""
        stack = [(prefix, self)]
        seen: set[int] = set()
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{child}" if name else child, sub)
                        for child, sub in module._modules.items()]
            stack.extend(reversed(children))

    def modules(self) -> list[Module]:
        return [m for _, m in self.named_modules()]

    def children(self) -> list[Module]:
        return list(self._modules.values())

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        """(name, parameter) for every parameter, each shared one once, in a fixed order."""
        result, seen = [], set()
        for module_name, module in self.named_modules():
            for name, param in module._parameters.items():
                if id(param) not in seen:
                    seen.add(id(param))
                    result.append((f"{module_name}.{name}" if module_name else name, param))
        return result

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    # ------------------------------------------------------------------ modes and devices
    def train(self, mode: bool = True) -> Module:
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for param in self.parameters():
            param.grad = None

    def to(self, device: str | None = None, dtype: Any = None) -> Module:
        """Move (and/or cast) every parameter in place; the Parameter objects stay the same,
        so an optimizer holding them keeps working."""
        if dtype is not None and not backend.is_floating(backend.as_dtype(dtype)):
            raise TypeError(f"to(dtype={dtype!r}): parameters must stay floating point (an "
                            "integer cast would cut every weight); give float32 or float64.")
        for param in self.parameters():
            param.data = backend.to_device(param.data, device) if device else param.data
            if dtype is not None:
                param.data = param.data.astype(backend.as_dtype(dtype), copy=False)
            if param.grad is not None:
                param.grad = backend.to_device(param.grad, device) if device else param.grad
                param.grad = param.grad.astype(param.data.dtype, copy=False)
        return self

    # ------------------------------------------------------------------ saving
    def state_dict(self) -> dict[str, Any]:
        """A host (NumPy) copy of every parameter, by name."""
        return {name: backend.to_numpy(p.data).copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Copy ``state`` into the parameters (to their device and dtype).

        With ``strict``, names missing from ``state``, names the model does not have and
        shapes that differ are all reported in one ValueError before anything is changed.
        """
        params = dict(self.named_parameters())
        not_arrays = [f"{n} (a {type(v).__name__})" for n, v in state.items()
                      if n in params and not backend.is_array(v)]
        if not_arrays:
            raise TypeError(f"load_state_dict into {type(self).__name__}: every entry must be an "
                            f"array, as state_dict() gives them, got {', '.join(not_arrays)}.")
        missing = [n for n in params if n not in state]
        unexpected = [n for n in state if n not in params]
        misshaped = [f"{n}: saved {tuple(state[n].shape)}, model {p.shape}"
                     for n, p in params.items()
                     if n in state and tuple(state[n].shape) != p.shape]
        problems = []
        if strict and missing:
            problems.append(f"missing {', '.join(missing)}")
        if strict and unexpected:
            problems.append(f"unexpected {', '.join(unexpected)}")
        if misshaped:
            problems.append(f"shapes differ for {'; '.join(misshaped)}")
        if problems:
            raise ValueError(f"load_state_dict into {type(self).__name__}: "
                             f"{' | '.join(problems)}. Was the state saved from a model "
                             "with another configuration?")
        for name, param in params.items():
            if name in state:
                # A copy: the parameter must not share memory with the caller's array (Adam
                # updates parameters in place).
                param.data = backend.as_array(state[name], dtype=param.dtype,
                                              device=param.device, copy=True)

    # ------------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, module in self._modules.items():
            child = repr(module).replace("\n", "\n  ")
            lines.append(f"  ({name}): {child}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class ModuleList(Module):
    """A list of sub-modules, registered as "0", "1", ... (the layers of a stack)."""

    def __init__(self, modules: list[Module] | None = None):
        super().__init__()
        for module in modules or []:
            self.append(module)

    def append(self, module: Module) -> None:
        setattr(self, str(len(self._modules)), module)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]
