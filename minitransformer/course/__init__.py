"""The course's graded exercises: a learner writes a backward, the grader proves it.

    catalog      the backward exercises: their input cases, the library Function each is
                 graded against
    references   the library's answers to the exercises on blocks (multi-head attention,
                 dropout, the residual sub-layer, the feed-forward network): its Modules,
                 differentiated by its autograd engine
    hints        the mistakes the grader recognises in a layer's backward, and
    block_hints  in a block's: each recomputes what a plausible mistake gives and names it
    tasks/       the algorithm exercises (the engine's walk, Adam with warmup, a beam-search
                 step, the masks), each graded by running it against the library
    grading      check_exercise: load the learner's file, compare its gradients with the
                 library's and with finite differences, and say what is wrong
    learner_file loading the learner's file, and where in it an error arose
    results      what a grading answers, case by case
    notebooks    the chapters run in a Jupyter kernel, and turned into pages of the site

The chapters themselves live in lessons/ beside the package; this room is what
`minitransformer check-exercise` runs.
"""

from .catalog import EXERCISES
from .grading import ALL_EXERCISES, ExerciseResult, check_exercise
from .tasks import TASKS

__all__ = ["ALL_EXERCISES", "EXERCISES", "TASKS", "ExerciseResult", "check_exercise"]
