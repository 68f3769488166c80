"""What the algorithm exercises share: loading the learner's file, calling its functions so that
whatever goes wrong inside them is a failed case in one sentence (never a traceback), the cases
and their verdict, and a tiny Transformer to run them in.

A task is a list of cases. A case calls the learner's functions through ``Learner.call``, checks
what comes back, and raises ``Failed(problem, hint)`` at the first thing that is wrong; the hint
comes from the task's own catalogue of recognised mistakes.
"""

from __future__ import annotations

import contextlib
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import backend
from ...nn.config import TransformerConfig
from ...nn.transformer import Transformer
from ..learner_file import LEARNER_ERRORS, load_module, where
from ..results import CaseResult, ExerciseResult


class Failed(Exception):
    """A case fails: ``problem`` says what is wrong, ``hint`` the likely mistake."""

    def __init__(self, problem: str, hint: str | None = None,
                 cause: BaseException | None = None):
        super().__init__(problem)
        self.problem, self.hint, self.cause = problem, hint, cause


class NotWritten(Exception):
    """The learner's function still raises the starting file's NotImplementedError."""

    def __init__(self, function: str, message: str):
        super().__init__(message)
        self.function, self.message = function, message


class Learner:
    """The functions of the learner's file, by name, each called through ``call``."""

    def __init__(self, path: Path, module_name: str, functions: dict[str, Callable]):
        self.path, self.module_name, self.functions = path, module_name, functions

    def call(self, name: str, *args: Any, shown: str | None = None) -> Any:
        """``name(*args)``; what it raises becomes ``Failed`` (or ``NotWritten``), naming the
        line of the learner's file it came from. ``shown`` is the call as the message writes it."""
        try:
            return self.functions[name](*args)
        except (Failed, NotWritten):
            raise
        except NotImplementedError as exc:
            function = self._raised_in(exc)
            if function:
                raise NotWritten(function, str(exc) or function) from None
            raise Failed(f"{shown or name + '(...)'} raised{self.where(exc)}: "
                         f"NotImplementedError: {exc}", cause=exc) from None
        except LEARNER_ERRORS as exc:
            raise Failed(f"{shown or name + '(...)'} raised{self.where(exc)}: "
                         f"{type(exc).__name__}: {exc}", cause=exc) from None

    def where(self, exc: BaseException) -> str:
        """' at line N (`code`)' for the deepest frame of the traceback inside the file."""
        return where(exc, self.path)

    def _raised_in(self, exc: BaseException) -> str | None:
        """The function of the learner's file that raised the NotImplementedError (the
        starting file's), or None if something it called raised it."""
        frames = traceback.extract_tb(exc.__traceback__)
        here = bool(frames) and Path(frames[-1].filename).resolve() == self.path.resolve()
        return frames[-1].name if here else None


def load(path: Path, task: str, names: tuple[str, ...]) -> Learner | str:
    """The learner's functions ``names`` from ``path``, or a message saying why there are none."""
    module_name = f"_minitransformer_exercise_{task}"
    module = load_module(path, module_name)
    if isinstance(module, str):
        return module
    learner = Learner(path, module_name, {})
    start = f"starting from lessons/exercises/{task}.py"
    for name in names:
        function = getattr(module, name, None)
        if not callable(function):
            return f"{path} defines no function named {name}; write it, {start}."
        origin = getattr(function, "__module__", None)
        if origin != module_name:
            return (f"{path} imports {name} from {origin} instead of defining it; write it in "
                    f"the file itself, {start}.")
        learner.functions[name] = function
    return learner


def shape_of(x: Any) -> str:
    """How a message shows an argument: '(2, 5) int64' for an array, its repr otherwise."""
    if isinstance(x, np.ndarray):
        return f"{tuple(x.shape)} {x.dtype}"
    return repr(x)


def largest_difference(got: Any, expected: Any) -> tuple[tuple[int, ...], float]:
    """The index of the largest |got - expected| (nan counts as largest) and the error there
    relative to the largest |expected|."""
    error = np.abs(np.asarray(got, dtype=float) - expected)
    error = np.where(np.isnan(error), np.inf, error)
    index = tuple(int(i) for i in np.unravel_index(np.argmax(error), error.shape))
    scale = float(np.abs(expected).max(initial=0.0)) or 1.0
    return index, float(error[index]) / scale


def close(got: Any, expected: Any, rtol: float = 1e-9) -> bool:
    """Equal up to ``rtol`` of the largest |expected|: the same computation, summed in
    another order, is equal to far better than that."""
    got = np.asarray(got)
    if got.shape != np.shape(expected):
        return False
    return largest_difference(got, expected)[1] <= rtol if got.size else True


def pair(expected: float, got: float) -> tuple[str, str]:
    """Two numbers written with as many digits as it takes to tell them apart (6 to 17)."""
    for digits in range(6, 18):
        a, b = f"{expected:.{digits}g}", f"{got:.{digits}g}"
        if a != b:
            break
    return a, b


def at(index: tuple[int, ...]) -> str:
    return f"[{', '.join(map(str, index))}]"


# ----------------------------------------------------------------------------- the task

@dataclass(frozen=True)
class TaskCase:
    note: str                                   # what the case exercises
    shapes: str                                 # its inputs, in words
    run: Callable[[Learner, int], None]         # raises Failed when something is wrong


@dataclass(frozen=True)
class AlgorithmTask:
    name: str
    class_name: str                             # what the learner's file defines (--list)
    functions: tuple[str, ...]                  # the functions graded, by name
    summary: str
    cases: tuple[TaskCase, ...]
    verdict: str                                # what a pass says beyond "all N cases pass"

    def grade(self, path: Path, seed: int = 0) -> ExerciseResult:
        """Run every case on the learner's file ``path``: a failed result with a message for
        anything wrong, from a syntax error to a wrong number."""
        path = Path(path)
        learner = load(path, self.name, self.functions)
        if isinstance(learner, str):
            return ExerciseResult(self.name, str(path), False, f"{self.name}: {learner}")
        results = []
        with _quiet_state():
            for i, case in enumerate(self.cases):
                result = CaseResult(case.note, case.shapes)
                try:
                    case.run(learner, seed + i)
                except NotWritten as exc:
                    result.not_written = exc.message
                    return ExerciseResult(self.name, str(path), False, (
                        f"{self.name}: {exc.function} not written yet ({path} says: "
                        f"{exc.message}).\nWrite it (the docstring has hints), then check "
                        f"again: minitransformer check-exercise {self.name} {path}"), [result])
                except Failed as exc:
                    result.problem = exc.problem + (f"\n    hint: {exc.hint}" if exc.hint else "")
                else:
                    result.passed = True
                results.append(result)
        return ExerciseResult(self.name, str(path), all(r.passed for r in results),
                              self._summarise(results), results)

    def _summarise(self, cases: list[CaseResult]) -> str:
        n = len(cases)
        if all(c.passed for c in cases):
            return f"{self.name}: all {n} cases pass ({self.verdict})"
        failed = [i for i, c in enumerate(cases) if not c.passed]
        first = cases[failed[0]]
        lines = [f"{self.name}: FAILED, {n - len(failed)} of {n} cases pass.",
                 f"case {failed[0] + 1} of {n}, {first.note}: {first.shapes}",
                 f"  {first.problem}"]
        for i in failed[1:]:
            why = cases[i].problem.split("\n")[0].split(": ")[0]
            lines.append(f"case {i + 1} of {n}, {cases[i].note}: fails too ({why})")
        return "\n".join(lines)


@contextlib.contextmanager
def _quiet_state() -> Iterator[None]:
    """Grade on the CPU, in float64, without warnings (a nan is reported as a wrong number),
    and leave the caller's random generators, device and default dtype as they were
    (building a model draws from the host generator)."""
    host = backend.host_rng().bit_generator.state
    with backend.device("cpu"), backend.default_dtype("float64"), \
            warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # a nan is reported as a wrong number, not a warning
        try:
            yield
        finally:
            backend.host_rng().bit_generator.state = host


# ----------------------------------------------------------------------------- a model

def tiny_model(seed: int, vocab: int = 13, pad_id: int = 0, n_layers: int = 1,
               d_model: int = 8, n_heads: int = 2, d_ff: int = 16,
               max_len: int = 32) -> Transformer:
    """A small Transformer in float64, without dropout, in eval mode, initialised as the
    library does from ``seed`` (the host generator is put back as it was)."""
    config = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, n_layers=n_layers,
                               d_model=d_model, d_ff=d_ff, n_heads=n_heads, p_dropout=0.0,
                               max_len=max_len, pad_id=pad_id)
    host = backend.host_rng().bit_generator
    saved = host.state
    host.state = np.random.default_rng(seed).bit_generator.state
    try:
        with backend.default_dtype("float64"):
            model = Transformer(config)
    finally:
        host.state = saved
    model.eval()
    return model
