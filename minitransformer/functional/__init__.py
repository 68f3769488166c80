"""Differentiable operations, one hand-written Function each (forward + backward).

Every name here takes Tensors (or arrays and numbers) and returns Tensors; the Function classes
behind them are importable from their family modules for reading and for gradient checks.
"""

from .activation import log_softmax, relu, softmax, tanh
from .attention import causal_mask, scaled_dot_product_attention
from .basic import add, astype, div, exp, log, mul, neg, pow, sqrt, sub
from .dropout import dropout
from .embedding import embedding
from .feed_forward import feed_forward
from .indexing import concat, getitem, masked_fill, split, stack, where
from .linalg import linear, linear_relu, matmul
from .loss import cross_entropy
from .normalization import layer_norm
from .reduction import max, mean, sum
from .residual import dropout_add_layer_norm
from .shape import broadcast_to, permute, reshape, sum_to, swapaxes, transpose

__all__ = [
    "add", "astype", "broadcast_to", "causal_mask", "concat", "cross_entropy", "div", "dropout",
    "dropout_add_layer_norm", "embedding", "exp", "feed_forward", "getitem", "layer_norm",
    "linear", "linear_relu", "log", "log_softmax", "masked_fill", "matmul", "max", "mean", "mul",
    "neg", "permute", "pow", "relu", "reshape", "scaled_dot_product_attention", "softmax",
    "split", "sqrt", "stack", "sub", "sum", "sum_to", "swapaxes", "tanh", "transpose", "where",
]
