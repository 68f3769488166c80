"""``minitransformer check-exercise NAME FILE``: grade a hand-written backward."""

from __future__ import annotations

import argparse
import sys

from .values import at_least


def add_parser(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check-exercise",
        help="grade your backward for an exercise of lessons/exercises/",
        description="Import FILE, find the exercise's Function in it and check its backward on "
                    "a few input cases: against central finite differences in float64 and "
                    "against the library's own implementation. Prints which case and which "
                    "gradient is wrong, where, by how much, with a hint. Exits with status 0 "
                    "when every case passes, 1 otherwise.",
    )
    check.add_argument("name", nargs="?", metavar="NAME",
                       help="the exercise: linear, softmax, layer_norm, attention, embedding "
                            "or cross_entropy (--list shows them)")
    check.add_argument("file", nargs="?", metavar="FILE",
                       help="your file (default: lessons/exercises/NAME.py)")
    check.add_argument("--list", action="store_true", help="list the exercises and exit")
    check.add_argument("--seed", type=at_least(0), default=0,
                       help="seed of the inputs and upstream gradients (default 0)")
    check.set_defaults(run=run, device=None)


def run(args: argparse.Namespace) -> int:
    from ..course.grading import ALL_EXERCISES as EXERCISES
    from ..course.grading import check_exercise

    if args.list:
        for exercise in EXERCISES.values():
            print(f"{exercise.name:<14} {exercise.class_name:<26} {exercise.summary}")
        return 0
    if args.name is None:
        print(f"minitransformer check-exercise: name an exercise ({', '.join(EXERCISES)}) and "
              "your file, e.g. minitransformer check-exercise softmax "
              "lessons/exercises/softmax.py", file=sys.stderr)
        return 2
    if args.name not in EXERCISES:
        print(f"minitransformer check-exercise: unknown exercise {args.name!r}; choose one of "
              f"{', '.join(EXERCISES)}.", file=sys.stderr)
        return 2
    path = args.file or f"lessons/exercises/{args.name}.py"
    try:
        result = check_exercise(args.name, path, seed=args.seed)
    except FileNotFoundError:
        print(f"minitransformer check-exercise: no such file: {path}", file=sys.stderr)
        return 2
    print(result.message)
    return 0 if result.passed else 1
