"""`check-exercise` for the algorithm exercises (course/tasks/): the solutions pass, the
starting files say they are not written yet, every catalogued mistake (task_mistakes.py) fails
with its own hint, and what the grader compares with is the library's own behaviour.
"""

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from task_mistakes import MISTAKES

import minitransformer as mt
from minitransformer import backend, cli
from minitransformer.course import check_exercise
from minitransformer.course.tasks import TASKS, adam_warmup, autograd_engine, beam_step, masks
from minitransformer.course.tasks._common import Learner
from minitransformer.optim import Adam, noam_rate
from minitransformer.translation.decode import beam_search, gnmt_length_penalty

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
NAMES = ["autograd_engine", "adam_warmup", "beam_step", "masks"]


def patched(mistake, tmp_path):
    """The solution of the mistake's exercise with its patch applied, written to tmp_path."""
    text = (LESSONS / "solutions" / f"{mistake.exercise}.py").read_text()
    for old, new in mistake.patch:
        if old.startswith("<function "):  # the whole function, up to the next top-level line
            start = text.index(f"def {old[len('<function '):-1]}(")
            end = re.search(r"\n(?=\S)", text[start:])
            old = text[start:start + end.start() + 1 if end else len(text)]
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / f"{mistake.exercise}.py"
    path.write_text(text)
    return path


def test_the_four_tasks_are_registered():
    assert list(TASKS) == NAMES


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("name", NAMES)
def test_every_solution_passes(name, seed):
    result = check_exercise(name, LESSONS / "solutions" / f"{name}.py", seed=seed)
    assert result.passed, result.message
    n = len(TASKS[name].cases)
    assert result.message.startswith(f"{name}: all {n} cases pass (")
    assert len(result.cases) == n and all(c.passed for c in result.cases)


@pytest.mark.parametrize("name", NAMES)
def test_untouched_exercise_is_not_written_yet(name, capsys):
    path = LESSONS / "exercises" / f"{name}.py"
    assert cli.main(["check-exercise", name, str(path)]) == 1
    out = capsys.readouterr().out
    first = {"autograd_engine": "backward", "adam_warmup": "noam_rate",
             "beam_step": "beam_step", "masks": "causal_mask"}[name]  # the first case's
    assert out.startswith(f"{name}: {first} not written yet ({path} says: ")
    assert f"check again: minitransformer check-exercise {name} {path}" in out
    # Self-contained: numpy, nothing else.
    imports = [node for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.Import | ast.ImportFrom)]
    assert all(isinstance(i, ast.Import) and [a.name for a in i.names] == ["numpy"]
               for i in imports)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[f"{m.exercise}-{m.id}" for m in MISTAKES])
def test_a_catalogued_mistake_fails_with_its_hint(mistake, tmp_path):
    result = check_exercise(mistake.exercise, patched(mistake, tmp_path))
    assert not result.passed
    k = next(k for k, c in enumerate(result.cases) if not c.passed)
    lines = result.message.splitlines()
    assert lines[1].startswith(f"case {k + 1} of {len(result.cases)}, {result.cases[k].note}: ")
    hint = next(line for line in lines if line.startswith("    hint: "))
    assert mistake.hint in hint, result.message
    others = [m.id for m in MISTAKES if m.exercise == mistake.exercise and m.hint in hint
              and m.id != mistake.id]
    assert others == [], f"the hint for {mistake.id} names {others} too: {hint}"
    assert "Traceback" not in result.message


def test_every_task_names_at_least_three_mistakes():
    for name in NAMES:
        assert len({m.id for m in MISTAKES if m.exercise == name}) >= 3, name
    assert len({(m.exercise, m.id) for m in MISTAKES}) == len(MISTAKES)


# ----------------------------------------------------------------------------- the references

def test_the_reference_walk_is_the_engines():
    """The grader's walk, without a mistake switched on, gives the library engine's gradients:
    the wrong walks it recognises differ from the right one by their switch alone."""
    for build in (autograd_engine._diamond, autograd_engine._linear_with_grads,
                  autograd_engine._transformer):
        with backend.default_dtype("float64"):
            expected, graph = build(np.random.default_rng(1)), build(np.random.default_rng(1))
            expected.root.backward(expected.dout)
            autograd_engine.reference_walk(graph.root, graph.dout)
        for name, leaf in graph.leaves.items():
            np.testing.assert_allclose(leaf.grad, expected.leaves[name].grad, rtol=1e-12,
                                       atol=1e-14, err_msg=name)


def test_adams_variant_without_a_mistake_is_optim_adam():
    g = np.random.default_rng(0)
    param, grads = g.standard_normal(5), [g.standard_normal(5) for _ in range(6)]
    rates = [noam_rate(t, 16, 3) for t in range(1, 7)]
    p = mt.tensor(param.copy(), requires_grad=True)
    adam, state = Adam([p], betas=(0.9, 0.98), eps=1e-9), (param, 0 * param, 0 * param)
    for t, (grad, rate) in enumerate(zip(grads, rates, strict=True), start=1):
        p.grad, adam.lr = grad.copy(), rate
        adam.step()
        state = adam_warmup.adam_variant(*state[:1], grad, *state[1:], t, rate)
        np.testing.assert_allclose(state[0], p.data, rtol=1e-12)
    for wrong, _ in adam_warmup.RATE_MISTAKES:  # every wrong rate is wrong somewhere
        assert any(abs(wrong(s, 512, 4000, 2.0) - noam_rate(s, 512, 4000, 2.0)) > 1e-9
                   for s in (1, 4000, 8000))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_from_the_reference_step_is_beam_search(seed):
    """What the grader's last beam case compares with is the library's beam_search: the same
    hypotheses and scores, sentence by sentence."""
    assert beam_step.length_penalty(7, 0.6) == gnmt_length_penalty(7, 0.6)
    with backend.default_dtype("float64"):
        model, src = beam_step.search_model(seed), beam_step.search_sources(seed)
        hyps, scores = beam_search(model, src, beam_step.BOS, beam_step.EOS,
                                   beam_size=beam_step.K_SEARCH,
                                   length_penalty=beam_step.ALPHA_SEARCH,
                                   max_len=beam_step.LIMIT_SEARCH, return_scores=True)
        for i in range(src.shape[0]):
            hyp, score = beam_step.search(beam_step.reference_step, model, src[i:i + 1],
                                          beam_step.K_SEARCH, beam_step.ALPHA_SEARCH,
                                          beam_step.LIMIT_SEARCH)
            assert hyp == hyps[i] and score == pytest.approx(scores[i], rel=1e-9)


def test_the_beam_cases_put_eos_where_they_say():
    """The first cases draw scores until the EOS candidates stand where the case needs them
    (ranks among the 2K best, 0 the best; K = 3, and 4 in the last)."""
    wanted = {1: lambda r: r and 0 < max(r) < 3, 2: lambda r: r and min(r) >= 3,
              3: lambda r: sum(x < 4 for x in r) >= 2}
    for k, holds in wanted.items():
        seen = []

        def step(alive, log_probs, eos, t, alpha, seen=seen):
            seen.append(beam_step._eos_ranks(alive, log_probs))
            return beam_step.reference_step(alive, log_probs, eos, t, alpha)
        learner = Learner(Path("beam_step.py"), "beam_step", {"beam_step": step})
        for seed in range(4):
            beam_step.CASES[k].run(learner, seed)
        assert len(seen) == 4 and all(holds(ranks) for ranks in seen), (k, seen)


def test_masks_of_puts_the_models_masks_back():
    model = masks.tiny_model(0, pad_id=masks.PAD, vocab=masks.VOCAB)
    ids = np.array([[4, 5, masks.PAD]])
    with masks.masks_of(model, source=lambda ids: None, target=lambda ids: None):
        assert model.source_mask(ids) is None
    assert model.source_mask(ids).tolist() == [[[[True, True, False]]]]
    assert model.target_mask(ids).shape == (1, 1, 3, 3)


# ----------------------------------------------------------------------------- the learner's file

@pytest.mark.parametrize("text, expected", [
    ("def causal_mask(T)\n    pass\n", "has a syntax error at line 1"),
    ("import no_such_module_here\n", "failed at line 1 (`import no_such_module_here`): "
                                     "ModuleNotFoundError"),
    ("def padding_mask(ids, pad_id):\n    return ids\n", "defines no function named causal_mask"),
    ("from minitransformer.functional import causal_mask\n\n"
     "def padding_mask(ids, pad_id):\n    return ids\n",
     "imports causal_mask from minitransformer.functional.attention instead of defining it"),
    ("import sys\nsys.exit(0)\n", "SystemExit"),
])
def test_a_file_that_does_not_load_is_one_sentence(tmp_path, text, expected):
    path = tmp_path / "masks.py"
    path.write_text(text)
    result = check_exercise("masks", path)
    assert not result.passed and expected in result.message.splitlines()[0], result.message
    assert result.message.startswith("masks: ") and "Traceback" not in result.message


def test_an_error_inside_the_learners_function_names_its_line(tmp_path):
    path = tmp_path / "masks.py"
    path.write_text((LESSONS / "solutions" / "masks.py").read_text().replace(
        "position = np.arange(T)", "position = np.arange(T) + undefined_name"))
    line = 1 + next(i for i, s in enumerate(path.read_text().splitlines())
                    if "undefined_name" in s)
    message = check_exercise("masks", path).message
    assert "case 1 of 5, causal_mask's shape and dtype" in message
    assert f"causal_mask(1) raised at line {line} (`position = np.arange(T) + undefined_name`)" \
           ": NameError" in message


def test_an_answer_of_the_wrong_form_is_named(tmp_path):
    path = tmp_path / "beam_step.py"
    path.write_text("def beam_step(alive_scores, log_probs, eos_id, t, alpha):\n"
                    "    return alive_scores\n")
    message = check_exercise("beam_step", path).message
    assert "not ((beams, tokens, scores), finished)" in message
    path = tmp_path / "adam_warmup.py"
    path.write_text((LESSONS / "solutions" / "adam_warmup.py").read_text().replace(
        "return param, m, v", "return param"))
    assert "return the three new arrays (param, m, v)" in check_exercise("adam_warmup",
                                                                         path).message


def test_grading_leaves_the_callers_state_as_it_was():
    backend.manual_seed(5)
    before = backend.host_rng().bit_generator.state
    for name in NAMES:
        check_exercise(name, LESSONS / "solutions" / f"{name}.py")
    assert backend.host_rng().bit_generator.state == before
    assert backend.get_default_dtype() == np.float32 and backend.current_device() == "cpu"


def test_the_command_lists_and_grades_them(capsys):
    assert cli.main(["check-exercise", "--list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    for name in NAMES:
        line = next(line for line in listing if line.split()[0] == name)
        assert TASKS[name].class_name in line and TASKS[name].summary in line
    assert cli.main(["check-exercise", "masks", str(LESSONS / "solutions" / "masks.py")]) == 0
    assert capsys.readouterr().out.startswith("masks: all 5 cases pass (")
