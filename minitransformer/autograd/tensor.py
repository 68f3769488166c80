"""``Tensor``: an array that remembers how it was made, so gradients can flow back to it.

A Tensor holds ``data`` (a NumPy or CuPy array), ``grad`` (an array of the same shape, or
``None``), ``requires_grad`` and an optional ``name``. A tensor produced by a Function knows its
``creator``; ``backward()`` walks those links in reverse. Operators (``+ - * / ** @``, indexing,
unary minus) call the Functions in ``minitransformer.functional``; comparisons give boolean
masks that take no gradient.

``_version`` counts the updates made to ``data`` in place by the library (an optimizer step),
as PyTorch's ``Tensor._version``: the engine compares it with the count a Function saw in its
forward pass, so a backward that would read overwritten values fails instead of giving a
wrong gradient. A view (reshape, transpose, slice, ``detach()``) shares the count of the
tensor it views. Writing into ``data`` yourself (``w.data[...] = ...``) is not counted, and a
tensor built from the raw array (``Tensor(w.data)``) has a count of its own, as PyTorch's
``.data``.
"""

from __future__ import annotations

from typing import Any

from .. import backend


class Tensor:
    __slots__ = ("data", "grad", "requires_grad", "name", "creator", "output_index",
                 "retains_grad", "_version_counter", "__weakref__")
    __array_ufunc__ = None  # make `numpy_array + tensor` call Tensor.__radd__

    def __init__(self, data: Any, requires_grad: bool = False, name: str | None = None):
        # [n]: n updates in place so far; shared with the tensors viewing the same data
        self._version_counter = [0]
        if isinstance(data, Tensor):
            self._version_counter = data._version_counter
            data = data.data
        elif not backend.is_array(data):
            data = backend.as_array(data)
        self.data = data
        self.grad: Any = None
        self.name = name
        self.creator: Any = None
        self.output_index = 0
        self.retains_grad = False
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, data: Any) -> Tensor:
        """A Tensor around ``data``, already known to be an array: ``Tensor(data)`` without
        the checks (every operation's result goes through here)."""
        out = cls.__new__(cls)
        out.data, out.grad, out.name, out.creator = data, None, None, None
        out.output_index, out.retains_grad, out.requires_grad = 0, False, False
        out._version_counter = [0]
        return out

    @classmethod
    def _from_function(cls, data: Any, creator: Any, index: int) -> Tensor:
        out = cls(data)
        out.requires_grad = True
        out.creator, out.output_index = creator, index
        return out

    # ------------------------------------------------------------------ description
    shape = property(lambda self: tuple(self.data.shape))
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: int(self.data.size))
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: backend.device_of(self.data))
    xp = property(lambda self: backend.get_array_module(self.data))
    is_leaf = property(lambda self: self.creator is None)
    is_floating = property(lambda self: backend.is_floating(self.data.dtype))
    T = property(lambda self: self.transpose())
    _version = property(lambda self: self._version_counter[0])

    def _bump_version(self) -> None:
        """Count one update of ``data`` in place (optimizers call it for every parameter they
        change), for this tensor and every view of its data."""
        self._version_counter[0] += 1

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = repr(backend.to_numpy(self.data)).replace("array(", "tensor(", 1)
        extras = [f"device='{self.device}'"] if self.device != "cpu" else []
        if self.creator is not None:
            extras.append(f"creator={self.creator.name}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        if self.name:
            extras.append(f"name='{self.name}'")
        return body[:-1] + "".join(", " + e for e in extras) + ")"

    # ------------------------------------------------------------------ autograd
    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and not self.is_floating:
            raise TypeError(
                f"only floating-point tensors can require gradients, got dtype {self.dtype}"
                f"{' for ' + repr(self.name) if self.name else ''}; convert it first with "
                ".astype('float32') (token ids and masks never need gradients)."
            )
        if not flag and self.creator is not None:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor: use .detach().")
        self.requires_grad = bool(flag)
        return self

    def grad_edge(self) -> Any:
        """Where a gradient for this tensor goes: its creator's output slot, or itself."""
        return (self.creator, self.output_index) if self.creator is not None else self

    def retain_grad(self) -> Tensor:
        """Keep ``.grad`` on this intermediate tensor after backward (for inspection)."""
        self.retains_grad = True
        return self

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into the ``.grad`` of every leaf that requires it.

        ``grad`` is the upstream gradient, needed unless the tensor holds a single number:
        ``y.backward(dout)`` computes the gradient of ``(y * dout).sum()``.
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward() on a tensor that does not require grad: no input of the "
                "computation had requires_grad=True (or it ran under no_grad())."
            )
        if grad is None:
            if self.size != 1:
                raise RuntimeError(
                    f"backward() without a gradient needs a single-number tensor, this one has "
                    f"shape {self.shape}; reduce it first (e.g. loss.sum()) or pass "
                    "backward(grad) with a gradient of that shape."
                )
            grad = self.xp.ones(self.shape, self.dtype)
        else:
            grad = grad.data if isinstance(grad, Tensor) else grad
            grad = self.xp.asarray(backend.to_device(grad, self.device), dtype=self.dtype)
            if tuple(grad.shape) != self.shape:
                raise ValueError(
                    f"backward(grad): grad has shape {tuple(grad.shape)} but the tensor has "
                    f"shape {self.shape}; they must match."
                )
        # a tensor used twice gets the sum of its gradients, large ones on the worker threads
        engine.run_backward([self], [grad], retain_graph=retain_graph,
                            sum_gradients=F._blocks.added)

    def zero_grad(self) -> None:
        self.grad = None

    def detach(self) -> Tensor:
        """The same data, cut from the graph: no gradient flows through the result. It shares
        this tensor's version count: an update in place reaches both."""
        return Tensor(self, name=self.name)

    # ------------------------------------------------------------------ leaving the graph
    def item(self) -> float | int | bool:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape "
                             f"{self.shape}.")
        return self.data.reshape(()).item()

    def numpy(self) -> Any:
        """A NumPy array on the host (copied from the GPU if needed; a view on the CPU)."""
        return backend.to_numpy(self.data)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def to(self, device: str) -> Tensor:
        """This leaf tensor on ``device`` ("cpu" or "cuda"), with its gradient if it has one."""
        if self.creator is not None:
            raise RuntimeError("to(device) moves leaf tensors (parameters, data); call "
                               ".detach() first to move an intermediate result.")
        if backend.get_backend(device).name == self.device:
            return self
        moved = Tensor(backend.to_device(self.data, device), self.requires_grad, self.name)
        if self.grad is not None:
            moved.grad = backend.to_device(self.grad, device)
        return moved

    # ------------------------------------------------------------------ operators
    def __add__(self, other): return F.add(self, other)
    def __radd__(self, other): return F.add(other, self)
    def __sub__(self, other): return F.sub(self, other)
    def __rsub__(self, other): return F.sub(other, self)
    def __mul__(self, other): return F.mul(self, other)
    def __rmul__(self, other): return F.mul(other, self)
    def __truediv__(self, other): return F.div(self, other)
    def __rtruediv__(self, other): return F.div(other, self)
    def __pow__(self, exponent): return F.pow(self, exponent)
    def __rpow__(self, base): return F.pow(base, self)
    def __matmul__(self, other): return F.matmul(self, other)
    def __rmatmul__(self, other): return F.matmul(other, self)
    def __neg__(self): return F.neg(self)
    def __getitem__(self, index): return F.getitem(self, index)

    def __setitem__(self, index, value):
        raise TypeError("tensors cannot be assigned in place (the graph would lose the old "
                        "values); build a new one with masked_fill, where or concat.")

    # Comparisons give boolean masks: no gradient flows through a comparison.
    def _compare(self, other, op):
        other = other.data if isinstance(other, Tensor) else other
        return Tensor(op(self.data, other))

    def __eq__(self, other): return self._compare(other, lambda a, b: a == b)
    def __ne__(self, other): return self._compare(other, lambda a, b: a != b)
    def __lt__(self, other): return self._compare(other, lambda a, b: a < b)
    def __le__(self, other): return self._compare(other, lambda a, b: a <= b)
    def __gt__(self, other): return self._compare(other, lambda a, b: a > b)
    def __ge__(self, other): return self._compare(other, lambda a, b: a >= b)
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .all() or .any() on its numpy() array.")
        return bool(self.item())

    # ------------------------------------------------------------------ methods
    def reshape(self, *shape): return F.reshape(self, _varargs(shape))
    def transpose(self, *axes): return F.transpose(self, _varargs(axes) or None)
    permute = transpose
    def swapaxes(self, axis1, axis2): return F.swapaxes(self, axis1, axis2)
    def broadcast_to(self, shape): return F.broadcast_to(self, shape)
    def sum(self, axis=None, keepdims=False): return F.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return F.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return F.max(self, axis, keepdims)
    def exp(self): return F.exp(self)
    def log(self): return F.log(self)
    def sqrt(self): return F.sqrt(self)
    def tanh(self): return F.tanh(self)
    def relu(self): return F.relu(self)
    def masked_fill(self, mask, value): return F.masked_fill(self, mask, value)
    def astype(self, dtype): return F.astype(self, dtype)


def _varargs(args: tuple) -> tuple:
    """Accept both ``x.reshape(2, 3)`` and ``x.reshape((2, 3))``."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], tuple | list) else args


def tensor(data: Any, dtype: Any = None, device: str | None = None,
           requires_grad: bool = False, name: str | None = None) -> Tensor:
    """A new leaf tensor on ``device`` (default: current) holding a copy of ``data``.

    Python floats take the default dtype (float32); arrays keep theirs unless ``dtype`` is given.
    """
    if isinstance(data, Tensor):
        data = data.data
    device = device or backend.current_device()
    array = backend.as_array(data, dtype=dtype, device=device, copy=True)
    return Tensor(array, requires_grad=requires_grad, name=name)


# The operators above call Functions, and Functions make Tensors: import them once Tensor exists.
from .. import functional as F  # noqa: E402
from . import engine  # noqa: E402
