"""What grading an exercise answers: for each case, whether it passed, which gradient is
wrong and where, and the hint; and the whole exercise's verdict and message.

Shared by the grading of backwards (grading.py) and of algorithms (tasks.py).
"""

from __future__ import annotations

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


@dataclass
class ExerciseResult:
    name: str
    path: str
    passed: bool
    message: str
    cases: list[CaseResult] = field(default_factory=list)
