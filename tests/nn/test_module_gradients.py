"""Every Module's backward, parameters included, against finite differences on every device;
and every Module class of the package appears in the built-in suite."""

import inspect

import pytest

from minitransformer import nn
from minitransformer.verify.module_cases import MODULE_CASES, run_module_case

IDS = [f"{case.name}-{case.note or 'plain'}".replace(" ", "_") for case in MODULE_CASES]


@pytest.mark.parametrize("case", MODULE_CASES, ids=IDS)
def test_module_gradients_match_finite_differences(case, device):
    report = run_module_case(case)
    assert report.passed, report
    assert report.max_rel_error < 1e-6
    n_params = len(case.make_module().named_parameters())
    assert len(report.inputs) >= n_params  # every parameter was checked


def test_every_module_class_is_in_the_suite():
    defined = {cls for _, cls in inspect.getmembers(nn, inspect.isclass)
               if issubclass(cls, nn.Module) and cls is not nn.Module}
    used = set()
    for case in MODULE_CASES:
        used |= {type(m) for m in case.make_module().modules()}
    missing = sorted(cls.__name__ for cls in defined - used)
    assert not missing, f"no gradient check builds {missing}"
