"""A catalogue of plausible wrong backwards, the mistakes learners make, and what the grader says.

Each mistake is the reference solution (lessons/solutions/EXERCISE.py) with a line or two
replaced by what a learner might write instead; ``says`` is the part of `check-exercise`'s
answer that names the mistake: its hint, or the sentence that explains a wrong shape or a
wrong number of gradients. tests/course/test_mistakes.py grades every one and checks that the
answer contains ``says`` and not the grader's catch-all hint.

To add one: copy a line of the solution as ``old`` (it must occur exactly once), write the
mistake as ``new``, run the test, and read what the grader answered. If it answers with the
catch-all, teach it the mistake in minitransformer/course/hints.py (layers) or
block_hints.py (blocks).
"""

from dataclasses import dataclass
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[2] / "lessons" / "solutions"


@dataclass(frozen=True)
class Mistake:
    exercise: str
    name: str
    says: str                                   # words of the grader's answer
    edits: tuple[tuple[str, str], ...]          # (text of the solution, the learner's version)

    def source(self) -> str:
        """The solution with the mistake made."""
        text = (SOLUTIONS / f"{self.exercise}.py").read_text()
        for old, new in self.edits:
            if text.count(old) != 1:
                raise ValueError(f"{self.exercise}: {old!r} occurs {text.count(old)} times in "
                                 "the solution, not once.")
            text = text.replace(old, new)
        return text


def mistake(exercise: str, name: str, says: str, *edits: tuple[str, str]) -> Mistake:
    return Mistake(exercise, name, says, edits)


MISTAKES = [
    # ------------------------------------------------------------------ linear
    mistake("linear", "dW transposed", "the transpose of the right gradient",
            ("dW = dout2.T @ x2 ", "dW = x2.T @ dout2 ")),
    mistake("linear", "dx through Wᵀ", "that is dout Wᵀ",
            ("dx = dout2 @ weight ", "dx = dout2 @ weight.T ")),
    mistake("linear", "db a mean", "that is the mean of dout over the rows",
            ("db = dout2.sum(axis=0)", "db = dout2.mean(axis=0)")),
    mistake("linear", "db not summed", "db has the wrong shape: expected (4,), got (3, 4): this "
            "input is shared by all the rows", ("db = dout2.sum(axis=0)", "db = dout2")),
    mistake("linear", "dx not reshaped", "reshape it to its input's shape",
            ("dx = dx.reshape(self.x_shape)", "dx = dx")),
    # ------------------------------------------------------------------ softmax
    mistake("softmax", "zeros", "the gradient is zero everywhere",
            ("dx = y * (dout - row_sum) ", "dx = np.zeros_like(dout) ")),
    mistake("softmax", "diagonal only", "the diagonal of the Jacobian alone",
            ("dx = y * (dout - row_sum) ", "dx = y * dout ")),
    mistake("softmax", "diagonal y(1 - y)", "the diagonal of the Jacobian alone",
            ("dx = y * (dout - row_sum) ", "dx = dout * y * (1 - y) ")),
    mistake("softmax", "sum over the wrong axis", "runs over axis 0, not over the row",
            ("(dout * y).sum(axis=-1, keepdims=True)", "(dout * y).sum(axis=0, keepdims=True)")),
    mistake("softmax", "sign flipped", "the sign is flipped",
            ("dx = y * (dout - row_sum) ", "dx = y * (row_sum - dout) ")),
    # ------------------------------------------------------------------ layer_norm
    mistake("layer_norm", "no mean path", "the path through the mean μ",
            ("dx = rstd * (g - mean_g - x_hat * mean_gx)", "dx = rstd * (g - x_hat * mean_gx)")),
    mistake("layer_norm", "no variance path", "the path through the variance σ²",
            ("dx = rstd * (g - mean_g - x_hat * mean_gx)", "dx = rstd * (g - mean_g)")),
    mistake("layer_norm", "μ and σ² constant", "μ and σ² were treated as constants",
            ("dx = rstd * (g - mean_g - x_hat * mean_gx)", "dx = rstd * g")),
    mistake("layer_norm", "no gain", "the gain is missing", ("g = dout * gain ", "g = dout ")),
    mistake("layer_norm", "dgain not summed", "dgain has the wrong shape: expected (6,), got "
            "(4, 6): this input is shared by all the rows",
            ("dgain = (dout * x_hat).reshape(-1, C).sum(axis=0)", "dgain = dout * x_hat")),
    # ------------------------------------------------------------------ attention
    mistake("attention", "no 1/√D in dq", "off by a factor √D = 2.000",
            ("dq = dscores @ k * self.scale ", "dq = dscores @ k ")),
    mistake("attention", "softmax row sum dropped", "the softmax's row-sum term is missing",
            ("dscores = P * (dP - (dP * P).sum(axis=-1, keepdims=True))", "dscores = P * dP")),
    mistake("attention", "softmax row sum over the wrong axis", "runs over the wrong axis",
            ("(dP * P).sum(axis=-1, keepdims=True)", "(dP * P).sum(axis=-2, keepdims=True)")),
    mistake("attention", "1/√D twice in dk", "off by a factor 1/√D = 0.500",
            ("@ q * self.scale ", "@ q * self.scale ** 2 ")),
    # ------------------------------------------------------------------ embedding
    mistake("embedding", "assignment", "appear more than once",
            ("np.add.at(dW, ids.reshape(-1), dout.reshape(-1, C)) ",
             "dW[ids.reshape(-1)] = dout.reshape(-1, C) ")),
    mistake("embedding", "+= by fancy index", "appear more than once",
            ("np.add.at(dW, ids.reshape(-1), dout.reshape(-1, C)) ", "dW[ids] += dout ")),
    mistake("embedding", "padding row kept", "correct except the padding row 0",
            ("            dW[self.padding_idx] = 0", "            pass")),
    mistake("embedding", "no gradient for ids", "backward returned 1 gradient(s) for 2 inputs "
            "(ids, weight): return one per input, in order, None for",
            ("return None, dW", "return dW")),
    # ------------------------------------------------------------------ cross_entropy
    mistake("cross_entropy", "no label smoothing", "without label smoothing",
            ("q[np.arange(N_rows), t_safe] += 1 - self.eps",
             "q = 0 * q\n        q[np.arange(N_rows), t_safe] += 1")),
    mistake("cross_entropy", "ignored rows count", "wrong only on rows whose target is "
            "ignore_index", ("(real * (dout / n_real))[:, None]",
                             "np.full(len(real), dout / n_real)[:, None]")),
    mistake("cross_entropy", "mean over all rows", "you divided by all the rows",
            ("dout / n_real", "dout / len(real)")),
    mistake("cross_entropy", "no 1/N", "the 1/N of the mean is missing",
            ("(real * (dout / n_real))", "(real * dout)")),
    mistake("cross_entropy", "no dout", "the upstream dout is missing",
            ("(real * (dout / n_real))", "(real / n_real)")),
    # ------------------------------------------------------------------ multi_head_attention
    mistake("multi_head_attention", "softmax row sum dropped",
            "the softmax's row-sum term is missing",
            ("dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))", "dS = P * dP")),
    mistake("multi_head_attention", "softmax row sum over the wrong axis",
            "runs over the wrong axis",
            ("(dP * P).sum(axis=-1, keepdims=True)", "(dP * P).sum(axis=-2, keepdims=True)")),
    mistake("multi_head_attention", "no 1/√D", "the 1/√D is missing from dq and dk",
            ("dq = dS @ k * self.scale ", "dq = dS @ k "),
            ("@ q * self.scale ", "@ q ")),
    mistake("multi_head_attention", "merge undone by a reshape",
            "the merge of the heads was undone with a reshape alone",
            ("dA = dconcat.reshape(B, T, H, D).transpose(0, 2, 1, 3)",
             "dA = dconcat.reshape(B, H, T, D)")),
    mistake("multi_head_attention", "split undone by a reshape",
            "the split into heads was undone with a reshape alone",
            ("dq.transpose(0, 2, 1, 3).reshape(B, T, C)", "dq.reshape(B, T, C)"),
            ("dk.transpose(0, 2, 1, 3).reshape(B, S, C)", "dk.reshape(B, S, C)"),
            ("dv.transpose(0, 2, 1, 3).reshape(B, S, C)", "dv.reshape(B, S, C)")),
    mistake("multi_head_attention", "x_kv through the keys only",
            "dx_kv has only the path through the keys",
            ("dx_kv = dK @ w_k + dV @ w_v ", "dx_kv = dK @ w_k ")),
    mistake("multi_head_attention", "dw_o transposed", "the transpose of the right gradient",
            ("dw_o = dout.reshape(-1, C).T @ concat.reshape(-1, C)",
             "dw_o = concat.reshape(-1, C).T @ dout.reshape(-1, C)")),
    # ------------------------------------------------------------------ dropout
    mistake("dropout", "no scale", "the scale is missing",
            ("dx = dout * keep * self.scale ", "dx = dout * keep ")),
    mistake("dropout", "times 1 - p", "you multiplied by 1 - p where forward divided by it",
            ("dx = dout * keep * self.scale ", "dx = dout * keep * (1 - self.p) ")),
    mistake("dropout", "no mask", "the mask is missing",
            ("dx = dout * keep * self.scale ", "dx = dout * self.scale ")),
    mistake("dropout", "a new mask", "the zeros are in the wrong places",
            ("keep = self.saved", "keep = np.random.random(dout.shape) >= self.p")),
    mistake("dropout", "scaled in evaluation", "in evaluation dropout is the identity",
            ("            return dout\n", "            return dout * (1 - self.p)\n")),
    # ------------------------------------------------------------------ residual_layer_norm
    mistake("residual_layer_norm", "no residual path", "the residual path is missing",
            ("dx = dr + ds @ w ", "dx = ds @ w ")),
    mistake("residual_layer_norm", "no sub-layer path", "dx has only the residual path",
            ("dx = dr + ds @ w ", "dx = dr ")),
    mistake("residual_layer_norm", "dout into the sub-layer",
            "the sub-layer got dout as its upstream gradient", ("ds = dr ", "ds = dout ")),
    mistake("residual_layer_norm", "no mean path", "misses the path through the mean μ",
            ("dr = rstd * (g - mean_g - r_hat * mean_gr)", "dr = rstd * (g - r_hat * mean_gr)")),
    mistake("residual_layer_norm", "no variance path", "misses the path through the variance",
            ("dr = rstd * (g - mean_g - r_hat * mean_gr)", "dr = rstd * (g - mean_g)")),
    # ------------------------------------------------------------------ feed_forward
    mistake("feed_forward", "no ReLU gate", "the ReLU's gate is missing",
            ("dh = da * (h > 0) ", "dh = da ")),
    mistake("feed_forward", "gate by the activation", "the ReLU's derivative is a gate",
            ("dh = da * (h > 0) ", "dh = da * a ")),
    mistake("feed_forward", "dw2 from h", "dw2 was built from the pre-activation h",
            ("dw2 = dout2.T @ a ", "dw2 = dout2.T @ h ")),
    mistake("feed_forward", "db1 not summed", "db1 has the wrong shape: expected (5,), got "
            "(4, 5): this input is shared by all the rows", ("db1 = dh.sum(axis=0)", "db1 = dh")),
]
