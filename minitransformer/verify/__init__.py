"""Verification: every hand-written backward proved against central finite differences.

    checker         the checker: check_function, check_module, GradcheckReport
    function_cases  the built-in suite of Function cases, one per operation and variant
    module_cases    the built-in suite of Module cases, up to the whole Transformer with its
                    label-smoothed loss; full_suite, what `minitransformer gradcheck` runs

Built on the engine alone; the course grades its exercises with the checker.
"""

from .checker import GradcheckReport, InputCheck, check_function, check_module

__all__ = ["GradcheckReport", "InputCheck", "check_function", "check_module"]
