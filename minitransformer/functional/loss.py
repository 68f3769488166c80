"""Cross-entropy with label smoothing, fused with log-softmax: the training loss (§5.4).

§5.4: "During training, we employed label smoothing of value ε_ls = 0.1. This hurts
perplexity, as the model learns to be more unsure, but improves accuracy and BLEU score."
The target of a token with label y is not the one-hot vector but (uniform over all V classes,
as PyTorch's ``label_smoothing``)

    q = (1 - ε) onehot(y) + ε / V

and, with p = softmax(z) the model's distribution from the logits z of that token,

    ℓ = -Σ_v q_v log p_v = (1 - ε)(-log p_y) + ε (-mean_v log p_v)
    L = (1 / N) Σ_{real tokens} ℓ,      N = the number of targets != ignore_index
                                        (or the ``normalizer`` given)

Backward: log p_v = z_v - logsumexp(z), so ∂log p_v/∂z_j = δ_vj - p_j and

    ∂ℓ/∂z_j = -Σ_v q_v (δ_vj - p_j) = p_j Σ_v q_v - q_j = p_j - q_j      (Σ_v q_v = 1)
    dz = dout · (p - q) / N   on real tokens,   0 on ignored ones

Fusing the two steps avoids ever forming 1/p (which overflows where p underflows). The loss
needs only e = exp(z - max z) and its row sums: -log p_v = log Σe - (z_v - max z). With no real
token at all (a batch of padding) the loss and its gradient are 0 rather than 0/0.

The loss is the last node of a training step, and its gradient needs nothing that comes later
but the number dout (1 for ``loss.backward()``). So on the CPU, when a gradient is wanted,
forward finishes each block of rows with dz for dout = 1, (p - q) / N, while the block's e is
still in the cache, and keeps that in e's place: backward hands it on as it is, instead of
reading all of e again to write all of dz, two passes over an (N_rows, V) array of 128 MB in a
`small` step of 4,000 tokens and 8,000 words. For another dout backward makes one pass, dz ·
dout into a new array, on blocks of rows. So the trainer does not scale the loss: a step of
several batches (accumulated, or shared among processes) wants the gradient of the sum of
their token losses over the step's tokens, and ``normalizer`` = the step's number of target
tokens gives each batch's share of that mean directly, N above, with dout = 1 (a step of one
batch on one process is the plain mean). The GPU keeps its statistics and computes dz in one
kernel in backward.

Dimensions: logits (..., V), V the vocabulary; targets (...) integer, typically (B, T);
N_rows = prod(...) once flattened; loss a 0-d tensor.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .. import backend
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..autograd.graphs import is_capturing
from ..autograd.tensor import Tensor
from . import _compiled, _cuda, _workspace
from ._blocks import for_blocks
from ._broadcast import require_float
from ._reduce import sum_last
from .indexing import on_device_of


class CrossEntropy(Function):
    def __init__(self, label_smoothing: float = 0.0, ignore_index: int | None = None,
                 normalizer: Any = None):
        if not 0 <= label_smoothing < 1:
            raise ValueError(f"cross_entropy: label_smoothing must satisfy 0 <= ε < 1, got "
                             f"{label_smoothing!r}.")
        if ignore_index is not None and (isinstance(ignore_index, bool)
                                         or not isinstance(ignore_index, numbers.Integral)):
            raise ValueError(f"cross_entropy: ignore_index must be a class id (an integer, e.g. "
                             f"the padding id) or None, got {ignore_index!r}.")
        self.eps, self.ignore_index = float(label_smoothing), ignore_index
        self.normalizer = _checked_normalizer(normalizer)

    def forward(self, logits, targets):
        xp = backend.get_array_module(logits)
        if logits.ndim == 0 or tuple(targets.shape) != tuple(logits.shape[:-1]):
            raise ValueError(f"cross_entropy: targets of shape {tuple(targets.shape)} do not fit "
                             f"logits of shape {tuple(logits.shape)}: targets must have the "
                             f"logits' shape without the last axis (V).")
        require_float("cross_entropy", logits=logits)
        if targets.dtype.kind not in "iu":
            raise TypeError(f"cross_entropy: targets must be integer class ids, got dtype "
                            f"{targets.dtype}.")
        V = logits.shape[-1]
        z = logits.reshape(-1, V)                                       # (N_rows, V)
        t = targets.reshape(-1)                                         # (N_rows,)
        # 1. real = [t != ignore_index]; ignored rows look at class 0, then count for nothing
        if self.ignore_index is None:
            real = xp.ones(t.shape, dtype=bool)                         # (N_rows,)
        else:
            real = t != self.ignore_index                               # (N_rows,)
        t_safe = xp.where(real, t, 0)[:, None]                          # (N_rows, 1)
        self._check_targets(t_safe, V)
        n_real = self._count(real, logits.dtype, xp)                    # () = N, for step 4
        # 2. with m = max_v z_v and e = exp(z - m) (one buffer): log p_v = (z_v - m) - log Σe,
        #    so -log p_v = log Σe - (z_v - m), and log p itself is never formed
        if _cuda.is_cupy(xp):  # m and Σe in one row kernel, e itself never stored
            dz = None
            row_max, sum_e, sum_z = _cuda.cross_entropy_statistics(z)   # (N_rows,) each
        else:
            dz = _workspace.empty(z.shape, z.dtype, xp)                 # (N_rows, V): e, dz
            row_max = xp.empty(z.shape[0], dtype=z.dtype)               # (N_rows,)
            sum_e, sum_z = xp.empty_like(row_max), xp.empty_like(row_max)  # (N_rows,) each
            # dz too where a gradient may follow: the logits need one, or (forward called
            # directly, needs_input_grad not set) gradients are on
            wanted = self.needs_input_grad[:1] == (True,) or (
                not self.needs_input_grad and is_grad_enabled())
            gradient = self._gradient_rows(xp, dz, sum_e, t_safe, real, n_real) \
                if wanted and not _compiled.enabled(xp, z) else None

            def statistics(rows):  # on a block of rows, while it is in the cache
                row_max[rows] = z[rows].max(axis=-1)
                if self.eps:                                            # Σ_v z_v, for step 3
                    sum_z[rows] = sum_last(z[rows])
                e_rows = xp.subtract(z[rows], row_max[rows, None], out=dz[rows])
                xp.exp(e_rows, out=e_rows)                              # e = exp(z - m)
                sum_e[rows] = sum_last(e_rows)
                if gradient is not None:                                # e -> dz, in place
                    gradient(rows)
            if _compiled.enabled(xp, z):  # the same steps in three calls a block
                statistics = _compiled_statistics(z, dz, row_max, sum_z, sum_e, t_safe, real,
                                                  n_real, self.eps, wanted)
            for_blocks(statistics, z.shape[0], z.shape[1] * z.itemsize, xp)
            if not wanted:
                dz = None  # forward without a gradient (evaluation): nothing to keep
        log_sum = xp.log(sum_e)                                         # (N_rows,)
        # 3. ℓ = (1 - ε)(-log p_y) + ε (-mean_v log p_v)
        #      = (1 - ε)(log Σe - (z_y - m)) + ε (log Σe - (mean_v z_v - m))
        z_y = xp.take_along_axis(z, t_safe, axis=-1)[:, 0]              # (N_rows,)
        loss_rows = (1.0 - self.eps) * (log_sum - (z_y - row_max))
        if self.eps:
            loss_rows += self.eps * (log_sum - (sum_z / V - row_max))  # (N_rows,)
        # 4. L = Σ_real ℓ / N, with N = max(number of real tokens, 1): 0, not 0/0, if none
        #    (or N = the normalizer given).
        #    Ignored rows are left out by where, not by a factor 0: their ℓ may be inf or nan
        #    (a logit of -inf that forbids the padding id), and inf · 0 = nan
        loss = xp.asarray(xp.where(real, loss_rows, 0).sum() / n_real)  # ()
        # backward: on the CPU dz for dout = 1, made above; the GPU kernel recomputes e from z
        self.saved = (z, row_max, sum_e[:, None], t_safe, real, n_real) \
            if _cuda.is_cupy(xp) else dz
        self.logits_shape = logits.shape
        return loss

    def _count(self, real, dtype, xp):
        """N as a 0-d array of the logits' dtype: the real tokens (at least 1), or the
        normalizer. A 0-d array is used as it is, never read (a captured step's, refilled
        before each replay); a number must fit the dtype, and cannot enter a capture."""
        if self.normalizer is None:
            return xp.maximum(real.sum(), 1).astype(dtype)
        if _device_scalar(self.normalizer):
            if backend.get_array_module(self.normalizer) is not xp:
                raise ValueError(f"cross_entropy: the normalizer array lies on "
                                 f"{backend.device_of(self.normalizer)}, the logits on "
                                 f"{backend.device_of(real)}; give it on the logits' device.")
            return xp.asarray(self.normalizer).astype(dtype)
        if is_capturing():
            raise ValueError("cross_entropy: a captured step needs its normalizer as a 0-d "
                             "array on the device, which the host fills before each replay; "
                             f"a number ({self.normalizer!r}) would be fixed in the graph.")
        info = xp.finfo(dtype)
        if not float(info.tiny) <= float(self.normalizer) <= float(info.max):
            raise ValueError(f"cross_entropy: normalizer {self.normalizer!r} is outside the "
                             f"range of the logits' {dtype} ({float(info.tiny):g} to "
                             f"{float(info.max):g}); give a token count within it, or "
                             f"compute the loss in a wider dtype.")
        return xp.asarray(self.normalizer, dtype=dtype)

    def _gradient_rows(self, xp, dz, sum_e, t_safe, real, n_real):
        """The kernel that turns a block of rows of e into dz = (p - q) / N in place, for
        dout = 1 (backward scales it by dout when that is not 1)."""
        V = dz.shape[-1]
        # fwd 4: L = Σ_real ℓ / N  ->  every real row is scaled by 1 / N, ignored ones by 0
        row_scale = (real / n_real).astype(dz.dtype)[:, None]          # (N_rows, 1)
        smooth = row_scale * (self.eps / V)                             # (N_rows, 1)
        target_scale = row_scale[:, 0] * (1.0 - self.eps)               # (N_rows,)

        # fwd 2-3: ℓ = -Σ_v q_v log p_v  ->  dz = p - q,  q = (1 - ε) onehot(y) + ε / V:
        # dz = e · (scale / Σe) - scale · ε / V, then the target entry of every row loses
        # scale · (1 - ε)
        def gradient(rows):
            dz_rows = dz[rows]
            dz_rows *= row_scale[rows] / sum_e[rows, None]
            if self.eps:
                dz_rows -= smooth[rows]
            dz_rows[xp.arange(dz_rows.shape[0]), t_safe[rows, 0]] -= target_scale[rows]
            # ignored rows: 0, even where e is inf or nan (a capture cannot count a boolean
            # mask on the host, so it takes a pass over the block instead)
            if is_capturing():
                xp.copyto(dz_rows, 0, where=row_scale[rows] == 0)
            else:
                dz_rows[~real[rows]] = 0
        return gradient

    def _check_targets(self, t_safe, V: int) -> None:
        """Real targets must be class ids in [0, V): name the smallest/largest offender.

        One device-to-host transfer (a single boolean) when all ids are valid."""
        if t_safe.size == 0 or is_capturing():  # a captured step's caller checks them
            return
        xp = backend.get_array_module(t_safe)
        if not bool(xp.any((t_safe < 0) | (t_safe >= V))):
            return
        low, high = int(t_safe.min()), int(t_safe.max())
        bad = sorted({i for i in (low, high) if not 0 <= i < V})
        which = f"target id {bad[0]} is" if len(bad) == 1 else \
            f"target ids {low} and {high} are"
        allowed = "" if self.ignore_index is None else \
            f", or ignore_index={self.ignore_index}"
        raise ValueError(f"cross_entropy: {which} outside the V = {V} classes of the "
                         f"logits (valid ids 0..{V - 1}{allowed}).")

    def backward(self, dout):
        xp = backend.get_array_module(dout)
        if _cuda.is_cupy(xp):  # saved holds the logits z here: one kernel computes all of dz
            z, row_max, sum_e, t_safe, real, n_real = self.saved
            row_scale = (real * (dout / n_real))[:, None]               # (N_rows, 1)
            dz = _cuda.cross_entropy_backward(z, row_max, sum_e, row_scale, t_safe, self.eps)
            return dz.reshape(self.logits_shape), None
        dz = self.saved                                                 # (N_rows, V), dout 1
        if dz is None:
            raise RuntimeError("cross_entropy: backward after a forward pass that kept no "
                               "gradient (run under no_grad, or with needs_input_grad[0] "
                               "False); run the forward pass with gradients enabled.")
        # fwd 4: L = Σ_real ℓ / N: dz scales with dout (kept for dout = 1, loss.backward()'s
        # seed, which the trainer's losses get too), into a new array (saved stays as it is),
        # on blocks of rows
        if is_capturing() or float(dout) != 1.0:
            scaled = _workspace.empty(dz.shape, dz.dtype, xp)           # (N_rows, V)
            for_blocks(lambda rows: xp.multiply(dz[rows], dout, out=scaled[rows]),
                       dz.shape[0], dz.shape[1] * dz.itemsize, xp)
            dz = scaled
        return dz.reshape(self.logits_shape), None                      # (..., V)


def _compiled_statistics(z, dz, row_max, sum_z, sum_e, t_safe, real, n_real, eps, wanted):
    """forward's block kernel with compiled passes (``_compiled.py``): NumPy's max, then in
    float32 e = exp(z - m) in one pass and Σz, Σe and (when wanted) dz in one more; in float64
    Σz and z - m in one pass, NumPy's exp, then Σe and dz."""
    xp, kernels = backend.get_array_module(z), _compiled.kernels()
    row_scale = (real / n_real).astype(z.dtype)                         # (N_rows,) 1/N or 0
    targets = t_safe[:, 0]                                              # (N_rows,)
    compiled_exp = z.dtype == xp.float32
    sum_z_here = compiled_exp and eps != 0  # Σz for the smoothing term, with Σe (else not
    no_rows = z[:0]                         # needed, or made with the shift by shift_rows)

    def statistics(rows):
        e_rows = dz[rows]
        row_max[rows] = z[rows].max(axis=-1)
        if compiled_exp:
            kernels.exp_shifted(z[rows], row_max[rows], e_rows)         # e = exp(z - m)
        else:
            kernels.shift_rows(z[rows], row_max[rows], e_rows, sum_z[rows])
            xp.exp(e_rows, out=e_rows)                                  # e = exp(z - m)
        kernels.cross_entropy_gradient(e_rows, targets[rows], row_scale[rows], eps,
                                       sum_e[rows], wanted, z[rows] if sum_z_here else no_rows,
                                       sum_z[rows])
    return statistics


def _checked_normalizer(normalizer):
    """A positive finite number (a 0-d NumPy array read as one), a 0-d float device array
    (used unread), or None; anything else is refused."""
    host = backend.get_backend("cpu").xp
    if isinstance(normalizer, host.ndarray) and normalizer.ndim == 0 \
            and normalizer.dtype.kind in "iuf":
        normalizer = normalizer.item()  # a host array's value is checked as a number's
    if normalizer is None or _device_scalar(normalizer):
        return normalizer
    if isinstance(normalizer, numbers.Real) and not isinstance(normalizer, bool | host.bool_):
        try:
            value = float(normalizer)
        except OverflowError:  # an integer past any float
            value = math.inf
        if 0 < value < math.inf:
            return normalizer
    raise ValueError(f"cross_entropy: normalizer must be a positive number (the count of "
                     f"tokens the summed loss is divided by, e.g. a training step's target "
                     f"tokens), a 0-d float array on the logits' device, or None, got "
                     f"{normalizer!r}.")


def _device_scalar(value) -> bool:
    """A 0-d floating-point device array (a NumPy scalar is checked as a number, a 0-d NumPy
    array is made one first): a normalizer whose value is not read."""
    return (backend.is_array(value) and not isinstance(value, numbers.Number)
            and value.ndim == 0 and value.dtype.kind == "f")


def cross_entropy(logits, targets, label_smoothing=0.0, ignore_index=None, normalizer=None):
    """Mean over real tokens of -Σ_v q_v log softmax(logits)_v, q the smoothed one-hot target.

    logits (..., V) float, targets (...) integer (a Tensor, array or list, moved to the
    logits' device) -> a 0-d Tensor. Targets equal to ``ignore_index`` (e.g. the padding id)
    are left out of the mean and get zero gradient. With ``normalizer`` (a positive number)
    the sum over real tokens is divided by it instead of by their count: a batch's share of
    the mean over a whole training step, given the step's target tokens. A 0-d float array
    on a GPU is taken as it is, unread: a captured step's count (a NumPy one is checked as a
    number).
    """
    targets = Tensor(on_device_of(logits, targets))  # a Tensor: kept as integers
    return CrossEntropy(label_smoothing, ignore_index, normalizer)(logits, targets)
