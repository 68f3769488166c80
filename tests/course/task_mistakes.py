"""The catalogue of plausible wrong answers to the algorithm exercises (course/tasks/).

Each entry is a mistake learners make, written as a patch of the reference solution
(lessons/solutions/NAME.py): pairs of (text of the solution, what the learner wrote instead),
and words of the hint the grader must give for it, and for no other mistake of the exercise.
test_tasks.py applies every patch, grades the result and checks that it fails with that hint.
To add a mistake, add its patch here; if the grader does not name it yet, add its recogniser
to the task's own list (MISTAKES, RATE_MISTAKES, STEP_MISTAKES, CAUSAL_MISTAKES,
PADDING_MISTAKES).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    exercise: str
    id: str
    patch: tuple[tuple[str, str], ...]   # (old, new) replacements in the solution
    hint: str                            # words the grader's hint must contain


RECURSIVE_ORDER = '''def topological_order(root_node):
    post_order, visited = [], set()

    def visit(node):
        visited.add(node)
        for parent in parents(node):
            if parent not in visited:
                visit(parent)
        post_order.append(node)
    visit(root_node)
    return post_order[::-1]
'''

PROPAGATE_ON_ARRIVAL = '''def backward(root, dout):
    def propagate(node, douts):
        douts = [d if d is not None else np.zeros(shape, dtype)
                 for d, (shape, dtype, _device) in zip(douts, node.output_meta)]
        dinputs = node.backward(*douts)
        if not isinstance(dinputs, tuple):
            dinputs = (dinputs,)
        for edge, dinput in zip(node.next_edges, dinputs):
            if isinstance(edge, tuple):
                grads = [None] * len(edge[0].output_meta)
                grads[edge[1]] = dinput
                propagate(edge[0], grads)
            elif edge is not None and dinput is not None:
                send(edge, np.asarray(dinput), {})
    grads = [None] * len(root.creator.output_meta)
    grads[root.output_index] = dout
    propagate(root.creator, grads)
'''

LIBRARY_WALK = '''def backward(root, dout):
    root.backward(dout)
'''

PER_BEAM = '''    own = np.argsort(-scores.reshape(K, V), axis=1)[:, :2] + V * np.arange(K)[:, None]
    best = own.reshape(-1)[np.argsort(-scores[own.reshape(-1)], kind="stable")]'''

UPDATE_MOMENTS = ("    m = BETA1 * m + (1 - BETA1) * grad            # the mean of the gradients\n"
                  "    v = BETA2 * v + (1 - BETA2) * grad * grad     # the mean of their squares\n")


def _function(name: str, text: str) -> tuple[str, str]:
    """A patch replacing the whole function ``name`` of a solution; filled in by the test
    from the solution's text (from ``def name`` to the next top-level line)."""
    return (f"<function {name}>", text)


LEAF_SEND = "edge.grad = grad.copy() if edge.grad is None else edge.grad + grad"
NODE_SEND = "slots[index] = grad if slots[index] is None else slots[index] + grad"
ZEROS = "d if d is not None else np.zeros(shape, dtype)  # an output nobody used"

MISTAKES = [
    # ------------------------------------------------------------------ autograd_engine
    Mistake("autograd_engine", "leaf-overwrites", ((LEAF_SEND, "edge.grad = grad.copy()"),),
            "kept only the last gradient it got"),
    Mistake("autograd_engine", "node-overwrites", ((NODE_SEND, "slots[index] = grad"),),
            "passed on only one of its gradients"),
    Mistake("autograd_engine", "forward-order",
            (("return post_order[::-1]", "return post_order"),),
            "must run after that of every node using its output"),
    Mistake("autograd_engine", "recursive-order", (_function("topological_order",
                                                             RECURSIVE_ORDER),),
            "recursed deeper than Python allows"),
    Mistake("autograd_engine", "propagate-on-arrival", (_function("backward",
                                                                  PROPAGATE_ON_ARRIVAL),),
            "got its backward called once for each gradient"),
    Mistake("autograd_engine", "none-for-unused-output", ((ZEROS, "d"),),
            "an output nobody used has a gradient of zero"),
    Mistake("autograd_engine", "adds-in-place-into-shared-arrays",
            ((LEAF_SEND, "if edge.grad is None:\n            edge.grad = grad\n        else:\n"
                         "            edge.grad += grad"),),
            "added into in place (+=) in an array that other gradients share"),
    Mistake("autograd_engine", "drops-the-old-grad",
            ((LEAF_SEND, "first = ('leaf', id(edge)) not in pending\n"
                         "        pending[('leaf', id(edge))] = True\n"
                         "        edge.grad = grad.copy() if first else edge.grad + grad"),),
            "the .grad that a leaf held before this backward was thrown away"),
    Mistake("autograd_engine", "calls-the-library", (_function("backward", LIBRARY_WALK),),
            "write the walk yourself"),
    # ------------------------------------------------------------------ adam_warmup
    Mistake("adam_warmup", "no-bias-correction",
            (("m_hat = m / (1 - BETA1 ** step)", "m_hat = m"),
             ("v_hat = v / (1 - BETA2 ** step)", "v_hat = v")), "no bias correction"),
    Mistake("adam_warmup", "bias-correction-of-m-only",
            (("v_hat = v / (1 - BETA2 ** step)", "v_hat = v"),), "only m is bias-corrected"),
    Mistake("adam_warmup", "eps-inside-the-root",
            (("np.sqrt(v_hat) + EPS", "np.sqrt(v_hat + EPS)"),), "ε is inside the square root"),
    Mistake("adam_warmup", "adam-default-beta2",
            (("0.9, 0.98, 1e-9  # §5.3", "0.9, 0.999, 1e-9"),), "the paper used β₂ = 0.98"),
    Mistake("adam_warmup", "betas-swapped",
            (("0.9, 0.98, 1e-9  # §5.3", "0.98, 0.9, 1e-9"),), "β₁ and β₂ are swapped"),
    Mistake("adam_warmup", "adam-default-eps",
            (("0.9, 0.98, 1e-9  # §5.3", "0.9, 0.98, 1e-8"),), "the paper used ε = 1e-9"),
    Mistake("adam_warmup", "v-of-g-not-g-squared",
            (("(1 - BETA2) * grad * grad", "(1 - BETA2) * grad"),), "not g"),
    Mistake("adam_warmup", "uphill",
            (("param = param - lr", "param = param + lr"),), "the update goes uphill"),
    Mistake("adam_warmup", "stale-moments",
            ((UPDATE_MOMENTS, ""),
             ("    return param, m, v", UPDATE_MOMENTS + "    return param, m, v")),
            "used m and v from before"),
    Mistake("adam_warmup", "rate-without-warmup",
            (("min(step ** -0.5, step * warmup_steps ** -1.5)", "step ** -0.5"),),
            "the rate has no warmup"),
    Mistake("adam_warmup", "rate-never-decays",
            (("min(step ** -0.5, step * warmup_steps ** -1.5)", "step * warmup_steps ** -1.5"),),
            "keeps rising after the warmup"),
    Mistake("adam_warmup", "rate-max-not-min",
            (("min(step ** -0.5", "max(step ** -0.5"),), "max where the paper has min"),
    Mistake("adam_warmup", "rate-without-d-model",
            (("factor * d_model ** -0.5 * min", "factor * min"),), "d_model^−0.5 is missing"),
    Mistake("adam_warmup", "rate-warmup-power",
            (("warmup_steps ** -1.5)", "warmup_steps ** -0.5)"),), "not ^−0.5"),
    Mistake("adam_warmup", "rate-without-factor",
            (("return factor * d_model", "return d_model"),), "factor is left out"),
    # ------------------------------------------------------------------ beam_step
    Mistake("beam_step", "top-k-not-2k", (("[:min(2 * K, K * V)]", "[:K]"),),
            "take the 2K best"),
    Mistake("beam_step", "eos-kept-alive",
            (("keep = np.flatnonzero(~is_eos)[:K]", "keep = np.arange(K)"),),
            "a candidate ending in EOS stayed in the beam"),
    Mistake("beam_step", "finished-beyond-k", (("for i in range(K)", "for i in range(len(best))"),),
            "a candidate ranked below the K best finished"),
    Mistake("beam_step", "penalty-on-alive",
            (("tokens[keep], cand[keep]), finished", "tokens[keep], cand[keep] / lp), finished"),),
            "the alive scores were divided by the length penalty"),
    Mistake("beam_step", "no-penalty", (("float(cand[i] / lp)", "float(cand[i])"),),
            "the finished scores are plain log P"),
    Mistake("beam_step", "penalty-multiplies", (("float(cand[i] / lp)", "float(cand[i] * lp)"),),
            "multiplied by the length penalty"),
    Mistake("beam_step", "penalty-without-eos",
            (("lp = length_penalty(t, alpha)", "lp = length_penalty(t - 1, alpha)"),),
            "the length penalty counts the EOS"),
    Mistake("beam_step", "penalty-length-power",
            (("return ((5 + length) / 6) ** alpha", "return length ** alpha"),),
            "GNMT's ((5 + |Y|) / 6)^α"),
    Mistake("beam_step", "no-prefix-score",
            (("(alive_scores[:, None] + log_probs).reshape(-1)", "log_probs.reshape(-1)"),),
            "the prefix's alive score plus the token's"),
    Mistake("beam_step", "beam-and-token-swapped",
            (("best // V, best % V, scores[best]", "best % K, best // K, scores[best]"),),
            "index i is beam i // V and token i % V"),
    Mistake("beam_step", "two-best-of-each-beam",
            (('    best = np.argsort(-scores, kind="stable")[:min(2 * K, K * V)]', PER_BEAM),),
            "not the 2 best of each beam"),
    # ------------------------------------------------------------------ masks
    Mistake("masks", "causal-transposed",
            (("position[None, :] <= position[:, None]", "position[None, :] >= position[:, None]"),),
            "the mask is transposed (the upper triangle)"),
    Mistake("masks", "causal-inverted",
            (("position[None, :] <= position[:, None]", "position[None, :] > position[:, None]"),),
            "PyTorch's attn_mask uses True for masked"),
    Mistake("masks", "causal-without-diagonal",
            (("position[None, :] <= position[:, None]", "position[None, :] < position[:, None]"),),
            "the diagonal is missing"),
    Mistake("masks", "causal-floats",
            (("return position[None, :] <= position[:, None]", "return np.tril(np.ones((T, T)))"),),
            "ask for dtype=bool"),
    Mistake("masks", "causal-masks-nothing",
            (("return position[None, :] <= position[:, None]",
              "return np.ones((T, T), dtype=bool)"),), "it hides nothing"),
    Mistake("masks", "padding-inverted", (("(ids != pad_id)", "(ids == pad_id)"),),
            "True at the padding"),
    Mistake("masks", "padding-compares-with-0", (("(ids != pad_id)", "(ids != 0)"),),
            "compares the ids with 0, not with pad_id"),
    Mistake("masks", "padding-over-queries",
            (("(ids != pad_id)[:, None, None, :]", "(ids != pad_id)[:, None, :, None]"),),
            "the padding is in the keys"),
    Mistake("masks", "padding-without-axes",
            (("(ids != pad_id)[:, None, None, :]", "(ids != pad_id)"),),
            "give it axes for the heads and the queries"),
]
