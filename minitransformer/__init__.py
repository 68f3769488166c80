"""minitransformer: the Transformer of "Attention Is All You Need", from scratch.

    import minitransformer as mt
    x = mt.tensor([[1.0, 2.0]], requires_grad=True)
    (x * x).sum().backward()
    x.grad                      # array([[2., 4.]], dtype=float32)
"""

from . import functional
from .autograd import Function, Tensor, enable_grad, is_grad_enabled, no_grad, tensor
from .backend import (
    DeviceError,
    current_device,
    default_dtype,
    device,
    get_array_module,
    get_default_dtype,
    manual_seed,
    set_default_dtype,
    to_numpy,
    use,
)
from .factories import ones, randn, zeros
from .functional._compiled import get_compiled_kernels, set_compiled_kernels
from .threads import get_num_threads, set_num_threads

__version__ = "0.1.0"

__all__ = [
    "DeviceError", "Function", "Tensor", "current_device", "default_dtype", "device",
    "enable_grad", "functional", "get_array_module", "get_compiled_kernels", "get_default_dtype",
    "get_num_threads",
    "is_grad_enabled", "manual_seed", "no_grad", "ones", "randn", "set_default_dtype",
    "set_compiled_kernels", "set_num_threads", "tensor", "to_numpy", "use", "zeros",
]
