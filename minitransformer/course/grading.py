"""Grade a learner's hand-written backward: finite differences and the library's reference.

``lessons/exercises/NAME.py`` holds one Function whose forward is given and whose backward the
learner writes. ``check_exercise(NAME, path)`` imports that file and, for each of a few input
cases (leading axes, broadcasting, masks, padding ids, ignored targets):

1. compares its forward with the library's Function (the forward is given: a difference means
   the file was changed there);
2. compares its backward with the library's for the same random upstream gradient, entry by
   entry: this locates the largest error and recognises a few common mistakes;
3. proves it with ``gradcheck.check_function``: central finite differences in float64.

The answer is one message naming the case, the gradient (dW, dq, dgain ...), the index of its
largest error, the expected and received values there, and a hint. Exercise Functions run on
NumPy arrays, so everything here happens on the host, in NumPy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .. import backend
from ..autograd.function import Function
from ..verify.checker import check_function
from .catalog import EXERCISES, Case, Exercise
from .hints import Clue
from .learner_file import LEARNER_ERRORS, load_module
from .learner_file import where as line_of
from .results import CaseResult, ExerciseResult, WrongGradient
from .tasks import TASKS

# every exercise by name: the backwards of catalog.py, then the algorithms of tasks.py
ALL_EXERCISES: dict[str, Any] = {**EXERCISES, **TASKS}



# ----------------------------------------------------------------------------- checking

def check_exercise(name: str, path: str | Path, seed: int = 0) -> ExerciseResult:
    """Grade the learner's file ``path`` for exercise ``name`` (a key of ``ALL_EXERCISES``).

    Raises ValueError for an unknown name and FileNotFoundError for a missing file; anything
    wrong inside the file (syntax, imports, a wrong gradient) is a failed result with a message.
    """
    if name not in ALL_EXERCISES:
        raise ValueError(f"unknown exercise {name!r}; choose one of "
                         f"{', '.join(ALL_EXERCISES)}.")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if name in TASKS:
        return TASKS[name].grade(path, seed)
    exercise = EXERCISES[name]
    cls = _load_function(exercise, path)
    if isinstance(cls, str):
        return ExerciseResult(name, str(path), False, f"{name}: {cls}")
    cases = []
    with backend.device("cpu"):
        for i, case in enumerate(exercise.cases):
            result = _check_case(exercise, cls, case, seed + i, path)
            if result.not_written:
                return ExerciseResult(name, str(path), False, (
                    f"{name}: backward not written yet ({path} says: {result.not_written}).\n"
                    f"Write it (the docstring has hints), then check again: "
                    f"minitransformer check-exercise {name} {path}"), [result])
            cases.append(result)
    return ExerciseResult(name, str(path), all(c.passed for c in cases),
                          _summarise(exercise, cases), cases)


def _load_function(exercise: Exercise, path: Path) -> type | str:
    """The learner's Function class, or a message saying why there is none."""
    module_name = f"_minitransformer_exercise_{exercise.name}"
    module = load_module(path, module_name)
    if isinstance(module, str):
        return module
    # The class, and the backward above all, must be the learner's: one imported from the
    # library (or inheriting its backward) would pass as their own work.
    cls = getattr(module, exercise.class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Function)):
        found = [n for n, v in vars(module).items() if isinstance(v, type)
                 and issubclass(v, Function) and v.__module__ == module_name]
        if len(found) != 1:
            return (f"{path} defines no Function subclass named {exercise.class_name}"
                    f"{' (found ' + ', '.join(found) + ')' if found else ''}.")
        cls = getattr(module, found[0])
    start = f"starting from lessons/exercises/{exercise.name}.py"
    if cls.__module__ != module_name:
        return (f"{path} imports {cls.__name__} from {cls.__module__} instead of defining it; "
                f"write the class in the file itself, {start}.")
    origin = getattr(cls.backward, "__module__", None)
    if cls.backward is Function.backward:
        return f"{path}'s {cls.__name__} has no backward; write it in the class, {start}."
    if origin != module_name:
        return (f"{path}'s {cls.__name__} takes its backward from {origin} instead of "
                f"defining it; write backward in the class itself, {start}.")
    return cls


def _check_case(exercise: Exercise, cls: type, case: Case, seed: int, path: Path) -> CaseResult:
    inputs = case.make_inputs(backend.get_backend("cpu").make_rng(seed))
    named = dict(zip(exercise.inputs, inputs, strict=True))
    result = CaseResult(case.note, ", ".join(
        f"{n} {a.shape}" + ("" if a.dtype.kind == "f" else f" {a.dtype}")
        for n, a in named.items()), inputs=named)
    needs = tuple(a.dtype.kind == "f" for a in inputs)
    reference = exercise.reference(*case.args)
    reference.needs_input_grad = needs
    expected_out = reference.forward(*(a.copy() for a in inputs))
    dout = backend.get_backend("cpu").make_rng(seed + 7919).standard_normal(
        expected_out.shape, dtype="float64")
    expected = _as_tuple(reference.backward(dout.copy()))
    result.dout = dout

    call = f"{cls.__name__}({', '.join(map(repr, case.args))})"
    try:
        learner = cls(*case.args)
    except LEARNER_ERRORS as exc:
        result.problem = (f"{call} raised {type(exc).__name__}: {exc}: keep the signature "
                          f"of the exercise's {exercise.class_name}.__init__.")
        return result
    learner.needs_input_grad = needs
    try:
        out = np.asarray(learner.forward(*(a.copy() for a in inputs)))
    except LEARNER_ERRORS as exc:
        result.problem = f"forward raised{line_of(exc, path)}: {type(exc).__name__}: {exc}"
        return result
    if out.shape != expected_out.shape or not np.allclose(out, expected_out, rtol=1e-9,
                                                          atol=1e-12):
        where = (_largest("out", out, expected_out) if out.shape == expected_out.shape
                 else f"output of shape {out.shape}, expected {expected_out.shape}")
        result.problem = (f"the forward differs from the library's: {where}.\n  The forward is "
                          "given complete: restore it from the exercise file.")
        return result
    dout_passed = dout.copy()
    try:
        got = _as_tuple(learner.backward(dout_passed))
    except NotImplementedError as exc:
        result.not_written = str(exc) or "backward"
        return result
    except LEARNER_ERRORS as exc:
        result.problem = f"backward raised{line_of(exc, path)}: {type(exc).__name__}: {exc}"
        return result
    if not np.array_equal(dout_passed, dout):
        result.problem = "backward changed dout in place: compute new arrays instead."
        return result
    if len(got) != len(inputs):
        result.problem = (f"backward returned {len(got)} gradient(s) for {len(inputs)} inputs "
                          f"({', '.join(exercise.inputs)}): return one per input, in order"
                          + (", None for the ones that are not differentiable."
                             if None in exercise.grads else "."))
        return result
    problems = []
    for name, grad_name, x, g in zip(exercise.inputs, exercise.grads, inputs, got, strict=True):
        if grad_name is None and g is not None:
            problems.append(f"return None as the gradient of {name}: it is not differentiable.")
        elif grad_name is not None and g is None:
            problems.append(f"{grad_name} is None: {name} needs a gradient.")
        elif grad_name is not None and not isinstance(g, np.ndarray | np.generic):
            problems.append(f"{grad_name} is a {type(g).__name__}, not a NumPy array: backward "
                            "takes the arrays of dout and of what forward saved, and returns "
                            "arrays, computed with NumPy (not with Tensors).")
        elif grad_name is not None and np.shape(g) != x.shape:
            problems.append(f"{grad_name} has the wrong shape: expected {x.shape}, got "
                            f"{np.shape(g)}: {_shape_hint(x.shape, np.shape(g))}")
        elif grad_name is not None and np.asarray(g).dtype != x.dtype:
            problems.append(f"{grad_name} has dtype {np.asarray(g).dtype}, but {name} has "
                            f"{x.dtype}: a gradient has its input's dtype.")
    if problems:
        result.problem = "\n  ".join(problems)
        return result

    # The backward's gradients, entry by entry, against the reference's.
    floats = [i for i, n in enumerate(exercise.grads) if n is not None]
    scale = max(float(np.abs(expected[i]).max(initial=0.0)) for i in floats) or 1.0
    for i in floats:
        g, e = np.asarray(got[i]), expected[i]
        error = np.abs(g - e)
        rel = float(error.max(initial=0.0)) / scale if np.isfinite(g).all() else float("inf")
        result.rel_errors[exercise.grads[i]] = rel
        if rel > exercise.rtol:
            index = tuple(int(j) for j in np.unravel_index(  # nan counts as largest
                np.argmax(np.where(np.isnan(error), np.inf, error)), e.shape))
            clue = Clue(exercise.grads[i], g, e, ~(error <= exercise.rtol * scale), result.inputs,
                        case.args, dout, _factor(g, e))
            result.wrong.append(WrongGradient(exercise.grads[i], index, float(e[index]) + 0.0,
                                              float(g[index]) + 0.0, rel, _hint(exercise, clue)))

    # The proof: finite differences on the learner's Function itself.
    try:
        result.gradcheck = check_function(lambda *xs: cls(*case.args)(*xs), *inputs,
                                          name=exercise.name, seed=seed)
    except LEARNER_ERRORS as exc:
        result.problem = f"the gradient check raised{line_of(exc, path)}: {exc}"
        return result
    if not result.wrong and not result.gradcheck.passed:
        result.problem = ("the backward matches the library's, but not finite differences: "
                          "does it depend on state that changes from one call to the next?")
    result.passed = not result.wrong and not result.problem
    return result


def _as_tuple(grads: Any) -> tuple:
    return tuple(grads) if isinstance(grads, tuple | list) else (grads,)


def _largest(name: str, got: Any, expected: Any) -> str:
    index = np.unravel_index(np.argmax(np.abs(got - expected)), expected.shape)
    return (f"largest difference at {name}[{', '.join(map(str, index))}]: expected "
            f"{expected[index]:.6g}, got {got[index]:.6g}")


def _factor(got: Any, expected: Any) -> float | None:
    """c when got = c · expected (c ≠ 1), else None."""
    norm = float((expected * expected).sum())
    if norm == 0 or not np.isfinite(got).all():
        return None
    c = float((got * expected).sum()) / norm
    fits = np.abs(got - c * expected).max() <= 1e-6 * np.abs(expected).max()
    return c if fits and abs(c - 1) > 1e-6 else None


def _shape_hint(expected: tuple, got: tuple) -> str:
    if len(got) >= 2 and (got == expected[::-1] or got == expected[:-2] + expected[:-3:-1]):
        return "check the transposes (a gradient has the shape of its input)."
    if len(got) > len(expected) and got[len(got) - len(expected):] == expected:
        return ("this input is shared by all the rows (broadcast over the leading axes), so "
                "its gradient sums over them.")
    if int(np.prod(got)) == int(np.prod(expected)):
        return "the right number of entries: reshape it to its input's shape."
    return "a gradient has the shape of its input."


def _hint(exercise: Exercise, clue: Clue) -> str:
    got, expected, err = clue.got, clue.expected, clue.got - clue.expected
    if not np.isfinite(got).all():
        return "it contains nan or inf: a division by zero, or exp/log of something unbounded?"
    if not got.any():
        return "the gradient is zero everywhere: did you return zeros?"
    specific = exercise.hint(clue)
    if specific:
        return specific
    if clue.factor is not None:
        if abs(clue.factor + 1) < 1e-6:
            return "the sign is flipped: check the signs of your terms."
        c = clue.factor
        if abs(c - 1) < 1e-3:  # printed as 1.000 it would look like no factor at all
            return (f"off by a constant factor 1 {'+' if c > 1 else '-'} {abs(c - 1):.2g}, "
                    "almost 1: is a small constant such as eps missing, or used differently "
                    "than in forward?")
        return f"off by a constant factor {c:.4g}: check the scale."
    if got.ndim == 2 and got.shape[0] == got.shape[1] and np.allclose(got.T, expected):
        return "this is the transpose of the right gradient: check the order of the factors."
    if err.ndim and err.shape[-1] > 1 and np.abs(err - err.mean(-1, keepdims=True)).max() \
            <= 1e-6 * np.abs(err).max():
        return ("the error is the same along each row (the last axis): a term that sums or "
                "averages over the row is missing or wrong.")
    return "walk the forward steps in reverse and check each one's derivative."


def _summarise(exercise: Exercise, cases: list[CaseResult]) -> str:
    n = len(cases)
    if all(c.passed for c in cases):
        fd = max(c.gradcheck.max_rel_error for c in cases)
        ref = max(max(c.rel_errors.values()) for c in cases)
        versus = "identical to" if ref == 0 else f"{ref:.0e} from"
        library = getattr(exercise.reference, "library_name", "") or exercise.reference.__name__
        return (f"{exercise.name}: all {n} cases pass (max relative error {fd:.0e} against "
                f"finite differences; {versus} the library's {library})")
    failed = [i for i, c in enumerate(cases) if not c.passed]
    case = cases[failed[0]]
    lines = [f"{exercise.name}: FAILED, {n - len(failed)} of {n} cases pass.",
             f"case {failed[0] + 1} of {n}, {case.note}: {case.shapes}"]
    if case.problem:
        lines.append(f"  {case.problem}")
    hinted: dict[str, str] = {}  # hint -> the first gradient it was given to
    for w in case.wrong:
        lines += [f"  {w.grad} is wrong: largest error at {w.grad}[{', '.join(map(str, w.index))}]"
                  f": expected {w.expected:.6g}, got {w.got:.6g} (relative error "
                  f"{w.rel_error:.1e})",
                  f"    hint: {w.hint}" if w.hint not in hinted
                  else f"    hint: the same as for {hinted[w.hint]}."]
        hinted.setdefault(w.hint, w.grad)
    right = [g for g, e in case.rel_errors.items() if e <= exercise.rtol]
    if case.wrong and right:
        lines.append(f"  right: {', '.join(right)}")
    if case.wrong and case.gradcheck is not None:
        names = [g for g in exercise.grads if g is not None]
        lines.append("  finite differences (relative error): " + ", ".join(
            f"{g} {c.max_rel_error:.1e}{'' if c.passed else ' wrong'}"
            for g, c in zip(names, case.gradcheck.inputs, strict=True)))
    for i in failed[1:]:
        other = cases[i]
        why = (", ".join(w.grad for w in other.wrong) + " wrong" if other.wrong
               else "the same problem" if other.problem == case.problem
               else other.problem.split(":")[0].split(" (")[0])
        lines.append(f"case {i + 1} of {n}, {other.note}: fails too ({why})")
    return "\n".join(lines)
