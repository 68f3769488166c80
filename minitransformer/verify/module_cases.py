"""The built-in gradient checks of every Module, up to the whole Transformer with its loss.

A module check treats the parameters as inputs too (``check_module``): every weight matrix and
bias gets its gradient compared with finite differences. Modules with dropout are checked in
training mode: the generators are reseeded before each evaluation, so every evaluation drops
the same units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import backend, nn
from .. import functional as F
from .checker import GradcheckReport, check_module
from .function_cases import inputs, normal

PAD = 0


@dataclass(frozen=True)
class ModuleCase:
    name: str
    make_module: Callable[[], nn.Module]
    make_inputs: Callable[[Any], tuple]
    note: str = ""
    max_full: int = 64        # parameters and inputs larger than this are checked by direction
    n_directions: int = 4
    unit_dout: bool = False   # dout = 1, as loss.backward() seeds it


def token_ids(vocab: int, *shape: int, n_pad: int = 0) -> Callable[[Any], Any]:
    """Ids in [1, vocab), the last ``n_pad`` positions of the first row set to padding."""
    def make(g):
        ids = g.integers(1, vocab, size=shape)
        if n_pad:
            ids[0, shape[1] - n_pad:] = PAD
        return ids
    return make


def padding_mask(*shape: int) -> Callable[[Any], Any]:
    """(B, 1, 1, S) keys mask with the last key of the first row masked."""
    def make(g):
        xp = backend.get_array_module(g.random((1,)))
        mask = xp.ones(shape, dtype=bool)
        mask[0, ..., -1] = False
        return mask
    return make


class SublayerResidual(nn.Module):
    """A Residual around a Linear sub-layer: the residual connection is checked as a module."""

    def __init__(self, d_model: int, pre_norm: bool):
        super().__init__()
        self.residual = nn.Residual(d_model, p_dropout=0.2, pre_norm=pre_norm)
        self.sublayer = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.residual(x, self.sublayer)


class TransformerLoss(nn.Module):
    """The training objective: label-smoothed cross-entropy of teacher-forced logits."""

    def __init__(self, config: nn.TransformerConfig):
        super().__init__()
        self.model = nn.Transformer(config)

    def forward(self, src, tgt_in, tgt_out):
        logits = self.model(src, tgt_in)
        return F.cross_entropy(logits, tgt_out, label_smoothing=0.1, ignore_index=PAD)


def tiny(**overrides: Any) -> nn.TransformerConfig:
    return nn.TransformerConfig.named("tiny", 23, **{"d_model": 16, "d_ff": 24, **overrides})


class _SelfAttention(nn.Module):
    """Self-attention as a one-input module: attention(x, x, x, mask)."""

    def __init__(self, attention: nn.MultiHeadAttention):
        super().__init__()
        self.attention = attention

    def forward(self, x, mask):
        return self.attention(x, x, x, mask)


class _CrossAttention(nn.Module):
    """Cross-attention as the decoder calls it: attention(x, memory, memory, mask), the memory
    one Tensor, so that its keys and values come from one packed projection."""

    def __init__(self, attention: nn.MultiHeadAttention):
        super().__init__()
        self.attention = attention

    def forward(self, x, memory, mask):
        return self.attention(x, memory, memory, mask)


def causal_mask(T: int) -> Callable[[Any], Any]:
    """(1, 1, T, T): query t sees keys 0..t."""
    return lambda g: F.causal_mask(T).data[None, None]


MODULE_CASES: list[ModuleCase] = [
    ModuleCase("Linear", lambda: nn.Linear(6, 5), inputs(normal(2, 3, 6))),
    ModuleCase("Embedding", lambda: nn.Embedding(9, 4, padding_idx=PAD),
               inputs(token_ids(9, 2, 5, n_pad=2)), "padding row"),
    ModuleCase("LayerNorm", lambda: nn.LayerNorm(6), inputs(normal(2, 3, 6))),
    ModuleCase("Dropout", lambda: nn.Dropout(0.3), inputs(normal(3, 6)), "training mode"),
    ModuleCase("PositionalEncoding", lambda: nn.PositionalEncoding(8, max_len=16),
               inputs(normal(2, 5, 8)), "sinusoidal"),
    ModuleCase("PositionalEncoding", lambda: nn.PositionalEncoding(8, 16, learned=True),
               inputs(normal(2, 5, 8)), "learned"),
    ModuleCase("PositionwiseFeedForward", lambda: nn.PositionwiseFeedForward(6, 10),
               inputs(normal(2, 3, 6))),
    ModuleCase("MultiHeadAttention",
               lambda: _SelfAttention(nn.MultiHeadAttention(8, 2)),
               inputs(normal(2, 4, 8), padding_mask(2, 1, 1, 4)), "self, padding mask"),
    ModuleCase("MultiHeadAttention", lambda: nn.MultiHeadAttention(8, 2),
               inputs(normal(2, 3, 8), normal(2, 5, 8), normal(2, 5, 8)), "cross"),
    ModuleCase("MultiHeadAttention",
               lambda: _CrossAttention(nn.MultiHeadAttention(8, 2)),
               inputs(normal(2, 3, 8), normal(2, 5, 8), padding_mask(2, 1, 1, 5)),
               "cross, one memory (packed K, V), padding mask"),
    ModuleCase("Residual", lambda: SublayerResidual(6, pre_norm=False), inputs(normal(2, 3, 6)),
               "post-LN"),
    ModuleCase("Residual", lambda: SublayerResidual(6, pre_norm=True), inputs(normal(2, 3, 6)),
               "pre-LN"),
    ModuleCase("Residual", lambda: SublayerResidual(6, pre_norm=False).eval(),
               inputs(normal(2, 3, 6)), "post-LN, evaluation mode (unfused)"),
    ModuleCase("EncoderLayer", lambda: nn.EncoderLayer(8, 2, 12, p_dropout=0.1),
               inputs(normal(2, 4, 8), padding_mask(2, 1, 1, 4)), max_full=0, n_directions=3),
    ModuleCase("DecoderLayer", lambda: nn.DecoderLayer(8, 2, 12, p_dropout=0.1),
               inputs(normal(2, 3, 8), normal(2, 4, 8)), max_full=0, n_directions=3),
    ModuleCase("DecoderLayer", lambda: nn.DecoderLayer(8, 2, 12, p_dropout=0.1),
               inputs(normal(2, 3, 8), normal(2, 4, 8), causal_mask(3), padding_mask(2, 1, 1, 4)),
               "causal and padding masks", max_full=0, n_directions=3),
    ModuleCase("Encoder", lambda: nn.Encoder(2, 8, 2, 12, pre_norm=True),
               inputs(normal(2, 4, 8)), "pre-LN", max_full=0, n_directions=2),
    ModuleCase("Decoder", lambda: nn.Decoder(2, 8, 2, 12),
               inputs(normal(2, 3, 8), normal(2, 4, 8)), max_full=0, n_directions=2),
    ModuleCase("Decoder", lambda: nn.Decoder(2, 8, 2, 12, pre_norm=True),
               inputs(normal(2, 3, 8), normal(2, 4, 8), causal_mask(3), padding_mask(2, 1, 1, 4)),
               "pre-LN, causal and padding masks", max_full=0, n_directions=2),
    ModuleCase("Transformer", lambda: nn.Transformer(tiny()),
               inputs(token_ids(23, 2, 5, n_pad=1), token_ids(23, 2, 4)), "tiny, logits",
               max_full=0, n_directions=2),
    ModuleCase("Transformer",
               lambda: nn.Transformer(tiny(tie_output=False, learned_positions=True)),
               inputs(token_ids(23, 2, 5, n_pad=1), token_ids(23, 2, 4)),
               "untied output, learned positions", max_full=0, n_directions=2),
    ModuleCase("Transformer+loss", lambda: TransformerLoss(tiny()),
               inputs(token_ids(23, 2, 5, n_pad=1), token_ids(23, 2, 4),
                      token_ids(23, 2, 4, n_pad=1)),
               "tiny, label smoothing 0.1", max_full=0, n_directions=2),
    ModuleCase("Transformer+loss", lambda: TransformerLoss(tiny()),
               inputs(token_ids(23, 2, 5, n_pad=1), token_ids(23, 2, 4),
                      token_ids(23, 2, 4, n_pad=1)),
               "dout = 1, as loss.backward()", max_full=0, n_directions=2, unit_dout=True),
]


def run_module_case(case: ModuleCase, seed: int = 0) -> GradcheckReport:
    backend.manual_seed(seed)
    module = case.make_module()
    generator = backend.get_backend().make_rng(seed)
    report = check_module(module, *case.make_inputs(generator), name=case.name, seed=seed,
                          max_full=case.max_full, n_directions=case.n_directions,
                          unit_dout=case.unit_dout)
    if case.note:
        report.shapes = f"{report.shapes} [{case.note}]"
    return report


def full_suite(pattern: str | None = None) -> list[tuple[Any, Callable[..., GradcheckReport]]]:
    """(case, runner) for every Function case and every Module case whose name contains
    ``pattern`` (all of them when it is empty): what ``minitransformer gradcheck`` runs."""
    from . import function_cases

    suite = [(case, function_cases.run_case) for case in function_cases.CASES]
    suite += [(case, run_module_case) for case in MODULE_CASES]
    return [(case, run) for case, run in suite if (pattern or "").lower() in case.name.lower()]
