"""The numbers stated in the teachers' answers (lessons/answers/), each computed by the library.

An answer marks a number it states with an HTML comment right after it, which the page does
not show:

    The FFN costs 2,097,152 <!-- check: 03.ffn_macs --> multiply-adds per token.

tests/course/test_answers.py reads the number written just before the comment (a number, a
list [a, b], nested lists, or a shape (a, b); or, for a comment opening a line, the number
ending the line above), calls the function registered here under that name, and
asserts that the two agree to the precision written: 2,097,152 exactly, 0.881 to ±0.0005,
4.7e-11 to ±0.05e-11. Options after the name change the comparison:

    tol=0.02      agree to ±0.02 instead
    factor=3      agree within a factor of 3 (rounding noise: a finite-difference error)
    below, above  the written number is a bound the value stays under (over)
    below=1e-12   the value stays under 1e-12 (a number written as rounding noise, 2.2e-16)

A function registered with ``slow=True`` (a training run, minutes) is run only when
MINITRANSFORMER_SLOW_ANSWERS=1. To add a number: write it in the answer with its comment, and
register a function here that computes it from the library, small and seeded.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import minitransformer as mt
from minitransformer import Function
from minitransformer import functional as F
from minitransformer.backend import get_array_module
from minitransformer.verify import check_function


@dataclass
class Check:
    function: Callable[[], Any]
    slow: bool = False


CHECKS: dict[str, Check] = {}
ROOT = Path(__file__).resolve().parents[2]


def check(name: str, slow: bool = False) -> Callable:
    def register(function: Callable[[], Any]) -> Callable[[], Any]:
        assert name not in CHECKS, f"two checks named {name}"
        CHECKS[name] = Check(function, slow)
        return function
    return register


def _load_script(name: str) -> Any:
    """A measurement script of lessons/answers/ as a module."""
    path = ROOT / "lessons" / "answers" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- chapter 1: autograd

X1, W1 = np.array([1.0, 2.0, 3.0]), np.array([0.5, -0.3, 0.2])


@functools.cache
def _ch01_square_grads() -> tuple[list, list]:
    x, w = mt.tensor(X1, requires_grad=True), mt.tensor(W1, requires_grad=True)
    (x * x * w).sum().backward()
    return x.grad.tolist(), w.grad.tolist()


check("01.dx")(lambda: _ch01_square_grads()[0])
check("01.dw")(lambda: _ch01_square_grads()[1])


def _ch01_fd_error(h: float) -> float:
    """Chapter 1's central differences of y = Σ tanh(x w) against the exact gradient."""
    exact = (1 - np.tanh(X1 * W1) ** 2) * W1
    numeric = np.array([(np.tanh((X1 + h * e) * W1).sum() - np.tanh((X1 - h * e) * W1).sum())
                        / (2 * h) for e in np.eye(3)])
    return float(np.abs(numeric - exact).max())


for _h in (1e-2, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12):
    check(f"01.fd_error_h{_h:.0e}")(functools.partial(_ch01_fd_error, _h))


def _ch01_twice() -> list:
    x, w = mt.tensor(X1, requires_grad=True), mt.tensor(W1)
    y = (x * w).tanh().sum()
    y.backward(retain_graph=True)
    y.backward()
    return x.grad.tolist()


check("01.grad_after_two_backwards")(_ch01_twice)


@check("01.chain_grad")
def _ch01_chain() -> float:
    a = mt.tensor([2.0], requires_grad=True)
    z = a
    for _ in range(10_000):
        z = z * 1.0
    z.sum().backward()
    return float(a.grad[0])


@check("01.recursion_limit")
def _ch01_recursion_limit() -> int:
    return sys.getrecursionlimit()


# ---------------------------------------------------------------- chapter 2: gradient checks

class _Standardize(Function):
    """Chapter 2's NaiveStandardize with the backward of exercise 1."""

    def forward(self, x):
        xp = get_array_module(x)
        mean = x.mean(axis=-1, keepdims=True)
        std = xp.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
        x_hat = (x - mean) / std
        self.saved = (x_hat, std)
        return x_hat

    def backward(self, dout):
        x_hat, std = self.saved
        return (dout - dout.mean(axis=-1, keepdims=True)
                - x_hat * (dout * x_hat).mean(axis=-1, keepdims=True)) / std


@check("02.standardize_rel_error")
def _ch02_standardize() -> float:
    x = np.random.default_rng(0).standard_normal((3, 6))
    return check_function(lambda t: _Standardize()(t), x).max_rel_error


def _ch02_float32_tanh(h: float) -> float:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    dout = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    analytic = dout * (1 - np.tanh(x) ** 2)
    h32, numeric = np.float32(h), np.zeros_like(x)
    for j in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[j] = h32
        numeric[j] = ((np.tanh(x + e) - np.tanh(x - e)) * dout).sum() / (2 * h32)
    return float(np.abs(numeric - analytic).max() / np.abs(analytic).max())


for _h in (1e-1, 1e-2, 3e-3, 1e-3, 1e-4):
    check(f"02.float32_tanh_h{_h:.0e}")(functools.partial(_ch02_float32_tanh, _h))


class _BrokenSoftmax(Function):
    def forward(self, x):
        xp = get_array_module(x)
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def backward(self, dout):
        return get_array_module(dout).zeros_like(dout)


@check("02.broken_softmax_one_direction")
def _ch02_one_direction() -> float:
    x = np.random.default_rng(0).standard_normal((2, 5))
    report = check_function(lambda t: _BrokenSoftmax()(t), x, max_full=0, n_directions=1)
    assert not report.passed
    return report.max_rel_error


# ---------------------------------------------------------------- chapter 3: linear, FFN

check("03.ffn_macs")(lambda: 2 * 512 * 2048)
check("03.attention_projection_macs")(lambda: 4 * 512 * 512)


@check("03.base_ffn_parameters")
def _ch03_ffn_parameters() -> int:
    from minitransformer.nn import PositionwiseFeedForward
    return PositionwiseFeedForward(512, 2048).num_parameters()


@check("03.one_position_dw_error")
def _ch03_one_position() -> float:
    rng = np.random.default_rng(0)
    x, dout = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 5))
    full = np.einsum("bto,bti->oi", dout, x)
    first = dout[:, 0].T @ x[:, 0]
    return float(np.abs(first - full).max() / np.abs(full).max())


# ---------------------------------------------------------------- chapter 4: softmax

@check("04.underflow_gap")
def _ch04_underflow_gap() -> float:
    low, high = 50.0, 200.0   # second probability > 0 at low, exactly 0 at high
    for _ in range(50):
        mid = (low + high) / 2
        p = F.softmax(mt.tensor(np.array([0.0, -mid], dtype=np.float32))).numpy()[1]
        low, high = (low, mid) if p == 0 else (mid, high)
    return high


check("04.underflow_gap_theory")(lambda: 150 * math.log(2))
check("04.smallest_subnormal")(lambda: float(np.float32(2.0 ** -149)))
check("04.float32_exp_overflow")(lambda: math.log(float(np.finfo(np.float32).max)))
check("04.temperature_1_top")(lambda: F.softmax(mt.tensor([2.0, 1.0, 0.5])).numpy().max())


# ---------------------------------------------------------------- chapter 5: attention

def _ch05_weights(scale: float) -> list:
    scores = np.array([316.8, 271.5]) / scale
    e = np.exp(scores - scores.max())
    return (e / e.sum()).tolist()


check("05.scaled_scores")(lambda: (np.array([316.8, 271.5]) / math.sqrt(512)).tolist())
check("05.weights_scaled")(lambda: _ch05_weights(math.sqrt(512)))
check("05.second_weight_unscaled")(lambda: _ch05_weights(1.0)[1])


def _ch05_attention_over_dk(q, k, v):
    return F.matmul(F.softmax(F.matmul(q, k.swapaxes(-1, -2)) / q.shape[-1]), v)


@check("05.over_dk_rel_error")
def _ch05_over_dk_check() -> float:
    rng = np.random.default_rng(0)
    report = check_function(_ch05_attention_over_dk, rng.standard_normal((2, 3, 4)),
                            rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3)))
    assert report.passed
    return report.max_rel_error


@functools.cache
def _ch05_saturation(d: int) -> dict[str, float]:
    """Chapter 5's measurement at one d_k, scaled by 1/√d_k ("sqrt") and by 1/d_k ("d"): the
    variance of the scores, the mean largest of 10 weights, the median |dS| at the other nine
    keys for a random dP, and the mean norm of the gradient dQ = dS K / scale."""
    rng = np.random.default_rng(0)
    qs, ks = rng.standard_normal((2000, d)), rng.standard_normal((2000, 10, d))
    raw = np.einsum("nd,nkd->nk", qs, ks)                                   # (n, 10)
    dP = rng.standard_normal((2000, 10))
    result = {}
    for name, scale in (("sqrt", math.sqrt(d)), ("d", d)):
        s = raw / scale
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        dS = p * (dP - (dP * p).sum(axis=1, keepdims=True))
        others = p < p.max(axis=1, keepdims=True)
        dQ = np.einsum("nk,nkd->nd", dS, ks) / scale                        # (n, d)
        result[f"var_{name}"] = float(s.var())
        result[f"top_{name}"] = float(p.max(axis=1).mean())
        result[f"grad_{name}"] = float(np.median(np.abs(dS[others])))
        result[f"dq_{name}"] = float(np.linalg.norm(dQ, axis=1).mean())
    return result


for _d in (4, 64, 1024):
    for _key in ("var_d", "top_sqrt", "top_d", "grad_sqrt", "grad_d", "dq_sqrt", "dq_d"):
        check(f"05.saturation_{_key}_{_d}")(
            functools.partial(lambda d, k: _ch05_saturation(d)[k], _d, _key))


# ---------------------------------------------------------------- chapter 6: masks

@functools.cache
def _ch06_tiny_model():
    from minitransformer.nn import Transformer, TransformerConfig
    mt.manual_seed(0)
    return Transformer(TransformerConfig.named("tiny", 20, p_dropout=0.0)).eval()


def _ch06_decoder_logits(src, tgt, self_mask):
    model = _ch06_tiny_model()
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    x = model.tgt_embed(mt.tensor(tgt)) * math.sqrt(model.config.d_model)
    x = model.tgt_positions(x, 0)
    return model.project(model.decoder(x, memory, self_mask, src_mask)).numpy()


@check("06.earlier_positions_moved_without_causal_mask")
def _ch06_no_causal() -> int:
    """How many of the changes at j = 1..5 move some position before j (all 5 expected)."""
    src, tgt = np.array([[5, 6, 7, 8, 9]]), np.array([[2, 11, 12, 13, 14, 15]])
    no_causal = (tgt != 0)[:, None, None, :]
    before = _ch06_decoder_logits(src, tgt, no_causal)
    moved_earlier = 0
    for j in range(1, tgt.shape[1]):
        changed = tgt.copy()
        changed[0, j] = 17
        moved = np.abs(_ch06_decoder_logits(src, changed, no_causal) - before).max(axis=-1)[0]
        moved_earlier += bool(np.all(moved[:j] > 0))
    return moved_earlier


def _ch06_encoded(src) -> np.ndarray:
    with mt.no_grad():
        return _ch06_tiny_model().encode(np.array([src])).numpy()[0]


check("06.right_padding_difference")(
    lambda: float(np.abs(_ch06_encoded([9, 4, 0, 0])[:2] - _ch06_encoded([9, 4])).max()))
check("06.left_padding_difference")(
    lambda: float(np.abs(_ch06_encoded([0, 0, 9, 4])[2:] - _ch06_encoded([9, 4])).max()))


def _ch06_additive(scores, allowed) -> list:
    scores = np.asarray(scores, dtype=np.float32)
    added = scores + np.where(allowed, 0, -1e9).astype(np.float32)
    return F.softmax(mt.tensor(added)).numpy().tolist()


check("06.additive_mixed_row")(lambda: _ch06_additive([1, 2, 0.5, 3], [1, 1, 0, 0]))
check("06.additive_masked_row")(lambda: _ch06_additive([1, 2, 0.5, 3], [0, 0, 0, 0]))
check("06.float32_spacing_at_1e9")(lambda: float(np.spacing(np.float32(1e9))))


# ---------------------------------------------------------------- chapter 7: heads

def _ch07_bias_gradients() -> dict[str, float]:
    from minitransformer import backend
    from minitransformer.nn import MultiHeadAttention
    rng = np.random.default_rng(0)
    with backend.default_dtype("float64"):
        mt.manual_seed(0)
        mha = MultiHeadAttention(8, 2)
        query = mt.tensor(rng.standard_normal((2, 3, 8)))
        memory = mt.tensor(rng.standard_normal((2, 4, 8)))
        out = mha(query, memory, memory)
        out.backward(rng.standard_normal(out.shape))
    return {name: float(np.abs(getattr(mha, name).bias.grad).max())
            for name in ("w_q", "w_k", "w_v")}


check("07.key_bias_grad")(lambda: _ch07_bias_gradients()["w_k"])
check("07.query_bias_grad")(lambda: _ch07_bias_gradients()["w_q"])


def _ch07_two_keys(n_heads: int) -> list:
    """Query 0's weights on tokens e0, e1, e2 in each head, with W^Q and W^K set so that head
    1 matches key 1 and head 2 key 2 (exercise 2)."""
    from minitransformer.nn import MultiHeadAttention
    c = 10.0
    w_q, w_k = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    w_q[0, 0] = w_q[2, 0] = c          # the query of token 0: column 0 (head 1), 2 (head 2)
    w_k[0, 1] = c                      # head 1's key column: token 1 only
    w_k[2, 2] = c                      # head 2's key column: token 2 only
    mha = MultiHeadAttention(4, n_heads)
    for layer, weight in ((mha.w_q, w_q), (mha.w_k, w_k)):
        layer.weight.data[...] = weight
        layer.bias.data[...] = 0
    x = mt.tensor(np.eye(4, dtype=np.float32)[None, :3])
    _, weights = mha(x, x, x, return_weights=True)
    return weights.numpy()[0, :, 0].round(4).tolist()


check("07.two_heads_weights")(lambda: _ch07_two_keys(2))
check("07.one_head_weights")(lambda: _ch07_two_keys(1))


@functools.cache
def _ch07_heads_measurement() -> dict:
    """lessons/answers/measure_heads.py's table (about a minute and a half on 2 cores)."""
    return _load_script("measure_heads").measure()


for _task, _ffn in (("neighbours", True), ("neighbours", False), ("left", True)):
    for _heads in (1, 2, 4):
        for _steps in (300, 600, 1200):
            check(f"07.heads_{_task}_{'ffn' if _ffn else 'attn'}_h{_heads}_{_steps}", slow=True)(
                functools.partial(lambda key, steps: float(np.mean(
                    _ch07_heads_measurement()[key][steps])), (_task, _ffn, _heads), _steps))


@check("07.base_d_k")
def _ch07_base_d_k() -> int:
    from minitransformer.nn import MultiHeadAttention
    return MultiHeadAttention(512, 8).d_head


@check("07.base_mha_parameters")
def _ch07_base_mha_parameters() -> int:
    from minitransformer.nn import MultiHeadAttention
    return MultiHeadAttention(512, 8).num_parameters()


check("07.scores_megabytes_T512_h32")(lambda: 8 * 32 * 512 * 512 * 4 / 1e6)


# ---------------------------------------------------------------- chapter 8: positions

def _ch08_table(length: int, d_model: int = 64) -> np.ndarray:
    from minitransformer.nn import sinusoidal_table
    with mt.default_dtype("float64"):
        return sinusoidal_table(length, d_model)


@functools.cache
def _ch08_similarity() -> np.ndarray:
    """PE[50] · PE[50 + k] for k = -50..50, d_model = 64."""
    table = _ch08_table(101)
    return table @ table[50]


check("08.similarity_at_0")(lambda: _ch08_similarity()[50])
check("08.similarity_asymmetry")(
    lambda: np.abs(_ch08_similarity() - _ch08_similarity()[::-1]).max())
check("08.first_rise_k")(lambda: int(np.argmax(np.diff(_ch08_similarity()[50:]) > 0)) + 1)
check("08.similarity_at_5_6")(lambda: _ch08_similarity()[55:57].tolist())
check("08.similarity_min_0_50")(lambda: (_ch08_similarity()[50:].min(),
                                         int(_ch08_similarity()[50:].argmin())))


@functools.cache
def _ch08_big_table() -> np.ndarray:
    return _ch08_table(60_001)


for _L in (64, 1000, 5000, 20_000):
    check(f"08.rank_L{_L}")(functools.partial(
        lambda L: int(np.linalg.matrix_rank(_ch08_big_table()[:L + 1])), _L))
check("08.slowest_period")(lambda: 2 * math.pi * 10000 ** (62 / 64))


@check("08.fit_error_L64")
def _ch08_fit_error() -> float:
    """Least-squares M_1 from rows 0..64: its largest entry error against the rotation."""
    table = _ch08_table(66)
    fitted, *_ = np.linalg.lstsq(table[:65], table[1:66], rcond=None)  # table M = shifted
    exact = np.zeros((64, 64))
    for i in range(32):
        omega = 1 / 10000 ** (2 * i / 64)
        c, s = math.cos(omega), math.sin(omega)
        exact[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return float(np.abs(fitted.T - exact).max())


def _ch08_norms(d_model: int) -> tuple[float, float]:
    from minitransformer.nn import Embedding
    mt.manual_seed(0)
    table = Embedding(1000, d_model).weight.numpy().astype(np.float64) * math.sqrt(d_model)
    return (float(np.linalg.norm(table, axis=1).mean()),
            float(np.linalg.norm(_ch08_table(100, d_model), axis=1).mean()))


for _d in (64, 512):
    check(f"08.embedding_norm_d{_d}")(functools.partial(lambda d: _ch08_norms(d)[0], _d))
    check(f"08.position_norm_d{_d}")(functools.partial(lambda d: _ch08_norms(d)[1], _d))


@check("08.learned_parameters")
def _ch08_learned_parameters() -> int:
    from minitransformer.nn import PositionalEncoding
    return PositionalEncoding(512, 1024, learned=True).num_parameters()


# ---------------------------------------------------------------- chapter 9: LayerNorm

def _ch09_without_residuals(encoder, x):
    for layer in encoder.layers:
        x = layer.attn_residual.norm(layer.self_attn(x, x, x))
        x = layer.ff_residual.norm(layer.feed_forward(x))
    return x


@functools.cache
def _ch09_depth(n_layers: int, residual: bool) -> dict[str, float]:
    """A post-LN encoder (d_model 64) at initialisation, with or without its residuals: the
    first/last ratio of the FFN gradient norms, the input's gradient norm and the mean cosine
    similarity of a sentence's output vectors."""
    from minitransformer.nn import Encoder
    rng = np.random.default_rng(0)
    batch = rng.standard_normal((8, 10, 64)).astype(np.float32)
    target = mt.tensor(rng.standard_normal((8, 10, 64)), dtype="float32")
    mt.manual_seed(0)
    encoder = Encoder(n_layers, 64, n_heads=4, d_ff=256, p_dropout=0.0)
    x = mt.tensor(batch, requires_grad=True)
    out = encoder(x) if residual else _ch09_without_residuals(encoder, x)
    ((out - target) ** 2).mean().backward()
    norms = [float(np.linalg.norm(layer.feed_forward.w_1.weight.grad))
             for layer in encoder.layers]
    y = out.numpy() / np.linalg.norm(out.numpy(), axis=-1, keepdims=True)
    similarity = np.einsum("btc,bsc->bts", y, y)
    T = y.shape[1]
    return {"ratio": norms[0] / norms[-1], "input": float(np.linalg.norm(x.grad)),
            "cosine": float(((similarity.sum(axis=(1, 2)) - T) / (T * (T - 1))).mean())}


for _n in (2, 12, 24):
    for _residual in (True, False):
        for _what in ("ratio", "input", "cosine"):
            check(f"09.{'residual' if _residual else 'none'}_{_n}_{_what}")(functools.partial(
                lambda n, r, w: _ch09_depth(n, r)[w], _n, _residual, _what))


class _LayerNormWithoutTerm(Function):
    """Chapter 9, exercise 2: LayerNorm (no gain, bias) whose backward drops x̂ mean(g x̂)."""

    def forward(self, x):
        xp = get_array_module(x)
        mean = x.mean(axis=-1, keepdims=True)
        rstd = 1 / xp.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-6)
        x_hat = (x - mean) * rstd
        self.saved = (x_hat, rstd)
        return x_hat

    def backward(self, dout):
        x_hat, rstd = self.saved
        return rstd * (dout - dout.mean(axis=-1, keepdims=True))


@functools.cache
def _ch09_dropped_term() -> dict[str, float]:
    rng = np.random.default_rng(0)
    dout = rng.standard_normal(8)
    g = dout - dout.mean()
    orthogonal = rng.standard_normal(8)
    orthogonal -= orthogonal.mean()
    orthogonal -= g * (orthogonal @ g) / (g @ g)              # mean(g x̂) = 0
    result = {}
    for name, x in (("random", rng.standard_normal(8)), ("orthogonal", orthogonal),
                    ("aligned", dout.copy())):
        grads = []
        for broken in (False, True):
            t = mt.tensor(x, requires_grad=True)
            y = (_LayerNormWithoutTerm()(t) if broken
                 else F.layer_norm(t, np.ones(8), np.zeros(8)))
            y.backward(dout)
            grads.append(t.grad)
        result[f"{name}_true"] = float(np.abs(grads[0]).max())
        result[f"{name}_error"] = float(np.abs(grads[1] - grads[0]).max())
    return result


for _key in ("random_true", "random_error", "orthogonal_error", "aligned_true", "aligned_error"):
    check(f"09.dropped_term_{_key}")(functools.partial(lambda k: _ch09_dropped_term()[k], _key))


@check("09.layer_norm_parameters")
def _ch09_layer_norm_parameters() -> int:
    from minitransformer.nn import LayerNorm
    return LayerNorm(512).num_parameters()


# ---------------------------------------------------------------- chapter 10: the stacks

def _ch10_count(name: str, vocab: int = 37000, shared: bool = True) -> dict[str, int]:
    """Chapter 10's formula for a named configuration (checked against the library on the
    tiny model, whose count it must give exactly): the embedding table and the total."""
    from minitransformer.nn import NAMED_CONFIGS, Transformer, TransformerConfig

    def count(N, d, d_ff, vocab, tables):
        attention = 4 * (d * d + d)
        ffn = d * d_ff + d_ff + d_ff * d + d
        encoder_layer, decoder_layer = attention + ffn + 4 * d, 2 * attention + ffn + 6 * d
        return {"embedding": vocab * d, "encoder": N * encoder_layer,
                "decoder": N * decoder_layer,
                "total": tables * vocab * d + N * (encoder_layer + decoder_layer)}

    for share in (True, False):
        tiny = Transformer(TransformerConfig.named("tiny", 50, share_embeddings=share,
                                                   tie_output=share))
        assert tiny.num_parameters() == count(2, 32, 64, 50, 1 if share else 3)["total"]
    c = NAMED_CONFIGS[name]
    return count(c["n_layers"], c["d_model"], c["d_ff"], vocab, 1 if shared else 3)


check("10.base_total")(lambda: _ch10_count("base")["total"])
check("10.base_untied_total")(lambda: _ch10_count("base", shared=False)["total"])
check("10.base_embedding")(lambda: _ch10_count("base")["embedding"])
check("10.base_encoder")(lambda: _ch10_count("base")["encoder"])
check("10.base_decoder")(lambda: _ch10_count("base")["decoder"])
check("10.base_embedding_percent")(
    lambda: 100 * _ch10_count("base")["embedding"] / _ch10_count("base")["total"])
check("10.big_embedding_percent")(
    lambda: 100 * _ch10_count("big")["embedding"] / _ch10_count("big")["total"])
check("10.big_total")(lambda: _ch10_count("big")["total"])
check("10.base_untied_embedding_percent")(
    lambda: 300 * _ch10_count("base")["embedding"] / _ch10_count("base", shared=False)["total"])


@check("10.tiny_untied_extra")
def _ch10_tiny_untied() -> list:
    from minitransformer.nn import Transformer, TransformerConfig
    return [Transformer(TransformerConfig.named("tiny", 50, share_embeddings=s, tie_output=t))
            .num_parameters() for s, t in ((True, True), (False, False))]


@functools.cache
def _ch10_cache_shapes() -> tuple[tuple, tuple]:
    """Layer 0's cached self- and cross-attention keys after five decoding steps."""
    from minitransformer.nn import Transformer, TransformerConfig
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", 50, p_dropout=0.0)).eval()
    src = np.array([[11, 12, 13, 14, 15, 16], [17, 18, 19, 0, 0, 0]])   # (B, S) = (2, 6)
    with mt.no_grad():
        src_mask = model.source_mask(src)
        memory = model.encode(src, src_mask)
        cache, ids = model.new_cache(), np.full((2, 1), 2)
        for _ in range(5):
            logits = model.decode(ids, memory, src_mask, cache)          # (B, 1, V)
            ids = logits.numpy()[:, -1:].argmax(-1)
    self_cache, cross_cache = cache.layers[0]
    return tuple(self_cache.k.shape), tuple(cross_cache.k.shape)


check("10.cached_self_keys_step5")(lambda: _ch10_cache_shapes()[0])
check("10.cached_cross_keys_step5")(lambda: _ch10_cache_shapes()[1])
check("10.base_percent_of_paper")(lambda: 100 * _ch10_count("base")["total"] / 65e6)


# ---------------------------------------------------------------- chapter 11: embeddings

@check("11.tied_gradient_is_sum_of_three")
def _ch11_tied_sum() -> float:
    """Largest difference between the tied table's gradient and the sum of the gradients of
    three untied copies of it (source, target, output), relative to the largest entry."""
    from minitransformer.nn import Transformer, TransformerConfig
    rng = np.random.default_rng(0)
    src, tgt_in, tgt_out = (rng.integers(3, 20, (2, n)) for n in (5, 4, 4))
    src[1, 3:] = tgt_in[1, 3:] = tgt_out[1, 3:] = 0
    mt.manual_seed(0)
    tied = Transformer(TransformerConfig.named("tiny", 20, p_dropout=0.0))
    F.cross_entropy(tied(src, tgt_in), tgt_out, ignore_index=0).backward()
    untied = Transformer(TransformerConfig.named("tiny", 20, p_dropout=0.0,
                                                 share_embeddings=False, tie_output=False))
    tied_params, untied_params = dict(tied.named_parameters()), dict(untied.named_parameters())
    for name, param in untied_params.items():
        param.data[...] = tied_params.get(name, tied_params["src_embed.weight"]).data
    F.cross_entropy(untied(src, tgt_in), tgt_out, ignore_index=0).backward()
    three = sum(untied_params[n].grad
                for n in ("src_embed.weight", "tgt_embed.weight", "out_proj.weight"))
    tied_grad = tied_params["src_embed.weight"].grad
    return float(np.abs(three - tied_grad).max() / np.abs(tied_grad).max())


@functools.cache
def _ch11_unit_variance() -> dict[str, float]:
    """A d_model = 512 model's scaled embedding norm, initial logit spread and loss, with the
    library's N(0, 1/d_model) table and with N(0, 1)."""
    from minitransformer.nn import Transformer, TransformerConfig
    result = {}
    for name in ("default", "unit"):
        mt.manual_seed(0)
        model = Transformer(TransformerConfig.named("tiny", 1000, d_model=512, n_heads=8,
                                                    d_ff=2048, p_dropout=0.0))
        if name == "unit":
            table = np.random.default_rng(1).standard_normal((1000, 512)).astype(np.float32)
            table[0] = 0                                                  # the padding row
            model.src_embed.weight.data[...] = table
        rng = np.random.default_rng(0)
        src, tgt_in, tgt_out = (rng.integers(3, 1000, (8, n)) for n in (12, 10, 10))
        with mt.no_grad():
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits, tgt_out).item()
        table = model.src_embed.weight.numpy()[1:] * math.sqrt(512)
        result[f"{name}_norm"] = float(np.linalg.norm(table, axis=1).mean())
        result[f"{name}_logit_std"] = float(logits.numpy().std())
        result[f"{name}_loss"] = loss
    return result


for _key in ("default_norm", "unit_norm", "default_logit_std", "unit_logit_std",
             "default_loss", "unit_loss"):
    check(f"11.{_key}")(functools.partial(lambda k: _ch11_unit_variance()[k], _key))
check("11.tying_saves_base")(lambda: 2 * 37000 * 512)


# ---------------------------------------------------------------- chapter 12: smoothing

def _ch12_floor(V: int, eps: float = 0.1) -> float:
    """The library's loss at p = q, the smoothed target itself: the smallest it can be."""
    q = np.full(V, eps / V)
    q[0] += 1 - eps
    logits = mt.tensor(np.log(q)[None], dtype="float64")
    return F.cross_entropy(logits, np.array([0]), label_smoothing=eps).item()


check("12.floor_V8000")(lambda: _ch12_floor(8000))
check("12.floor_V37000")(lambda: _ch12_floor(37000))
check("12.floor_V5")(lambda: _ch12_floor(5))


@functools.cache
def _ch12_multi30k() -> dict[str, float]:
    import json
    rows = [json.loads(line) for line in
            (ROOT / "bench" / "results" / "multi30k.xeon" / "log.jsonl").open()]
    validations = [row["validation"] for row in rows if "validation" in row]
    best = min(validations, key=lambda v: v["valid_loss"])
    return {"best": best["valid_loss"], "best_nll": math.log(best["valid_ppl"]),
            "best_step": best["step"], "last": validations[-1]["valid_loss"],
            "first": validations[0]["valid_loss"]}


for _key in ("best", "best_nll", "best_step", "last", "first"):
    check(f"12.multi30k_{_key}")(functools.partial(lambda k: _ch12_multi30k()[k], _key))


@check("12.padding_in_the_mean")
def _ch12_padding_mean() -> float:
    """Loss with the 3 padding targets given a zero target and averaged over all 12 positions,
    over the library's loss (ignore_index, averaged over the 9 real tokens)."""
    rng = np.random.default_rng(0)
    targets = np.array([[5, 6, 7, 0, 0, 0], [5, 6, 7, 8, 9, 3]])
    logits = rng.standard_normal((2, 6, 10))
    ignored = F.cross_entropy(mt.tensor(logits), targets, ignore_index=0).item()
    zero_target = np.eye(10)[targets] * (targets != 0)[..., None]
    averaged = -(F.log_softmax(mt.tensor(logits)) * mt.tensor(zero_target)).sum() / 12
    return averaged.item() / ignored


# ---------------------------------------------------------------- chapter 13: Adam, warmup

def _ch13_rates() -> list:
    from minitransformer.optim import noam_rate
    return [noam_rate(s, 512, 4000) for s in (3999, 4000, 4001)]


check("13.base_peak")(lambda: _ch13_rates()[1])
check("13.peak_is_the_maximum")(lambda: int(_ch13_rates()[1] >= max(_ch13_rates())))


@check("13.tiny_noam_peak")
def _ch13_tiny_peak() -> float:
    from minitransformer.optim import noam_rate
    return noam_rate(4000, 32, 4000)


@check("13.folded_correction_difference")
def _ch13_folded() -> float:
    """The library's Adam (bias corrections folded into the step size and ε) against the
    textbook update, over 50 steps in float64: the largest difference."""
    from minitransformer.nn import Parameter
    from minitransformer.optim import Adam
    rng = np.random.default_rng(0)
    theta = rng.standard_normal(6)
    param = Parameter(theta.copy())
    optimizer = Adam([param], lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    m, v, by_hand = np.zeros(6), np.zeros(6), theta.copy()
    for t in range(1, 51):
        g = rng.standard_normal(6)
        m = 0.9 * m + 0.1 * g
        v = 0.98 * v + 0.02 * g * g
        by_hand -= 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.98 ** t)) + 1e-9)
        param.grad = g.copy()
        optimizer.step()
    return float(np.abs(param.numpy() - by_hand).max())


# ---------------------------------------------------------------- chapter 15: subwords

WORDS15 = ["low", "lower", "lowest", "newer", "wider", "new", "newest"]


def _ch15_bpe(words: list[list[str]]) -> tuple[list, list]:
    """Chapter 15's merges, run until no pair occurs twice: (merges, final words)."""
    from collections import Counter

    def merge_pair(word, a, b):
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == (a, b):
                out.append(a + b)
                i += 2
            else:
                out.append(word[i])
                i += 1
        return out

    merges = []
    while True:
        pairs = Counter(p for w in words for p in zip(w, w[1:], strict=False))
        if not pairs or pairs.most_common(1)[0][1] < 2:
            return merges, words
        (a, b), _ = pairs.most_common(1)[0]
        merges.append((a, b))
        words = [merge_pair(w, a, b) for w in words]


def _ch15_chapter_corpus():
    return _ch15_bpe([list(w) + ["</w>"] for w in WORDS15 * 3])


check("15.merges_chapter_corpus")(lambda: len(_ch15_chapter_corpus()[0]))
check("15.symbols_chapter_corpus")(
    lambda: len({s for w in WORDS15 for s in w} | {"</w>"}) + len(_ch15_chapter_corpus()[0]))
check("15.final_tokens_chapter_corpus")(
    lambda: len({s for w in _ch15_chapter_corpus()[1] for s in w}))
check("15.merges_once_each")(lambda: len(_ch15_bpe([list(w) + ["</w>"] for w in WORDS15])[0]))


@check("15.sentencepiece_whole_words_at")
def _ch15_sentencepiece() -> int:
    """The smallest SentencePiece vocabulary (of 20, 25, ..., 40) with every word one piece."""
    from minitransformer.data.tokenizer import Tokenizer
    for size in range(20, 45, 5):
        tokenizer = Tokenizer.train(WORDS15 * 3, vocab_size=size)
        if all(len(tokenizer.encode(w)) == 1 for w in WORDS15):
            return size
    return -1


ENGLISH15 = ["The dog sees the cat.", "The old man saw a red ball.",
             "Two young men are walking.", "A woman is reading a newspaper in the park.",
             "The children are playing outside."]
GERMAN15 = ["Der Hund sieht die Katze.", "Der alte Mann sah einen roten Ball.",
            "Zwei junge Männer gehen spazieren.", "Eine Frau liest im Park eine Zeitung.",
            "Die Kinder spielen draußen."]


@check("15.shared_pieces_60")
def _ch15_shared() -> int:
    from minitransformer.data.tokenizer import Tokenizer
    pieces = []
    for text in (ENGLISH15, GERMAN15):
        tokenizer = Tokenizer.train(text * 20, vocab_size=60)
        pieces.append({tokenizer.id_to_piece(i) for i in range(4, tokenizer.vocab_size)})
    return len(pieces[0] & pieces[1])


@functools.cache
def _ch15_multi30k() -> dict[str, float]:
    import pytest

    from minitransformer.data import read_parallel
    from minitransformer.data.tokenizer import Tokenizer
    folder = ROOT.parent / "shared" / "data" / "multi30k"
    if not (folder / "train.de.gz").is_file():
        pytest.skip(f"no Multi30k at {folder}")
    pairs = read_parallel(folder / "train.de.gz", folder / "train.en.gz")
    tokenizer = Tokenizer.train([s for pair in pairs for s in pair], 8000)
    return {lang: sum(len(tokenizer.encode(p[side])) for p in pairs)
            / sum(len(p[side].split()) for p in pairs)
            for side, lang in enumerate(("de", "en"))}


check("15.multi30k_de_tokens_per_word")(lambda: _ch15_multi30k()["de"])
check("15.multi30k_en_tokens_per_word")(lambda: _ch15_multi30k()["en"])


# ---------------------------------------------------------------- chapter 17: decoding

@functools.cache
def _ch17_model():
    """Chapter 17's model, trained as in its full mode (600 steps of reversal: ~15 s)."""
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.optim import Adam
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Transformer(TransformerConfig.named("tiny", 13, p_dropout=0.0))
    optimizer = Adam(model.parameters(), lr=1e-3)
    for _ in range(600):
        length = int(rng.integers(4, 9))
        source = rng.integers(4, 13, size=(32, length))
        target = source[:, ::-1]
        optimizer.zero_grad()
        F.cross_entropy(model(source, np.concatenate([np.full((32, 1), 2), target], 1)),
                        np.concatenate([target, np.full((32, 1), 3)], 1)).backward()
        optimizer.step()
    return model.eval()


def _ch17_log_prob(source, output, limit):
    model = _ch17_model()
    target = [2, *output, 3] if len(output) < limit else [2, *output]
    with mt.no_grad():
        logp = F.log_softmax(model(source[None], np.array([target[:-1]]))).numpy()[0]
    return float(sum(logp[t, token] for t, token in enumerate(target[1:])))


@functools.cache
def _ch17_first_differs() -> dict:
    from minitransformer.translation.decode import beam_search, greedy_decode
    source = np.array([12, 6, 12, 12, 6])
    greedy = greedy_decode(_ch17_model(), source[None], 2, 3, max_len=10)[0]
    beam = beam_search(_ch17_model(), source[None], 2, 3, beam_size=4, length_penalty=0.0,
                       max_len=10)[0]
    with mt.no_grad():
        first = F.softmax(_ch17_model()(source[None], np.array([[2]]))).numpy()[0, 0]
    return {"greedy": greedy, "beam": beam, "greedy_logp": _ch17_log_prob(source, greedy, 10),
            "beam_logp": _ch17_log_prob(source, beam, 10), "p12": float(first[12]),
            "p6": float(first[6])}


for _key in ("greedy", "beam", "greedy_logp", "beam_logp", "p12", "p6"):
    check(f"17.example_{_key}", slow=True)(
        functools.partial(lambda k: _ch17_first_differs()[k], _key))


@check("17.beam_1_equals_greedy")
def _ch17_beam_1() -> int:
    """How many of 40 sources (an untrained tiny model, α 0 and 0.6) decode differently with
    beam_size=1 and greedily: 0."""
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.translation.decode import beam_search, greedy_decode
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", 13, p_dropout=0.0)).eval()
    sources = np.random.default_rng(1).integers(4, 13, size=(20, 7))
    greedy = greedy_decode(model, sources, 2, 3, max_len=12)
    return sum(a != b for alpha in (0.0, 0.6) for a, b in zip(
        greedy, beam_search(model, sources, 2, 3, beam_size=1, length_penalty=alpha,
                            max_len=12), strict=True))


# ---------------------------------------------------------------- chapter 18: sacreBLEU

HYPOTHESES18 = ["A man in a blue shirt is standing on a ladder.",
                "two dogs play in the snow.",
                "A girl, wearing a hat, is running on the beach."]
REFERENCES18 = ["A man in a blue shirt is standing on a ladder cleaning windows.",
                "Two dogs are playing in the snow.",
                "A little girl in a hat runs on the beach."]


def _ch18_bleu(**options) -> Any:
    import sacrebleu
    return sacrebleu.metrics.BLEU(**options).corpus_score(HYPOTHESES18, [REFERENCES18])


def _ch18_chrf(hypotheses=HYPOTHESES18, references=REFERENCES18, **options) -> float:
    import sacrebleu
    return sacrebleu.metrics.CHRF(**options).corpus_score(hypotheses, [references]).score


@functools.cache
def _ch18_first_sentence() -> Any:
    import sacrebleu
    return sacrebleu.metrics.BLEU().corpus_score(HYPOTHESES18[:1], [REFERENCES18[:1]])


check("18.first_precisions")(lambda: _ch18_first_sentence().precisions)
check("18.first_bp")(lambda: _ch18_first_sentence().bp)
check("18.first_bleu")(lambda: _ch18_first_sentence().score)


@check("18.mean_sentence_bleu")
def _ch18_mean_sentence() -> float:
    import sacrebleu
    bleu = sacrebleu.metrics.BLEU(effective_order=True)
    return float(np.mean([bleu.sentence_score(h, [r]).score
                          for h, r in zip(HYPOTHESES18, REFERENCES18, strict=True)]))


check("18.corpus_bleu")(lambda: _ch18_bleu().score)
check("18.bleu_lowercase")(lambda: _ch18_bleu(lowercase=True).score)
check("18.bleu_none")(lambda: _ch18_bleu(tokenize="none").score)
check("18.bleu_char")(lambda: _ch18_bleu(tokenize="char").score)
check("18.chrf")(lambda: _ch18_chrf())
check("18.chrf_lowercase")(lambda: _ch18_chrf(lowercase=True))


@functools.cache
def _ch18_pieces() -> dict[str, float]:
    import sacrebleu

    from minitransformer.data.tokenizer import Tokenizer
    tokenizer = Tokenizer.train((HYPOTHESES18 + REFERENCES18) * 10, vocab_size=70)

    def as_pieces(sentences):
        return [" ".join(tokenizer.id_to_piece(i) for i in tokenizer.encode(s))
                for s in sentences]

    hypotheses, references = as_pieces(HYPOTHESES18), as_pieces(REFERENCES18)
    return {"bleu": sacrebleu.metrics.BLEU(tokenize="none").corpus_score(
                hypotheses, [references]).score,
            "chrf": _ch18_chrf(hypotheses, references)}


check("18.bleu_pieces")(lambda: _ch18_pieces()["bleu"])
check("18.chrf_pieces")(lambda: _ch18_pieces()["chrf"])


# ---------------------------------------------------------------- chapter 14: reversal

@functools.cache
def _ch14_reversal() -> dict:
    """lessons/answers/measure_reversal.py's results (about 2 minutes on 2 cores)."""
    return _load_script("measure_reversal").measure()


_RUNS14 = {"reverse": ("reverse", True, True), "copy": ("copy", True, True),
           "reverse_no_positions": ("reverse", False, True),
           "copy_no_positions": ("copy", False, True),
           "reverse_trained_without_encoder_attention": ("reverse", True, False)}
for _label, _key in (("reverse", "exact"), ("reverse", "tokens"),
                     ("reverse", "weight_on_wanted"), ("reverse", "attends_to"),
                     ("copy", "exact"), ("copy", "tokens"), ("copy", "weight_on_wanted"),
                     ("copy", "attends_to"), ("reverse_no_positions", "exact"),
                     ("reverse_no_positions", "tokens"), ("copy_no_positions", "exact"),
                     ("copy_no_positions", "tokens"),
                     ("reverse_trained_without_encoder_attention", "exact"),
                     ("reverse", "exact without encoder self-attention"),
                     ("reverse", "tokens without encoder self-attention"),
                     ("copy", "exact without encoder self-attention")):
    _name = _key.replace(" without encoder self-attention", "_encoder_attention_off")
    check(f"14.{_label}_{_name}", slow=True)(functools.partial(
        lambda run, key: _ch14_reversal()[run][key], _RUNS14[_label], _key))
check("14.sequences_seen")(lambda: 2000 * 32)


@check("14.tiny_parameters")
def _ch14_parameters() -> int:
    from minitransformer.nn import Transformer, TransformerConfig
    return Transformer(TransformerConfig.named("tiny", 13, p_dropout=0.0)).num_parameters()


# ---------------------------------------------------------------- chapter 21: the GPU

@check("21.estimated_crossing_batch")
def _ch21_crossing() -> float:
    """Exercise 2's estimate from the recorded benchmarks: the GPU's flat step time over the
    CPU's time per target token, in sentences of 30 target tokens."""
    import json
    cpu = json.loads((ROOT / "bench" / "results" / "step.xeon.json").read_text())
    row = next(r for r in cpu["rows"] if r["length"] == 32)
    cpu_per_token = row["median_s"] / row["target_tokens"]
    gpu_step = 0.055  # compare_torch.h100.md: small, 4,000 target tokens, any length
    assert "0.054" in (ROOT / "bench" / "results" / "compare_torch.h100.md").read_text()
    return gpu_step / cpu_per_token / 30


# ---------------------------------------------------------------- chapter 22: dropout

class _OriginalDropout(Function):
    """Srivastava et al.'s dropout: y = x ∘ m in training, (1 - p) x in evaluation."""

    def __init__(self, p: float, training: bool = True):
        self.p, self.training = p, training

    def forward(self, x):
        if not self.training:
            return x * (1 - self.p)
        from minitransformer import backend
        self.saved = backend.rng(backend.device_of(x)).random(x.shape) >= self.p
        return x * self.saved

    def backward(self, dout):
        if not self.training:
            return dout * (1 - self.p)   # fwd: y = (1 - p) x  ->  dx = (1 - p) dout
        return dout * self.saved         # fwd: y = x ∘ m      ->  dx = dout ∘ m


def _ch22_original_fixed_mask(t):
    mt.manual_seed(1)
    return _OriginalDropout(0.3)(t)


@check("22.original_dropout_rel_error")
def _ch22_original() -> float:
    x = np.random.default_rng(0).standard_normal((3, 5))
    report = check_function(_ch22_original_fixed_mask, x)
    assert report.passed
    return report.max_rel_error


@check("22.original_is_scaled_inverted")
def _ch22_scaled() -> float:
    """Largest |original - (1 - p) · inverted| with the same mask."""
    x = np.random.default_rng(0).standard_normal((3, 5))
    original = _ch22_original_fixed_mask(mt.tensor(x)).numpy()
    inverted = x * (original != 0) / (1 - 0.3)
    return float(np.abs(original - (1 - 0.3) * inverted).max())


def _ch22_attention_with_dropout(q, k, v):
    weights = F.softmax(F.matmul(q, k.swapaxes(-1, -2)) / math.sqrt(q.shape[-1]))
    mt.manual_seed(1)
    return F.matmul(F.dropout(weights, 0.3), v)


@check("22.attention_dropout_rel_error")
def _ch22_attention() -> float:
    rng = np.random.default_rng(0)
    report = check_function(_ch22_attention_with_dropout, rng.standard_normal((2, 3, 4)),
                            rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3)))
    assert report.passed
    return report.max_rel_error


@functools.cache
def _ch22_row_sums() -> dict[str, float]:
    """Row sums of 1,000 rows of attention weights over 10 keys after dropout with p = 0.1."""
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1000, 4)), rng.standard_normal((10, 4))
    mt.manual_seed(0)
    sums = F.dropout(F.softmax(mt.tensor(q @ k.T / 2)), 0.1).numpy().sum(axis=1)
    return {"mean": float(sums.mean()), "std": float(sums.std()), "min": float(sums.min()),
            "max": float(sums.max())}


for _key in ("mean", "std", "min", "max"):
    check(f"22.row_sums_{_key}")(functools.partial(lambda k: _ch22_row_sums()[k], _key))


# ---------------------------------------------------------------- chapter 20: why attention

def _ch20_macs() -> dict[str, int]:
    """Multiply-adds of one layer at n = 50, d = 512: each weight matrix is used once per
    position (per step for the recurrent layer); attention adds Q Kᵀ and P V, n² d each."""
    from minitransformer.nn import MultiHeadAttention
    n, d = 50, 512
    attention = MultiHeadAttention(d, 8)
    projections = sum(layer.weight.data.size
                      for layer in (attention.w_q, attention.w_k, attention.w_v, attention.w_o))
    return {"attention_layer": n * projections + 2 * n * n * d, "attention_core": 2 * n * n * d,
            "recurrent": n * (d * d + d * d), "convolution": n * (3 * d * d),
            "table_attention": n * n * d, "table_recurrent": n * d * d,
            "table_convolution": 3 * n * d * d}


for _key in ("attention_layer", "attention_core", "recurrent", "convolution",
             "table_attention", "table_recurrent", "table_convolution"):
    check(f"20.macs_{_key}")(functools.partial(lambda k: _ch20_macs()[k], _key))


@functools.cache
def _ch20_band_reach() -> dict[int, tuple]:
    """Positions the last output of a stack of 1, 4, 5 band-masked (r = 3) attention layers
    depends on, n = 16."""
    from minitransformer.nn import MultiHeadAttention
    n, d, r = 16, 64, 3
    band = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= r          # (n, n)
    rng = np.random.default_rng(0)
    result = {}
    for n_layers in (1, 4, 5):
        mt.manual_seed(0)
        stack = [MultiHeadAttention(d, 4) for _ in range(n_layers)]
        x = mt.tensor(rng.standard_normal((1, n, d)), dtype="float32", requires_grad=True)
        h = x
        for layer in stack:
            h = h + layer(h, h, h, band)
        h[:, -1].sum().backward()
        reach = np.flatnonzero(np.abs(x.grad[0]).sum(axis=1) > 0)
        result[n_layers] = (int(reach.min()), int(reach.max()))
    return result


for _layers in (1, 4, 5):
    check(f"20.band_reach_{_layers}_layers")(
        functools.partial(lambda k: _ch20_band_reach()[k], _layers))


# ---------------------------------------------------------------- chapter 16: a translator

@functools.cache
def _ch16_run(name: str) -> dict:
    """One of lessons/answers/measure_translator.py's runs (about a minute each)."""
    import tempfile
    script = _load_script("measure_translator")
    threads = mt.get_num_threads()
    mt.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as folder:
            return script.train(Path(folder), **script.RUNS[name])
    finally:
        mt.set_num_threads(threads)


for _name, _label in (("1. smoothing 0.1, 4,000 tokens, 500 steps", "chapter"),
                      ("2. smoothing 0.0", "no_smoothing"),
                      ("3. 8,000 tokens, 250 steps", "big_batches"),
                      ("4. 8,000 tokens, 250 steps, warmup 200", "big_batches_warmup_200")):
    check(f"16.ppl_{_label}", slow=True)(
        functools.partial(lambda n: _ch16_run(n)["valid_ppl"], _name))
    check(f"16.bleu_{_label}", slow=True)(
        functools.partial(lambda n: _ch16_run(n)["valid_bleu"], _name))


@functools.cache
def _ch16_resume() -> dict:
    """measure_translator.py's run 5: `minitransformer train` interrupted and resumed."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        return _load_script("measure_translator").interrupted_and_resumed(Path(folder))


check("16.resume_steps_logged", slow=True)(lambda: _ch16_resume()["steps in both logs"])
check("16.resume_loss_difference", slow=True)(
    lambda: _ch16_resume()["largest loss difference"])


# ------------------------------------------------- chapters 9 and 13: warmup, post-/pre-LN

@functools.cache
def _ch09_warmup() -> dict:
    """lessons/answers/measure_warmup.py's table, summarised (about 15 minutes on 2 cores)."""
    script = _load_script("measure_warmup")
    results = script.measure()
    return {key: script.summary(runs, 1000) for key, runs in results.items()}


for _layers, _lr in ((2, 1e-3), (2, 3e-3), (6, 3e-3)):
    for _norm in ("post-LN", "pre-LN"):
        for _schedule in ("warmup", "constant"):
            _key = (_layers, _lr, _norm, _schedule)
            _name = f"{_layers}-{_lr:g}-{_norm[:-3].lower()}-{_schedule}"
            for _column, _label in (("loss at 10", "10"), ("loss at 100", "100"),
                                    ("loss at 1000", "1000"), ("exactly reversed", "exact")):
                check(f"09.warmup_{_name}_{_label}", slow=True)(functools.partial(
                    lambda k, c: float(np.mean(_ch09_warmup()[k][c])), _key, _column))


# ---------------------------------------------------------------- chapter 19: inside

@functools.cache
def _ch19() -> dict:
    """lessons/answers/inspect_translator.py's measurements (about 3 minutes on 2 cores)."""
    return _load_script("inspect_translator").measure()


def _ch19_neighbours(which: str) -> float:
    return max(float(entry[which].max()) for name, entry in _ch19()["survey"].items()
               if name.startswith("encoder"))


check("19.most_previous", slow=True)(lambda: _ch19_neighbours("previous"))
check("19.most_next", slow=True)(lambda: _ch19_neighbours("next"))
for _name in ("encoder 0", "encoder 1", "decoder self 0", "decoder self 1", "cross 0",
              "cross 1"):
    _label = _name.replace(" ", "_")
    check(f"19.entropy_{_label}", slow=True)(functools.partial(
        lambda n: _ch19()["survey"][n]["entropy"].round(2).tolist(), _name))
    check(f"19.uniform_{_label}", slow=True)(functools.partial(
        lambda n: _ch19()["survey"][n]["uniform"], _name))
check("19.verb_top_weights", slow=True)(
    lambda: [found[0][1][-1][1][0][1] for _, _, _, found in _ch19()["verbs"]])


@functools.cache
def _ch22_runs() -> dict:
    """lessons/answers/measure_dropout.py's runs (about 3 minutes on 2 cores)."""
    return _load_script("measure_dropout").measure()


for (_p, _eps), _label in (((0.0, 0.1), "p0_ls01"), ((0.1, 0.1), "p01_ls01"),
                           ((0.3, 0.1), "p03_ls01"), ((0.1, 0.0), "p01_ls0"),
                           ((0.0, 0.0), "p0_ls0")):
    for _key in ("valid_nll", "best_valid_nll", "valid_nll_training_mode"):
        check(f"22.{_label}_{_key}", slow=True)(
            functools.partial(lambda run, k: _ch22_runs()[run][k], (_p, _eps), _key))
    check(f"22.{_label}_train_nll_500", slow=True)(
        functools.partial(lambda run: _ch22_runs()[run]["history"][-1][1], (_p, _eps)))


@check("22.dropout_modules")
def _ch22_dropout_modules() -> int:
    from minitransformer.nn import Dropout, Transformer, TransformerConfig
    model = Transformer(TransformerConfig.named("tiny", 50))
    return sum(isinstance(module, Dropout) for _, module in model.named_modules())


# ---------------------------------------------------------------- chapter 23: data parallelism

@functools.cache
def _ch23() -> dict[str, Any]:
    """The chapter's functions and classes (ring_allreduce, InProcess, local_share, ...), its
    top-level definitions executed alone with its imports: its cells are not run."""
    import ast
    path = ROOT / "lessons" / "23_data_parallelism.py"
    tree = ast.parse(path.read_text())
    kept = [node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            or (isinstance(node, (ast.Import, ast.ImportFrom))
                and "matplotlib" not in ast.unparse(node))]
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(kept, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


@functools.cache
def _ch23_tiny_parameters() -> int:
    from minitransformer.nn import Transformer, TransformerConfig
    return Transformer(TransformerConfig.named("tiny", 1000)).num_parameters()


check("23.tiny_parameters")(_ch23_tiny_parameters)
check("23.tiny_gradient_bytes")(lambda: 4 * _ch23_tiny_parameters())


@functools.cache
def _ch23_tiny_array_bytes() -> list[int]:
    from minitransformer.nn import Transformer, TransformerConfig
    model = Transformer(TransformerConfig.named("tiny", 1000))
    return [4 * p.size for p in model.parameters()]


check("23.tiny_parameter_arrays")(lambda: len(_ch23_tiny_array_bytes()))
check("23.tiny_median_array_bytes")(lambda: float(np.median(_ch23_tiny_array_bytes())))


@functools.cache
def _ch23_sent(N: int) -> tuple[int, int]:
    """Bytes sent by the busiest worker: the ring and the naive scheme, on N float32 buffers
    of the tiny model's size."""
    rng = np.random.default_rng(0)
    buffers = [rng.standard_normal(_ch23_tiny_parameters()).astype(np.float32)
               for _ in range(N)]
    return (int(_ch23()["ring_allreduce"](buffers)[1].max()),
            int(_ch23()["naive_allreduce"](buffers)[1].max()))


check("23.ring_bytes_8")(lambda: _ch23_sent(8)[0])
check("23.naive_root_bytes_8")(lambda: _ch23_sent(8)[1])


@functools.cache
def _ch23_uneven() -> tuple[float, list[int]]:
    """Exercise 2: three workers, buffers of 10 float64 numbers."""
    rng = np.random.default_rng(1)
    buffers = [rng.standard_normal(10) for _ in range(3)]
    summed, sent = _ch23()["ring_allreduce"](buffers)
    return max(float(np.abs(s - sum(buffers)).max()) for s in summed), sent.tolist()


check("23.uneven_ring_error")(lambda: _ch23_uneven()[0])
check("23.uneven_ring_bytes")(lambda: _ch23_uneven()[1])
check("23.uneven_ring_bound")(lambda: 2 * (3 - 1) / 3 * 10 * 8)


@functools.cache
def _ch23_last_step() -> dict[str, Any]:
    """The chapter's "last step of an epoch": the first three token-bucketed batches of 300
    tokens of the built-in task over two workers (0 and 2, and 1), in float64."""
    from minitransformer.data.batching import TokenBatcher
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.translation.corpus import load_corpus, prepare
    tokenizer, data, _ = prepare(load_corpus("builtin"), vocab_size=1000, max_len=100)
    mt.manual_seed(0)
    with mt.default_dtype("float64"):
        model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size,
                                                    p_dropout=0.0))
    batches = list(TokenBatcher(data.train, 300, shuffle=True, seed=0))[:3]

    def summed(share):
        for p in model.parameters():
            p.grad = None
        for batch in share:
            loss = F.cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1,
                                   ignore_index=0)
            (loss * batch.n_tgt_tokens).backward()
        return np.concatenate([p.grad.ravel() for p in model.parameters()])

    shares = [batches[0::2], batches[1:2]]
    counts = [sum(b.n_tgt_tokens for b in share) for share in shares]
    gradients = [summed(share) for share in shares]
    n, N = sum(counts), len(counts)
    exact = sum(gradients) / n
    naive = sum(g / n_k for g, n_k in zip(gradients, counts, strict=True)) / N
    return {"tokens": counts, "weights": [n / (N * n_k) for n_k in counts],
            "difference": float(np.linalg.norm(naive - exact) / np.linalg.norm(exact))}


check("23.last_step_tokens")(lambda: _ch23_last_step()["tokens"])
check("23.last_step_weights")(lambda: _ch23_last_step()["weights"])
check("23.last_step_ratio")(
    lambda: _ch23_last_step()["tokens"][0] / _ch23_last_step()["tokens"][1])
check("23.last_step_difference")(lambda: _ch23_last_step()["difference"])


def _ch23_ring_seconds(n_bytes: float, N: int = 8, alpha: float = 50e-6,
                       beta: float = 1.25e9) -> tuple[float, float]:
    """Exercise 3: the ring's latency and bandwidth terms, in milliseconds."""
    return 1e3 * 2 * (N - 1) * alpha, 1e3 * 2 * (N - 1) / N * n_bytes / beta


@functools.cache
def _ch23_base_parameters() -> int:
    from minitransformer.nn import Transformer, TransformerConfig
    return Transformer(TransformerConfig.named("base", 37000)).num_parameters()


check("23.base_parameters")(_ch23_base_parameters)
check("23.latency_ms")(lambda: _ch23_ring_seconds(0)[0])
check("23.bandwidth_tiny_ms")(lambda: _ch23_ring_seconds(4 * _ch23_tiny_parameters())[1])
check("23.bandwidth_base_ms")(lambda: _ch23_ring_seconds(4 * _ch23_base_parameters())[1])
check("23.crossover_bytes")(lambda: 8 * 50e-6 * 1.25e9)   # N α β: the two terms equal


@functools.cache
def _ch23_idle_worker() -> tuple[bool, float]:
    """Exercise 4: one batch, two workers; worker 1 has none. (Whether its gradients were
    None before the reduction, the largest difference from one process's step after it.)"""
    from minitransformer.data.batching import make_batch
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.optim import Adam
    chapter = _ch23()
    rng = np.random.default_rng(0)
    group = [make_batch([(rng.integers(4, 50, 7).tolist(), rng.integers(4, 50, 6).tolist())
                         for _ in range(4)])]
    n_tokens = group[0].n_tgt_tokens
    mt.manual_seed(0)
    config = TransformerConfig.named("tiny", 50)
    single = Transformer(config)
    replicas = [Transformer(config) for _ in range(2)]
    for replica in replicas:
        replica.load_state_dict(single.state_dict())
    optimizers = [Adam(m.parameters(), lr=0.0, eps=1e-9) for m in [single, *replicas]]
    chapter["local_share"](single, group, 0, 1, 0)
    chapter["update"](single, optimizers[0], n_tokens, 0)
    for rank in range(2):
        chapter["local_share"](replicas[rank], group, rank, 2, 0)
    idle = all(p.grad is None for p in replicas[1].parameters())
    chapter["reduce_together"](replicas, chapter["in_process"](2))
    for replica, optimizer in zip(replicas, optimizers[1:], strict=True):
        chapter["update"](replica, optimizer, n_tokens, 0)
    difference = max(float(np.abs(a.data - b.data).max()) for replica in replicas
                     for a, b in zip(single.parameters(), replica.parameters(), strict=True))
    return idle, difference


check("23.idle_worker_had_no_gradients")(lambda: int(_ch23_idle_worker()[0]))
check("23.idle_worker_difference")(lambda: _ch23_idle_worker()[1])
