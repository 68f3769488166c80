"""Every catalogued wrong backward (tests/course/exercise_mistakes.py) fails, with its own hint."""

from collections import Counter

import numpy as np
import pytest
from exercise_mistakes import MISTAKES

from minitransformer.course import EXERCISES, check_exercise

# What the grader says when it recognises nothing: no catalogued mistake may end there.
CATCH_ALL = "walk the forward steps in reverse and check each one's derivative."


def test_every_exercise_has_at_least_three_mistakes_in_the_catalogue():
    counts = Counter(m.exercise for m in MISTAKES)
    assert {name: counts[name] for name in EXERCISES if counts[name] < 3} == {}
    assert set(counts) <= set(EXERCISES)
    names = [(m.exercise, m.name) for m in MISTAKES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("mistake", MISTAKES, ids=[f"{m.exercise}-{m.name}" for m in MISTAKES])
def test_a_catalogued_mistake_fails_with_its_hint(tmp_path, mistake):
    path = tmp_path / f"{mistake.exercise}.py"
    path.write_text(mistake.source())
    np.random.seed(0)  # the mistake that draws a new mask draws it from NumPy's global generator
    result = check_exercise(mistake.exercise, path)
    assert not result.passed
    assert mistake.says in result.message, result.message
    assert CATCH_ALL not in result.message, result.message
    # the answer is about the first failing case, whose wrong gradients all carry a hint
    case = next(c for c in result.cases if not c.passed)
    assert case.problem or case.wrong
    assert all(w.hint != CATCH_ALL for w in case.wrong)
