"""Compiled CPU kernels (Numba), the optional fast path of the layers' element-wise chains.

NumPy makes one pass over memory per operation, and a layer norm is a dozen of them: written
on blocks of rows that stay in the cache (``_blocks.py``) they still cost a NumPy call each,
with its dispatch, its broadcasting of a per-row statistic and its hand-back of Python's lock,
about 4 ms for the (4,000, 256) residual of a `small` step where its bytes take 1 ms to read.
Here the same arithmetic is written as loops over one row at a time, compiled by Numba: one
read of every input and one write of every output, the row's sums kept in registers. The
NumPy code beside each call is the readable reference, and these kernels compute the same
formulas (tests check them against it, and their gradients against finite differences).

    pip install "minitransformer[fast]"       # numba; used from then on, where it applies
    minitransformer.set_compiled_kernels(False)   # or MINITRANSFORMER_COMPILED=0: NumPy only

What is compiled: the post-LN residual (dropout, sum and layer norm, ``residual.py``), the
layer norm (``normalization.py``), the linear layers' bias, the feed-forward layer's ReLU and
its backward (``linalg.py``, ``feed_forward.py``), the embedding's scatter-add backward
(``embedding.py``), Adam's update (``optim.py``), the loss's passes with its exp (``loss.py``),
attention's softmax with its exp and the softmax's backward (``attention.py``), dropout's
random words (``dropout.py``) and beam search's gather-and-append of the keys and values it
keeps (``nn/attention.py``). The exp of the loss and of attention's softmax in float32 is
compiled too, but not as ``math.exp``: Numba, without Intel's SVML, calls the C library once
per element for it (ten times slower than NumPy's, measured on the Xeon). ``exp32`` is instead
Cephes' ``expf`` written as plain arithmetic that the compiler turns into vector instructions:
e^x = 2^k e^r with k = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2 in two parts, so that r is
exact), e^r a degree-7 polynomial, and 2^k built from its exponent bits in two factors (so that
k = 128 does not overflow and subnormal results come out right). Within 1.01 ulp of the exact
value everywhere (NumPy's float32 exp: 2.4 ulp), NaN, ±inf, overflow and underflow as NumPy's;
1.5 to 2 times NumPy's speed on the EPYC. Its kernels are compiled with contraction alone of
the ``fastmath`` flags: reassociation would merge the two parts of ln 2. float64 takes NumPy's
exp.

Every kernel but the gather-and-append (whole arrays, on a decoding share's own thread)
takes one block of rows (or elements) and releases Python's lock
(``nogil``): the library's own workers run the blocks (``_blocks.for_blocks``), so the
threading, its shared-cores choice and the numbers (each row computed alone, whichever thread
takes it) are those of the NumPy path. A row's sums are accumulated in float64, the column
sums of dgain, dbias and db in the array's dtype within a block, and the compiler may reorder
a sum for the vector registers and divide by multiplying with a reciprocal (``fastmath``
limited to reassociation, contraction, the sign of zero and reciprocals: no assumption that
values are finite, so NaN and inf propagate, and a dropped NaN stays NaN as in NumPy's
products; a diverging loss is still seen). float32 and float64 only: other dtypes take
NumPy's path. Kernels compile on first use for each dtype and memory layout (about half a
second each) and are cached on disk by Numba where it may write.

    N rows   C features (d_model)
"""

from __future__ import annotations

import functools
import math
import os
import types
from typing import Any

from .. import backend

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
_wanted = os.environ.get("MINITRANSFORMER_COMPILED", "1").strip().lower() not in {
    "0", "false", "no", "off"}


@functools.cache
def available() -> bool:
    """Whether Numba can be imported."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def enabled(xp: Any, *arrays: Any) -> bool:
    """True where the layers should call these kernels: on NumPy arrays, with Numba installed
    and the kernels not switched off, and every float array given float32 or float64 (Numba
    compiles no float16; those take NumPy's path)."""
    return (xp is backend.get_backend("cpu").xp and _wanted and available()
            and all(a.dtype.itemsize in (4, 8)  # float32, float64 (not dtype.name: slow)
                    for a in arrays if a is not None and a.dtype.kind == "f"))


def set_compiled_kernels(on: bool) -> None:
    """Use the compiled kernels from now on (``True``, needs Numba) or NumPy alone."""
    global _wanted
    if not isinstance(on, bool):
        raise TypeError(f"set_compiled_kernels takes True or False, got {on!r}.")
    if on and not available():
        raise ImportError("set_compiled_kernels(True) needs Numba, which is not installed: "
                          "pip install 'minitransformer[fast]' (or numba).")
    _wanted = on


def get_compiled_kernels() -> bool:
    """Whether the CPU layers run the compiled kernels (Numba installed and not switched off)."""
    return _wanted and available()


def _njit(numba: Any, function: Any, fastmath: set[str]) -> Any:
    """``function`` compiled, and cached on disk where Numba finds a folder it may write
    (beside this file, or the user's cache); elsewhere compiled again in each process."""
    options = dict(nogil=True, fastmath=fastmath, error_model="numpy")
    try:
        return numba.njit(cache=True, **options)(function)
    except RuntimeError:  # "no locator available": nowhere to write the cache
        return numba.njit(**options)(function)


@functools.cache
def kernels() -> Any:
    """The compiled functions (Numba imported, and each kernel compiled, on first use)."""
    import numba

    # The kernels' helpers are module globals, not closure cells: Numba keys its disk cache of
    # a function on its closure's contents, and a compiled function in a cell pickles
    # differently in every process, so each process would miss and add one more entry.
    global exp32, normalize_row, normalized_gradient_row
    xp = backend.get_backend("cpu").xp                                 # NumPy, for exp32's types

    def jit(function):
        """Compiled with the fast-math flags of _FASTMATH (see the module's docstring)."""
        return _njit(numba, function, _FASTMATH)

    def jit_exact(function):
        """As jit, with contraction (fused multiply-add) the only fast-math flag: exp32."""
        return _njit(numba, function, {"contract"})

    @numba.njit(inline="always")  # compiled within each kernel that calls it, with its flags
    def exp32(v):
        """e^v for a float32 v (see the module's docstring), float32 arithmetic throughout."""
        # e^low rounds to 2^-149, the least subnormal, and below low to 0; e^high < float32's max
        low, high = xp.float32(-103.97208), xp.float32(88.72284)
        c = min(v if v > low else low, high)  # NaN -> low: k stays an integer, NaN comes back
        k = xp.floor(c * xp.float32(1.44269504) + xp.float32(0.5))  # round(c / ln 2)
        r = c - k * xp.float32(0.693359375)                         # ln 2 = 0.693359375
        r = r - k * xp.float32(-2.12194440e-4)                      #        - 2.12194440e-4
        p = xp.float32(1.9875691500e-4)                             # e^r = 1 + r + r² p(r)
        p = p * r + xp.float32(1.3981999507e-3)
        p = p * r + xp.float32(8.3334519073e-3)
        p = p * r + xp.float32(4.1665795894e-2)
        p = p * r + xp.float32(1.6666665459e-1)
        p = p * r + xp.float32(5.0000001201e-1)
        n = xp.int32(k)
        half = n >> xp.int32(1)                                     # 2^k = 2^half · 2^(k - half)
        e = ((p * r * r + r + xp.float32(1.0))
             * xp.int32((half + xp.int32(127)) << xp.int32(23)).view(xp.float32)
             * xp.int32((n - half + xp.int32(127)) << xp.int32(23)).view(xp.float32))
        e = xp.float32(0.0) if v < low else e                       # -inf and underflow
        e = xp.float32(math.inf) if v > high else e                 # inf and overflow
        return v if v != v else e                                   # NaN

    @jit
    def normalize_row(r, gain, bias, eps, y):
        """y = gain ∘ (r - μ) · rstd + bias for one row r (C,); returns (μ, shift, rstd) in
        r's dtype, with μ + shift the float64 mean. The centring is done in float64: μ rounded
        to float32 is off by up to half an ulp of |μ|, which a row of variance far below eps
        would blow up (x̂ off by 0.02 for rows near 1000 with a spread near √eps), and
        fastmath's reassociation may fold a float32 correction back into μ."""
        C = r.shape[0]
        total = 0.0
        for j in range(C):
            total += r[j]
        mean = total / C                    # float64: a constant row gives its value exactly
        squares = 0.0
        for j in range(C):
            centred = r[j] - mean           # float64
            squares += centred * centred
        rstd = 1.0 / math.sqrt(squares / C + eps)
        for j in range(C):
            y[j] = (r[j] - mean) * rstd * gain[j] + bias[j]
        low = r.dtype.type(mean)
        return low, r.dtype.type(mean - low), r.dtype.type(rstd)

    @jit
    def residual_forward(x, h, levels, threshold, scale, gain, bias, eps, keep, r, y, mean,
                         shift, rstd):
        """Rows (n, C): keep = [levels >= threshold], r = x + h ∘ keep · scale,
        y = LayerNorm(r); mean, shift, rstd (n,)."""
        n, C = x.shape
        zero, one = x.dtype.type(0), x.dtype.type(1)
        for i in range(n):
            for j in range(C):
                kept = levels[i, j] >= threshold
                keep[i, j] = kept
                # a product, not a select, as NumPy's h ∘ keep: a dropped NaN or inf stays NaN
                r[i, j] = x[i, j] + h[i, j] * (one if kept else zero) * scale
            mean[i], shift[i], rstd[i] = normalize_row(r[i], gain, bias, eps, y[i])

    @jit
    def layer_norm_forward(x, gain, bias, eps, x_hat, y, rstd):
        """Rows (n, C): y = LayerNorm(x), x̂ kept for backward; rstd (n,)."""
        n, C = x.shape
        for i in range(n):
            mean, shift, rstd[i] = normalize_row(x[i], gain, bias, eps, y[i])
            centre = float(mean) + float(shift)             # the float64 mean, exactly
            for j in range(C):
                x_hat[i, j] = (x[i, j] - centre) * rstd[i]

    @jit
    def normalized_gradient_row(d, x_hat, gain, rstd, dx, dgain, dbias):
        """One row: dx = rstd (g - mean(g) - x̂ mean(g ∘ x̂)), g = d ∘ gain; adds the row's
        d ∘ x̂ and d to dgain and dbias (C,)."""
        C = d.shape[0]
        sum_g, sum_gx = 0.0, 0.0
        for j in range(C):
            g = d[j] * gain[j]
            sum_g += g
            sum_gx += g * x_hat[j]
            dgain[j] += d[j] * x_hat[j]
            dbias[j] += d[j]
        mean_g, mean_gx = d.dtype.type(sum_g / C), d.dtype.type(sum_gx / C)
        for j in range(C):
            dx[j] = rstd * (d[j] * gain[j] - mean_g - x_hat[j] * mean_gx)

    @jit
    def residual_backward(d, r, keep, mean, shift, rstd, gain, scale, dr, dh, x_hat, dgain,
                          dbias):
        """Rows (n, C): x̂ again from r, dr = the layer norm's dx, dh = dr ∘ keep · scale
        (skipped when dh has no rows); x_hat (C,) is scratch."""
        n, C = d.shape
        zero, one = d.dtype.type(0), d.dtype.type(1)
        for i in range(n):
            centre = float(mean[i]) + float(shift[i])       # forward's float64 mean
            for j in range(C):
                x_hat[j] = (r[i, j] - centre) * rstd[i]
            normalized_gradient_row(d[i], x_hat, gain, rstd[i], dr[i], dgain, dbias)
            if dh.shape[0]:
                for j in range(C):  # a product, as NumPy's dr ∘ keep · s
                    dh[i, j] = dr[i, j] * (one if keep[i, j] else zero) * scale

    @jit
    def layer_norm_backward(d, x_hat, gain, rstd, dx, scratch, dgain, dbias):
        """Rows (n, C): dx (skipped when it has no rows: written into the (C,) scratch row
        instead), dgain, dbias."""
        n, C = d.shape
        for i in range(n):
            out = dx[i] if dx.shape[0] else scratch
            normalized_gradient_row(d[i], x_hat[i], gain, rstd[i], out, dgain, dbias)

    @jit
    def bias_relu(y, bias):
        """Rows (n, C) in place: y = max(0, y + bias) (NaN stays NaN, as np.maximum)."""
        n, C = y.shape
        zero = y.dtype.type(0)
        for i in range(n):
            for j in range(C):
                z = y[i, j] + bias[j]
                y[i, j] = zero if z < zero else z

    @jit
    def bias_add(y, bias):
        """Rows (n, C) in place: y = y + bias."""
        n, C = y.shape
        for i in range(n):
            for j in range(C):
                y[i, j] += bias[j]

    @jit
    def relu_gradient(dout, y, dz, db):
        """Rows (n, C): dz = dout ∘ [y > 0] (a product, so 0 · NaN is NaN, as NumPy's);
        adds the rows' dz to db (C,)."""
        n, C = dout.shape
        zero, one = dout.dtype.type(0), dout.dtype.type(1)
        for i in range(n):
            for j in range(C):
                g = dout[i, j] * (one if y[i, j] > zero else zero)
                dz[i, j] = g
                db[j] += g

    @jit
    def relu_gradient_groups(dz, y, group, sums):
        """Rows (n, C) in place: dz = dz ∘ [y > 0] (a product, as relu_gradient); sums[g] =
        the sum of the masked rows g·group .. (g + 1)·group - 1 (the last group may be
        short), sums (ceil(n / group), C)."""
        n, C = dz.shape
        zero, one = dz.dtype.type(0), dz.dtype.type(1)
        for g in range(sums.shape[0]):
            total = sums[g]
            for j in range(C):
                total[j] = zero
            for i in range(g * group, min(n, (g + 1) * group)):
                row, kept = dz[i], y[i]
                for j in range(C):
                    d = row[j] * (one if kept[j] > zero else zero)
                    row[j] = d
                    total[j] += d

    @jit
    def scatter_add_rows(ids, rows, table):
        """table[ids[n]] += rows[n] for every n, in order: ids (N,), rows (N, C)."""
        for n in range(ids.shape[0]):
            target = table[ids[n]]
            source = rows[n]
            for j in range(source.shape[0]):
                target[j] += source[j]

    @jit
    def adam_update(theta, g, m, v, beta1, beta2, step_size, eps_hat):
        """m = β₁ m + (1 − β₁) g;  v = β₂ v + (1 − β₂) g²;  θ -= step · m / (√v + ε̂)."""
        t = theta.dtype.type
        b1, b2, c1, c2 = t(beta1), t(beta2), t(1 - beta1), t(1 - beta2)
        step, eps = t(step_size), t(eps_hat)
        for k in range(theta.shape[0]):
            gk = g[k]
            mk = b1 * m[k] + c1 * gk
            vk = b2 * v[k] + c2 * (gk * gk)
            m[k], v[k] = mk, vk
            theta[k] -= step * (mk / (math.sqrt(vk) + eps))

    @jit
    def shift_rows(z, row_max, shifted, sum_z):
        """Rows (n, V): shifted = z - row_max (row_max (n,) given: NumPy's max is vectorised,
        a compiled one that keeps NaN is not) and sum_z = Σ_v z_v (float64 sums), in one
        pass."""
        n, V = z.shape
        for i in range(n):
            m, total = row_max[i], 0.0
            for j in range(V):
                total += z[i, j]
                shifted[i, j] = z[i, j] - m
            sum_z[i] = total

    @jit_exact
    def exp_shifted(z, shift, e):
        """Rows (n, V) of float32: e = exp(z - shift) (shift (n,), the row's max)."""
        n, V = z.shape
        for i in range(n):
            m = shift[i]
            for j in range(V):
                e[i, j] = exp32(z[i, j] - m)

    @jit_exact
    def exp_scores(P):
        """Scores (b, H, T, S) of float32 in place: P = exp(P)."""
        b, H, T, S = P.shape
        for i in range(b):
            for h in range(H):
                for t in range(T):
                    row = P[i, h, t]
                    for j in range(S):
                        row[j] = exp32(row[j])

    @jit
    def cross_entropy_gradient(e, targets, row_scale, eps, sum_e, with_gradient, z, sum_z):
        """Rows (n, V): sum_e = Σ_v e_v (float64 sums); with_gradient, e becomes in place
        dz = e · scale / Σe - scale · ε / V, its target entry less scale · (1 - ε), and a row
        of scale 0 (an ignored target) 0 whatever e holds. With z of n rows (not 0), also
        sum_z = Σ_v z_v (where exp_shifted, not shift_rows, made e)."""
        n, V = e.shape
        zero = e.dtype.type(0)
        for i in range(z.shape[0]):
            total = 0.0
            for j in range(V):
                total += z[i, j]
            sum_z[i] = total
        for i in range(n):
            total = 0.0
            for j in range(V):
                total += e[i, j]
            sum_e[i] = total
            if not with_gradient:
                continue
            scale = row_scale[i]
            if scale == zero:
                for j in range(V):
                    e[i, j] = zero
                continue
            factor, smooth = e.dtype.type(scale / sum_e[i]), e.dtype.type(scale * eps / V)
            for j in range(V):
                e[i, j] = e[i, j] * factor - smooth
            e[i, targets[i]] -= e.dtype.type(scale * (1.0 - eps))

    @jit
    def softmax_shift(P, mask, use_mask, scale):
        """Scores (b, H, T, S) in place: S = P · scale, -inf where ``use_mask`` and not mask
        (broadcast to P's shape), then minus the row's max (0 for a row with every key
        masked). A NaN is not a max here, where NumPy's max is NaN: its row ends all NaN
        either way once the row's sum meets the NaN."""
        b, H, T, S = P.shape
        low = P.dtype.type(-math.inf)
        for i in range(b):
            for h in range(H):
                for t in range(T):
                    row, allowed = P[i, h, t], mask[i, h, t]
                    top = low
                    for j in range(S):
                        value = row[j] * scale
                        if use_mask and not allowed[j]:
                            value = low
                        row[j] = value
                        if value > top:
                            top = value
                    if top == low:
                        top = P.dtype.type(0)
                    for j in range(S):
                        row[j] -= top

    @jit
    def softmax_normalize(P):
        """Rows (b, H, T, S) of e in place: e / Σe (float64 sums), a row summing to 0 (every
        key masked) left at 0."""
        b, H, T, S = P.shape
        for i in range(b):
            for h in range(H):
                for t in range(T):
                    row = P[i, h, t]
                    total = 0.0
                    for j in range(S):
                        total += row[j]
                    if total == 0.0:
                        total = 1.0
                    inverse = P.dtype.type(1.0 / total)
                    for j in range(S):
                        row[j] *= inverse

    @jit
    def softmax_gradient(dS, P, g, out, scale):
        """dS (b, H, T, S), holding dP, in place: scale · P ∘ (dP - g_t · out_t), with
        g = dout and out (b, H, T, Dv) (float64 dot products)."""
        b, H, T, S = dS.shape
        Dv = g.shape[3]
        for i in range(b):
            for h in range(H):
                for t in range(T):
                    g_row, out_row, d_row, p_row = g[i, h, t], out[i, h, t], dS[i, h, t], \
                        P[i, h, t]
                    delta = 0.0
                    for d in range(Dv):
                        delta += g_row[d] * out_row[d]
                    shift = dS.dtype.type(delta)
                    for j in range(S):
                        d_row[j] = p_row[j] * (d_row[j] - shift) * scale

    @jit
    def splitmix_words(key, first, out):
        """out[i] = SplitMix64's word first + i of ``key``: mix(key + (first + i + 1) γ), as
        dropout.py's NumPy code (uint64 throughout: a signed operand would make it float)."""
        u64 = numba.uint64
        gamma, mix_1, mix_2 = u64(0x9E3779B97F4A7C15), u64(0xBF58476D1CE4E5B9), \
            u64(0x94D049BB133111EB)
        base = u64(key) + u64(first + 1) * gamma
        for i in range(out.shape[0]):
            z = base + u64(i) * gamma
            z = (z ^ (z >> u64(30))) * mix_1
            z = (z ^ (z >> u64(27))) * mix_2
            out[i] = z ^ (z >> u64(31))

    @jit
    def gather_append(kept, index, new, out):
        """out[r] = concat(kept[index[r]], new[r]) along the positions (axis 2), each
        position copied once: kept (B, H, S, D), new (B', H, T, D), out (B', H, S + T, D)."""
        n, H, S, D = kept.shape[0], kept.shape[1], kept.shape[2], kept.shape[3]
        T = new.shape[2]
        for r in range(index.shape[0]):
            row = index[r]
            if row < 0:
                row += n
            for h in range(H):
                for s in range(S):
                    for d in range(D):
                        out[r, h, s, d] = kept[row, h, s, d]
                for s in range(T):
                    for d in range(D):
                        out[r, h, S + s, d] = new[r, h, s, d]

    return types.SimpleNamespace(
        softmax_shift=softmax_shift, softmax_normalize=softmax_normalize,
        softmax_gradient=softmax_gradient, gather_append=gather_append,
        splitmix_words=splitmix_words, shift_rows=shift_rows, exp_shifted=exp_shifted,
        exp_scores=exp_scores, cross_entropy_gradient=cross_entropy_gradient,
        residual_forward=residual_forward, residual_backward=residual_backward,
        layer_norm_forward=layer_norm_forward, layer_norm_backward=layer_norm_backward,
        bias_relu=bias_relu, bias_add=bias_add, relu_gradient=relu_gradient,
        relu_gradient_groups=relu_gradient_groups,
        scatter_add_rows=scatter_add_rows,
        adam_update=adam_update)
