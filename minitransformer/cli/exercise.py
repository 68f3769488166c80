"""``minitransformer check-exercise NAME FILE``: grade an exercise of lessons/exercises/."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .values import at_least


def add_parser(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check-exercise",
        help="grade your answer to an exercise of lessons/exercises/",
        description="Import FILE, find the exercise's Function (or algorithm) in it and check "
                    "it on a few input cases: a backward against central finite differences "
                    "in float64 and against the library's own implementation, an algorithm "
                    "against the library. Prints which case and which gradient is wrong, "
                    "where, by how much, with a hint. Exits with status 0 when every case "
                    "passes, 1 otherwise, 2 for a usage error (an unknown exercise, a missing "
                    "file).",
    )
    check.add_argument("name", nargs="?", metavar="NAME",
                       help="the exercise, e.g. softmax or multi_head_attention (--list shows "
                            "them all)")
    check.add_argument("file", nargs="?", metavar="FILE",
                       help="your file (default: lessons/exercises/NAME.py)")
    check.add_argument("--list", action="store_true", help="list the exercises and exit")
    check.add_argument("--seed", type=at_least(0), default=0,
                       help="seed of the inputs and upstream gradients (default 0)")
    check.add_argument("--json", action="store_true",
                       help="print the result as one JSON object on one line (exercise, file, "
                            "passed, message, and each case's result), to collect grades; "
                            "with --list, the exercises as a JSON list")
    check.set_defaults(run=run, device=None)


def run(args: argparse.Namespace) -> int:
    from ..course.grading import ALL_EXERCISES as EXERCISES
    from ..course.grading import check_exercise

    if args.list:
        if args.json:
            print(json.dumps([{"name": e.name, "class": e.class_name, "summary": e.summary}
                              for e in EXERCISES.values()], ensure_ascii=False))
            return 0
        width = max(len(name) for name in EXERCISES) + 1
        for exercise in EXERCISES.values():
            print(f"{exercise.name:<{width}} {exercise.class_name:<26} {exercise.summary}")
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
        what = "is a folder" if Path(path).is_dir() else "does not exist"
        print(f"minitransformer check-exercise: {path} {what}; give the file of your "
              f"{args.name} exercise, e.g. lessons/exercises/{args.name}.py.", file=sys.stderr)
        return 2
    print(json.dumps(result.as_dict(), ensure_ascii=False) if args.json else result.message)
    return 0 if result.passed else 1
