"""`check-exercise`: solutions pass, untouched exercises say so, common mistakes are named.

Each wrong backward is a reference solution with one line changed. Where the mistake keeps
the gradient's shape, the index of the largest error that the message must contain is found
independently: the right gradient from the library's autograd, the wrong one from a formula.
"""

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import cli
from minitransformer import functional as F
from minitransformer.course import EXERCISES, check_exercise
from minitransformer.verify import check_function

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
NAMES = list(EXERCISES)


def edited(tmp_path, name, old, new):
    """The solution of ``name`` with ``old`` replaced by ``new``, written to tmp_path."""
    text = (LESSONS / "solutions" / f"{name}.py").read_text()
    assert old in text, old
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace(old, new))
    return path


def library_grads(name, inputs, args, dout):
    """The right gradients, by the library's functional API and autograd engine."""
    leaves = {k: mt.tensor(v, requires_grad=True) if v.dtype.kind == "f" else v
              for k, v in inputs.items()}
    out = {
        "softmax": lambda t: F.softmax(t["x"]),
        "layer_norm": lambda t: F.layer_norm(t["x"], t["gain"], t["bias"], *args),
        "attention": lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], t["mask"]),
        "embedding": lambda t: F.embedding(t["ids"], t["weight"], *args),
        "linear": lambda t: F.linear(t["x"], t["weight"], t["bias"]),
        "cross_entropy": lambda t: F.cross_entropy(t["logits"], t["targets"], *args),
    }[name](leaves)
    out.backward(dout)
    return {k: t.grad for k, t in leaves.items() if isinstance(t, mt.Tensor)}


def no_accumulation(right, inputs, args, dout):
    ids, C = inputs["ids"].reshape(-1), dout.shape[-1]
    dW = np.zeros_like(inputs["weight"])
    dW[ids] = dout.reshape(-1, C)  # a repeated id keeps one row: the mistake
    if args[0] is not None:
        dW[args[0]] = 0
    return dW


def layer_norm_without_mean(right, inputs, args, dout):
    x, gain = inputs["x"], inputs["gain"]
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + args[0])
    x_hat, g = xc * rstd, dout * gain
    return rstd * (g - x_hat * (g * x_hat).mean(-1, keepdims=True))


def layer_norm_without_gain(right, inputs, args, dout):
    x = inputs["x"]
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + args[0])
    x_hat = xc * rstd
    return rstd * (dout - dout.mean(-1, keepdims=True)
                   - x_hat * (dout * x_hat).mean(-1, keepdims=True))


def unsmoothed(right, inputs, args, dout):
    return library_grads("cross_entropy", inputs, (0.0, args[1]), dout)["logits"]


def diagonal_only(right, inputs, args, dout):
    return F.softmax(mt.tensor(inputs["x"])).numpy() * dout


def padding_row_kept(right, inputs, args, dout):
    dW = np.zeros_like(inputs["weight"])
    np.add.at(dW, inputs["ids"].reshape(-1), dout.reshape(-1, dout.shape[-1]))
    return dW  # the padding row's gradient left in: the mistake


# (exercise, line of the solution, its wrong version, gradient, input, words of the hint,
#  the wrong gradient as a formula of (the right gradient, inputs, args, dout))
MISTAKES = [
    ("linear", "dW = dout2.T @ x2 ", "dW = x2.T @ dout2 ", "dW", "weight", "the transpose",
     lambda right, *_: right.T),
    ("softmax", "dx = y * (dout - row_sum) ", "dx = np.zeros_like(dout) ", "dx", "x",
     "zero everywhere", lambda right, *_: 0 * right),
    ("softmax", "dx = y * (dout - row_sum) ", "dx = y * dout ", "dx", "x",
     "diagonal of the Jacobian", diagonal_only),
    ("layer_norm", "dx = rstd * (g - mean_g - x_hat * mean_gx)",
     "dx = rstd * (g - x_hat * mean_gx)", "dx", "x", "path through the mean",
     layer_norm_without_mean),
    ("layer_norm", "g = dout * gain ", "g = dout ", "dx", "x", "the gain is missing",
     layer_norm_without_gain),
    ("attention", "dq = dscores @ k * self.scale ", "dq = dscores @ k ", "dq", "q",
     "factor √D = 2.000", lambda right, *_: 2 * right),
    ("embedding", "np.add.at(dW, ids.reshape(-1), dout.reshape(-1, C)) ",
     "dW[ids.reshape(-1)] = dout.reshape(-1, C) ", "dW", "weight", "appear more than once",
     no_accumulation),
    ("embedding", "            dW[self.padding_idx] = 0", "            pass", "dW", "weight",
     "correct except the padding row 0", padding_row_kept),
    ("cross_entropy", "q[np.arange(N_rows), t_safe] += 1 - self.eps",
     "q = 0 * q\n        q[np.arange(N_rows), t_safe] += 1", "dlogits", "logits",
     "without label smoothing", unsmoothed),
]


@pytest.mark.parametrize("name", NAMES)
def test_every_solution_passes(name):
    result = check_exercise(name, LESSONS / "solutions" / f"{name}.py")
    assert result.passed, result.message
    n = len(EXERCISES[name].cases)
    assert result.message.startswith(f"{name}: all {n} cases pass (max relative error")
    assert all(c.gradcheck.passed and c.gradcheck.max_rel_error < 1e-6 for c in result.cases)


@pytest.mark.parametrize("name", NAMES)
def test_every_reference_passes_the_gradient_check(name):
    """What a learner's backward is compared with is proved by finite differences itself, on
    every case of the exercise: the library's Functions, and the block references of
    ``course/references.py``, whose backward is the library's autograd over the block."""
    exercise = EXERCISES[name]
    for case in exercise.cases:
        inputs = case.make_inputs(mt.backend.get_backend("cpu").make_rng(0))
        report = check_function(lambda *xs, c=case: exercise.reference(*c.args)(*xs), *inputs,
                                name=f"{name} [{case.note}]")
        assert report.passed and report.max_rel_error < 1e-6, str(report)
        checked = [check.label for check in report.inputs]
        assert checked == [f"input {i}" for i, g in enumerate(exercise.grads) if g is not None]


@pytest.mark.parametrize("name", NAMES)
def test_untouched_exercise_is_not_written_yet(name, capsys):
    path = LESSONS / "exercises" / f"{name}.py"
    assert cli.main(["check-exercise", name, str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: backward not written yet") and "write the backward" in out
    # Self-contained: numpy and minitransformer's Function, nothing else.
    imports = [node for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.Import | ast.ImportFrom)]
    assert all(isinstance(i, ast.Import) and [a.name for a in i.names] == ["numpy"] or
               isinstance(i, ast.ImportFrom) and i.module == "minitransformer" and
               [a.name for a in i.names] == ["Function"] for i in imports)


@pytest.mark.parametrize("name, old, new, grad, input_name, hint, wrong", MISTAKES,
                         ids=["linear-transposed-dW", "softmax-zeros", "softmax-diagonal",
                              "layer_norm-no-mean-term", "layer_norm-no-gain",
                              "attention-no-scale-in-dq",
                              "embedding-no-accumulation", "embedding-padding-row",
                              "cross_entropy-no-smoothing"])
def test_a_wrong_backward_is_located_and_explained(tmp_path, name, old, new, grad, input_name,
                                                   hint, wrong):
    result = check_exercise(name, edited(tmp_path, name, old, new))
    assert not result.passed
    k, case = next((k, c) for k, c in enumerate(result.cases) if not c.passed)
    assert f"case {k + 1} of {len(result.cases)}, {case.note}" in result.message
    assert f"{grad} is wrong: largest error at {grad}[" in result.message
    assert hint in result.message, result.message
    args = EXERCISES[name].cases[k].args
    right = library_grads(name, case.inputs, args, case.dout)[input_name]
    got = wrong(right, case.inputs, args, case.dout)
    # the entry named is one of largest error (equal errors, as label smoothing's ε / V on
    # every entry, are told apart by rounding alone)
    error = np.abs(got - right)
    index = case.wrong[0].index
    assert np.isclose(error[index], error.max(), rtol=1e-9, atol=0)
    assert f"{grad}[{', '.join(map(str, index))}]" in result.message, result.message
    assert np.isclose(case.wrong[0].expected, right[index])


def test_wrong_shapes_name_the_gradient_and_the_fix(tmp_path, capsys):
    path = edited(tmp_path, "linear", "db = dout2.sum(axis=0)  ", "db = dout2  ")
    assert cli.main(["check-exercise", "linear", str(path)]) == 1
    out = capsys.readouterr().out
    assert "db has the wrong shape: expected (4,), got (3, 4)" in out and "sums over" in out
    path = edited(tmp_path, "linear", "dW = dout2.T @ x2 ", "dW = x2.T @ dout2 ")
    assert "fails too (dW has the wrong shape)" in check_exercise("linear", path).message


@pytest.mark.parametrize("returned", ["Tensor(dout2.sum(axis=0))", "dout2.sum(axis=0).tolist()"])
def test_a_gradient_that_is_not_an_array_is_named(tmp_path, returned):
    """A Tensor was reported as "dtype object", a list as float64."""
    path = edited(tmp_path, "linear", "db = dout2.sum(axis=0)  ", f"db = {returned}  ")
    path.write_text("from minitransformer import Tensor\n" + path.read_text())
    message = check_exercise("linear", path).message
    kind = "Tensor" if returned.startswith("Tensor") else "list"
    assert f"db is a {kind}, not a NumPy array: backward takes the arrays" in message, message


def test_ignored_targets_and_a_missing_mean_are_recognised(tmp_path):
    ignored = edited(tmp_path, "cross_entropy", "(real * (dout / n_real))[:, None]",
                     "np.full(len(real), dout / n_real)[:, None]")
    assert "wrong only on rows whose target is ignore_index" in check_exercise(
        "cross_entropy", ignored).message
    by_rows = edited(tmp_path, "cross_entropy", "dout / n_real", "dout / len(real)")
    assert "divided by all the rows" in check_exercise("cross_entropy", by_rows).message


@pytest.mark.parametrize("name, old, new, hint", [
    ("linear", "dW = dout2.T @ x2 ", "dW = 2.5 * dout2.T @ x2 ",
     r"hint: off by a constant factor 2\.5: check the scale\."),
    # rstd recomputed without eps: a factor of about 1 + 3e-06, not to be printed as "1.000"
    ("layer_norm", "x_hat, rstd, gain = self.saved",
     "x_hat, rstd, gain = self.saved\n        rstd = 1 / np.sqrt(1 / rstd**2 - self.eps)",
     r"hint: off by a constant factor 1 \+ \d\.\de-06, almost 1: is a small constant such "
     r"as eps missing"),
], ids=["factor-2.5", "factor-almost-1"])
def test_a_constant_factor_is_printed_so_that_it_shows(tmp_path, name, old, new, hint):
    message = check_exercise(name, edited(tmp_path, name, old, new)).message
    assert re.search(hint, message), message


def test_syntax_import_and_runtime_errors_name_the_line(tmp_path):
    path = edited(tmp_path, "softmax", "def backward(self, dout):", "def backward(self, dout)")
    line = 1 + path.read_text().splitlines().index("    def backward(self, dout)")
    message = check_exercise("softmax", path).message
    assert f"{path} has a syntax error at line {line}" in message
    path.write_text("import no_such_module_here\n")
    assert "failed at line 1 (`import no_such_module_here`): ModuleNotFoundError" in \
        check_exercise("softmax", path).message
    path = edited(tmp_path, "softmax", "dx = y * (dout - row_sum) ", "dx = y * (dout - rowsum) ")
    line = 1 + next(i for i, s in enumerate(path.read_text().splitlines()) if "rowsum)" in s)
    message = check_exercise("softmax", path).message
    assert f"backward raised at line {line} (`dx = y * (dout - rowsum)`): NameError" in message


def test_a_file_that_calls_sys_exit_fails_instead_of_passing(tmp_path, capsys):
    path = tmp_path / "softmax.py"
    path.write_text("import sys\nsys.exit(0)\n")
    result = check_exercise("softmax", path)
    assert not result.passed and "SystemExit" in result.message
    assert cli.main(["check-exercise", "softmax", str(path)]) != 0
    path = edited(tmp_path, "softmax", "dx = y * (dout - row_sum) ",
                  "import sys; sys.exit(0); dx = y * (dout - row_sum) ")
    result = check_exercise("softmax", path)
    assert not result.passed and "backward raised" in result.message


def test_the_librarys_class_or_backward_does_not_pass_as_the_learners(tmp_path):
    path = tmp_path / "softmax.py"
    path.write_text("from minitransformer.functional.activation import Softmax\n")
    result = check_exercise("softmax", path)
    assert not result.passed
    assert result.message == (
        f"softmax: {path} imports Softmax from minitransformer.functional.activation instead "
        f"of defining it; write the class in the file itself, starting from "
        f"lessons/exercises/softmax.py.")
    path.write_text("from minitransformer.functional import activation\n\n"
                    "class Softmax(activation.Softmax):\n    pass\n")
    result = check_exercise("softmax", path)
    assert not result.passed
    assert "takes its backward from minitransformer.functional.activation" in result.message
    path.write_text("from minitransformer import Function\n\n"
                    "class Softmax(Function):\n    def forward(self, x):\n        return x\n")
    result = check_exercise("softmax", path)
    assert not result.passed and "Softmax has no backward; write it in the class" in \
        result.message


def test_usage_errors_exit_2(tmp_path, capsys):
    assert cli.main(["check-exercise", "softmaxx", "x.py"]) == 2
    assert "choose one of linear, softmax, layer_norm" in capsys.readouterr().err
    missing = tmp_path / "nope.py"
    assert cli.main(["check-exercise", "softmax", str(missing)]) == 2
    assert f"{missing} does not exist; give the file of your softmax exercise" in \
        capsys.readouterr().err
    assert cli.main(["check-exercise", "softmax", str(tmp_path)]) == 2
    assert f"{tmp_path} is a folder" in capsys.readouterr().err
    assert cli.main(["check-exercise"]) == 2
    assert cli.main(["check-exercise", "--list"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_exercise_gives_the_solutions_forward(name):
    """Everything but backward is the same in the starting file and in the solution."""
    def methods(folder):
        tree = ast.parse((LESSONS / folder / f"{name}.py").read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
        return {f.name: ast.dump(f) for f in cls.body
                if isinstance(f, ast.FunctionDef) and f.name != "backward"}
    exercise, solution = methods("exercises"), methods("solutions")
    assert "forward" in exercise and exercise == solution


def test_json_answers_one_object_with_every_case(tmp_path, capsys):
    assert cli.main(["check-exercise", "attention", str(LESSONS / "solutions" / "attention.py"),
                     "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    answer = json.loads(out)
    assert answer["exercise"] == "attention" and answer["passed"] is True
    assert answer["file"].endswith("attention.py") and "all 4 cases pass" in answer["message"]
    assert [c["note"] for c in answer["cases"]] == [c.note for c in EXERCISES["attention"].cases]
    assert all(c["passed"] and c["gradcheck"]["passed"] and c["wrong"] == []
               for c in answer["cases"])

    path = edited(tmp_path, "attention", "dq = dscores @ k * self.scale ", "dq = dscores @ k ")
    assert cli.main(["check-exercise", "attention", str(path), "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["passed"] is False and answer["message"].startswith("attention: FAILED")
    first = answer["cases"][0]
    assert not first["passed"] and first["gradcheck"]["passed"] is False
    assert [w["grad"] for w in first["wrong"]] == ["dq"]
    wrong = first["wrong"][0]
    assert "factor √D = 2.000" in wrong["hint"] and len(wrong["index"]) == 2
    assert np.isclose(wrong["got"], 2 * wrong["expected"])
    assert first["rel_errors"]["dk"] < 1e-12 and first["rel_errors"]["dq"] > 0.1

    assert cli.main(["check-exercise", "softmax", str(LESSONS / "exercises" / "softmax.py"),
                     "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["passed"] is False and "write the backward" in answer["cases"][0]["not_written"]


def test_json_writes_what_is_not_finite_as_null(tmp_path, capsys):
    path = edited(tmp_path, "softmax", "dx = y * (dout - row_sum) ", "dx = y / 0 ")
    with np.errstate(divide="ignore", invalid="ignore"):
        assert cli.main(["check-exercise", "softmax", str(path), "--json"]) == 1
    wrong = json.loads(capsys.readouterr().out)["cases"][0]["wrong"][0]
    assert wrong["got"] is None and wrong["rel_error"] is None and "nan or inf" in wrong["hint"]


def test_list_json_and_usage_errors_with_json(capsys):
    assert cli.main(["check-exercise", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed][:len(NAMES)] == NAMES and len(listed) >= 14
    assert {"name", "class", "summary"} == set(listed[0])
    assert cli.main(["check-exercise", "softmaxx", "x.py", "--json"]) == 2
    assert capsys.readouterr().out == ""


def test_a_hint_shared_by_several_gradients_is_written_once(tmp_path):
    path = edited(tmp_path, "feed_forward", "dh = da * (h > 0) ", "dh = da ")
    message = check_exercise("feed_forward", path).message
    assert message.count("the ReLU's gate is missing") == 1
    assert "hint: the same as for dx." in message


def test_the_block_references_leave_the_host_generator_alone():
    before = mt.backend.host_rng().bit_generator.state
    assert check_exercise("multi_head_attention",
                          LESSONS / "solutions" / "multi_head_attention.py").passed
    assert mt.backend.host_rng().bit_generator.state == before
