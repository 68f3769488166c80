"""The ``minitransformer`` command: parses arguments and calls the library, nothing more.

One module per command, each with ``add_parser(commands)`` and ``run(args) -> exit status``.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from .. import __version__, backend
from . import data, exercise, gradcheck, info, plot, train, translate

COMMANDS = (train, translate, data, gradcheck, exercise, info, plot)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "device", None):
            backend.use(args.device)
        status = args.run(args)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return status
    except backend.DeviceError as exc:
        print(f"minitransformer {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of the output left (`minitransformer gradcheck | head`): stop quietly,
        # and point stdout at nothing so that Python's own flush at exit fails no more
        _stdout_to_nothing()
        return 1
    except KeyboardInterrupt:  # Ctrl-C where the command has no handler of its own
        print(f"\nminitransformer {args.command}: interrupted.", file=sys.stderr)
        return 130
    except OSError as exc:  # standard output on a full disk, say: one line, not a traceback
        if exc.filename:
            what = f"failed on {exc.filename}"
        elif exc.errno in _WRITE_ERRORS:  # no file named: what the command prints
            what = "could not write standard output"
            _stdout_to_nothing()
        else:
            what = "failed"
        print(f"minitransformer {args.command}: {what} ({exc.strerror or exc}).",
              file=sys.stderr)
        return 1


# a write with nowhere left to go: a full disk or quota, a file grown too large, a failed device
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def _stdout_to_nothing() -> None:
    """Point standard output at nothing, so that Python's own flush at exit cannot fail."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # replaced by a file-like object (tests)
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minitransformer",
        description="The Transformer of 'Attention Is All You Need', built from scratch with "
                    "every backward written by hand.",
    )
    parser.add_argument("--version", action="version", version=f"minitransformer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser
