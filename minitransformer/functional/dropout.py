"""Inverted dropout (Srivastava et al., 2014), the regularizer of §5.4.

§5.4: "We apply dropout to the output of each sub-layer, before it is added to the sub-layer
input and normalized. In addition, we apply dropout to the sums of the embeddings and the
positional encodings", with P_drop = 0.1 for the base model.

In training each entry is kept with probability 1 - p and the kept ones are scaled up, so the
expected value of every entry is unchanged and evaluation needs no rescaling:

    u ~ U[0, 1),  keep = [u >= p]
    y = x ∘ keep / (1 - p)
    dx = dout ∘ keep / (1 - p)        the same mask: a dropped entry gets no gradient

In evaluation (or with p = 0) dropout is the identity.

On the CPU, u is a 16-bit integer in [0, 65536) rather than a float, with keep = [u >= n],
n = round(65536 p), and each 64-bit word gives four of them. The words come from SplitMix64
(Steele, Lea and Flood, 2014) used as a counter-based generator: one word drawn from the
device's generator is the key k, and word i is mix(k + (i + 1) γ), so any block of words is
computed without the others, on the worker threads, compiled where Numba is. A (4000, 256)
mask's words took 0.24 ms that way on the Xeon's two cores, against 0.57 ms for the generator's own
words, drawn in order on one core (NumPy's uint64 arithmetic, the path without Numba: 0.9 ms).
The same seed gives the same mask on either path and any number of threads.

An entry is then dropped with probability p' = n / 65536, p rounded to a multiple of 1/65536
(0.1 becomes 0.100006), and kept entries are scaled by 1 / (1 - p') = 65536 / (65536 - n),
so that E[y] = x exactly, whatever p. (Scaled by 1 / (1 - p) instead, E[y] would drift from x
as p nears 1: by 0.7% at p = 0.999, by half at p = 0.99999.) At least one level is kept: p
above 1 - 1/131072 drops with probability 1 - 1/65536.

In a captured step (``autograd/graphs.py``) the key (on the GPU, u itself) is drawn outside
the graph, into a buffer the graph reads, before every replay: each replay gets the mask the
eager step would draw.

Dimensions: x any shape (typically (B, T, C)); keep has the shape of x.
"""

from __future__ import annotations

import math

from .. import backend
from ..autograd.function import Function
from ..autograd.graphs import draw_outside_graph
from . import _compiled, _cuda
from ._blocks import for_blocks, for_element_blocks
from ._broadcast import require_float


class Dropout(Function):
    """The mask comes from ``backend.rng`` of x's device, drawn the same way whatever x's
    dtype, so one seed gives the same mask in float32 training and float64 gradient checks."""

    LEVELS = 2 ** 16  # CPU: u is a uint16, p a multiple of 1 / LEVELS

    def __init__(self, p: float):
        self.p = check_dropout_p(p)

    def forward(self, x):
        require_float("dropout", x=x)
        xp = backend.get_array_module(x)
        device, shape = backend.device_of(x), x.shape
        if _cuda.is_cupy(xp):  # steps 1-2 in one kernel, u a float32 in [0, 1)
            u = draw_outside_graph(lambda: backend.rng(device).random(shape, dtype="float32"),
                                   shape, "float32", xp)
            y, self.saved = _cuda.dropout_forward(x, u, self.p)
            return y
        # 1. keep = [u >= n], u uniform in [0, 65536), n = p as a count of those levels
        threshold, self.scale = levels_kept(self.p)                    # n, 1 / (1 - p')
        u = draw_levels(device, shape, xp)
        keep, y = xp.empty(x.shape, dtype=bool), xp.empty_like(x)

        def apply(u, keep, x, y):  # on blocks of elements, on worker threads
            xp.greater_equal(u, threshold, out=keep)
            # 2. y = x ∘ keep / (1 - p')
            xp.multiply(x, keep, out=y)
            y *= self.scale
        for_element_blocks(apply, (u, keep, x, y), xp)
        self.saved = keep
        return y

    def backward(self, dout):
        keep = self.saved
        # fwd 2: y = x ∘ keep / (1 - p')  ->  dx = dout ∘ keep / (1 - p')
        xp = backend.get_array_module(dout)
        if _cuda.is_cupy(xp):
            return _cuda.dropout_backward(dout, keep, self.p)
        dx = xp.empty_like(dout)

        def apply(dout, keep, dx):  # on blocks of elements, on worker threads
            xp.multiply(dout, keep, out=dx)
            dx *= self.scale
        for_element_blocks(apply, (dout, keep, dx), xp)
        return dx


def levels_kept(p: float) -> tuple[int, float]:
    """(n, 1 / (1 - p')) for the CPU's draws: keep = [u >= n], kept entries scaled."""
    levels = Dropout.LEVELS
    threshold = min(round(p * levels), levels - 1)
    return threshold, levels / (levels - threshold)


def draw_levels(device: str, shape: tuple[int, ...], xp):
    """u of ``shape``, uniform in [0, 65536): SplitMix64 keyed by one word of ``device``'s
    generator (the key drawn outside a graph), on blocks of words on the worker threads."""
    key = draw_outside_graph(
        lambda: backend.rng(device).integers(0, 2**64, size=1, dtype=xp.uint64),
        (1,), xp.uint64, xp)                                            # (1,)
    size = math.prod(shape)
    words = xp.empty((size + 3) // 4, dtype=xp.uint64)                  # four u per word
    if _compiled.enabled(xp):
        kernel, key_word = _compiled.kernels().splitmix_words, key[0]   # a NumPy uint64

        def fill(part):
            kernel(key_word, part.start, words[part])
    else:
        def fill(part):
            _splitmix_words(key, part.start, words[part], xp)
    for_blocks(fill, words.shape[0], words.itemsize, xp)
    return words.view(xp.uint16)[:size].reshape(shape)


# SplitMix64 (Steele, Lea and Flood, 2014): word i of a key k is mix(k + (i + 1) γ)
GAMMA, MIX_1, MIX_2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _splitmix_words(key, first: int, out, xp) -> None:
    """out = words first, first + 1, ... of the key (a (1,) uint64 array), in place; the
    compiled kernel computes the same bits. uint64 arithmetic wraps around, as it must."""
    u64 = xp.uint64
    out[...] = xp.arange(first + 1, first + 1 + out.shape[0], dtype=u64)
    out *= u64(GAMMA)
    out += key
    out ^= out >> u64(30)
    out *= u64(MIX_1)
    out ^= out >> u64(27)
    out *= u64(MIX_2)
    out ^= out >> u64(31)


def check_dropout_p(p: float) -> float:
    try:
        value = float(p)
    except (TypeError, ValueError):
        value = float("nan")  # not a number: fails the range test below
    if isinstance(p, bool | str) or not 0 <= value < 1:
        raise ValueError(f"dropout: p must satisfy 0 <= p < 1 (the probability of zeroing an "
                         f"entry), got p={p!r}.")
    return value


def dropout(x, p, training=True):
    """Zero each entry of x with probability p and scale the rest by 1 / (1 - p) when
    ``training``; return x itself (no graph node) in evaluation or when p == 0."""
    p = check_dropout_p(p)
    if not training or p == 0:
        return x
    return Dropout(p)(x)
