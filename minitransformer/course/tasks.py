"""Exercises that are not a backward: the learner writes an algorithm (the autograd engine's
walk, an Adam step with the warmup schedule, one step of beam search, the masks) and the
grader runs it against the library.

A task names the function or class the learner's file defines (``class_name``), says what it
computes (``summary``), and grades a file with ``grade(path, seed) -> ExerciseResult``, whose
message names what is wrong, where, and a hint for the mistakes it recognises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from .results import ExerciseResult


class Task(Protocol):
    name: str
    class_name: str
    summary: str

    def grade(self, path: Path, seed: int) -> ExerciseResult: ...


TASKS: dict[str, Task] = {}
