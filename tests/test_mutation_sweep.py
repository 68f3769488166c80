"""The mutation sweep (tests/mutation_sweep.py) stays runnable: every mutant still finds its
line, and a sweep tells a caught mutant from one the tests let through. The sweep itself (a
few minutes) runs outside pytest."""

import pytest
from mutation_sweep import (
    BASIC,
    GRADIENT_TESTS,
    MUTANTS,
    OPTIMIZER_TESTS,
    ROOT,
    Mutant,
    applies,
    copy_project,
    run,
)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_the_mutant_finds_its_line_once_and_changes_it(mutant):
    assert mutant.old != mutant.new
    assert applies(mutant), (f"mutant {mutant.name!r}: its line is no longer in {mutant.path} "
                             "exactly once; update it in tests/mutation_sweep.py to the code "
                             "as it now stands")


def test_the_tests_a_sweep_runs_exist():
    for path in GRADIENT_TESTS + OPTIMIZER_TESTS:
        assert (ROOT / path).exists(), f"{path}: renamed? update tests/mutation_sweep.py"


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))


SUB_SIGN = Mutant("sub-db-sign", BASIC, "sum_to(-dout, self.b_shape)",
                  "sum_to(dout, self.b_shape)")


def test_a_sweep_tells_caught_from_let_through_and_leaves_the_copy_as_it_was(tmp_path):
    copy_project(tmp_path)
    source = (tmp_path / BASIC).read_text()
    caught = SUB_SIGN._replace(
        only_tests=("tests/functional/test_gradients.py", "-k", "test_gradcheck_case and sub"))
    assert run(caught, tmp_path)[0] == "KILLED"
    missed = SUB_SIGN._replace(
        only_tests=("tests/functional/test_backward_values.py", "-k", "relu_gradient"))
    assert run(missed, tmp_path)[0] == "SURVIVED"
    assert (tmp_path / BASIC).read_text() == source
    stale = SUB_SIGN._replace(old="no such line")
    assert run(stale, tmp_path)[0] == "STALE"
    nothing_ran = SUB_SIGN._replace(only_tests=("tests/no_such_tests.py",))
    assert run(nothing_ran, tmp_path)[0] == "ERROR"
