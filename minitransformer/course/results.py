"""What grading an exercise answers: for each case, whether it passed, which gradient is
wrong and where, and the hint; and the whole exercise's verdict and message.

Shared by the grading of backwards (grading.py) and of algorithms (tasks.py). ``as_dict``
gives the answer as plain JSON values, for `check-exercise --json`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..verify.checker import GradcheckReport


@dataclass
class WrongGradient:
    grad: str
    index: tuple[int, ...]                      # of the largest error
    expected: float
    got: float
    rel_error: float
    hint: str

    def as_dict(self) -> dict[str, Any]:
        return {"grad": self.grad, "index": list(self.index), "expected": _number(self.expected),
                "got": _number(self.got), "rel_error": _number(self.rel_error),
                "hint": self.hint}


@dataclass
class CaseResult:
    note: str
    shapes: str
    passed: bool = False
    rel_errors: dict[str, float] = field(default_factory=dict)  # against the reference
    wrong: list[WrongGradient] = field(default_factory=list)
    gradcheck: GradcheckReport | None = None
    problem: str = ""                           # why the case fails, in words
    not_written: str = ""                       # the NotImplementedError's message
    inputs: dict[str, Any] = field(default_factory=dict)  # the case's inputs, by name
    dout: Any = None                            # the upstream gradient of the comparison

    def as_dict(self) -> dict[str, Any]:
        """note, shapes, passed, problem, not_written; the relative error of each gradient
        against the library's; the wrong ones; and the finite-difference check, when it ran."""
        check = self.gradcheck
        return {"note": self.note, "shapes": self.shapes, "passed": self.passed,
                "problem": self.problem, "not_written": self.not_written,
                "rel_errors": {g: _number(e) for g, e in self.rel_errors.items()},
                "wrong": [w.as_dict() for w in self.wrong],
                "gradcheck": None if check is None else {
                    "passed": check.passed, "max_rel_error": _number(check.max_rel_error)}}


@dataclass
class ExerciseResult:
    name: str
    path: str
    passed: bool
    message: str
    cases: list[CaseResult] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The answer as plain JSON values: exercise, file, passed, message and the cases
        graded (only the first when the backward is not written yet). A number that is not
        finite (nan, inf) becomes None."""
        return {"exercise": self.name, "file": self.path, "passed": self.passed,
                "message": self.message, "cases": [c.as_dict() for c in self.cases]}


def _number(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
