"""Exercises that are not a backward: the learner writes an algorithm (the autograd engine's
walk, an Adam step with the warmup schedule, one step of beam search, the masks) and the
grader runs it against the library.

A task names the function or class the learner's file defines (``class_name``), says what it
computes (``summary``), and grades a file with ``grade(path, seed) -> ExerciseResult``, whose
message names what is wrong, where, and a hint for the mistakes it recognises.

    _common           loading the learner's file, calling it safely, the verdict, a tiny model
    autograd_engine   backward(root, dout): the reverse topological walk
    adam_warmup       noam_rate and adam_step: §5.3's optimizer and schedule
    beam_step         one step of beam search, and a whole search built from it (§6.1)
    masks             padding_mask and causal_mask, graded in a real Transformer (§3.2.3)
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..results import ExerciseResult
from . import adam_warmup, autograd_engine, beam_step, masks


class Task(Protocol):
    name: str
    class_name: str
    summary: str

    def grade(self, path: Path, seed: int) -> ExerciseResult: ...


TASKS: dict[str, Task] = {task.name: task for task in (
    autograd_engine.TASK, adam_warmup.TASK, beam_step.TASK, masks.TASK)}
