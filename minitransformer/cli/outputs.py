"""Where a command's results go: a path checked before the work, written whole, and
standard output written in full.

    check_output(output, inputs)     translate's and evaluate's --output, before translating
    TranslationsOutput(path)         the translations, to --output or standard output
    to_standard_output(data)         all of it, or BrokenPipeError when the reader has gone
    picture_out_refused(args)        plot's --out, before drawing
    write_picture(args, draw)        draw and save it, one sentence if saving fails
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import appended, put_in_place, replaceable, standard_output, temporary_beside


def check_output(output: str | None, inputs: dict[str, str | None]) -> None:
    """Refuse an --output the translations could not be written to, or that is one of the
    command's ``inputs`` (option or file -> path), before translating."""
    from ..data.errors import DataError
    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise DataError(f"--output {path} is a folder; give a file name for the translations.")
    if not path.parent.is_dir():
        raise DataError(f"--output {path}: the folder {path.parent} does not exist; create it "
                        "or write elsewhere.")
    for option, given in inputs.items():
        if given and path.exists() and Path(given).exists() and os.path.samefile(path, given):
            raise DataError(f"--output {path} is the {option} file, which the translations "
                            "would replace; write them elsewhere.")
    try:
        target = replaceable(path)
        if target is not None:  # the temporary file beside it, tried: as root, os.access
            file, temporary = temporary_beside(target)  # says yes even to /proc
            file.close()
            temporary.unlink()
    except OSError as exc:
        raise DataError(f"--output {path} cannot be written there ({exc.strerror or exc}); "
                        "write elsewhere.") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise DataError(f"--output {path}: the file may not be written (permission denied); "
                        "write elsewhere.")


class TranslationsOutput:
    """Where translations go: --output, else standard output. With ``whole``, the file is
    written to a temporary one beside it and put in place by ``close``: complete, or absent
    and any earlier file there as it was (``discard``, or a failed write); a device or a pipe
    is written directly, and so is a stream of lines translated as they arrive (``whole``
    False), flushed after each batch. If writing the file fails (a full disk), what it held
    and the rest go to standard output, and the status becomes 1."""

    def __init__(self, path: str | None, whole: bool = True):
        if path is not None and standard_output(path):  # /dev/stdout, or stdout's own file
            path = None
        self.path, self.status, self.done = path, 0, False
        self.file: Any = None
        self.written = 0                   # bytes in the temporary file, each write flushed
        self.target = replaceable(path) if path is not None and whole else None
        self.temporary: Path | None = None

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        if self.path and not self.status:
            try:
                if self.file is None:
                    if self.target is not None:
                        self.file, self.temporary = temporary_beside(self.target)
                    else:
                        self.file = self._open_directly()
                self.file.write(data)
                self.file.flush()
                self.written += len(data)
                return
            except OSError as exc:
                data = self._failed(exc) + data
        to_standard_output(data)

    def _open_directly(self) -> Any:
        """A stream (a device, a pipe, a file standard error goes to) appended to; a file of
        its own begun anew."""
        return open(self.path, "ab" if appended(self.path) else "wb")  # noqa: SIM115

    def close(self) -> None:
        """The file put in place (standard output needs nothing). A stream of lines that
        brought none leaves an empty file, as an empty input file does."""
        if self.file is None and self.path and self.target is None and not self.done:
            with contextlib.suppress(OSError):  # (the whole file's first write made it)
                self._open_directly().close()
        if self.file is None or self.status or self.done:
            return
        self.done = True
        try:
            self.file.close()
            if self.temporary is not None:
                put_in_place(self.temporary, self.target)
        except OSError as exc:
            to_standard_output(self._failed(exc))

    def discard(self) -> None:
        """The work stopped: the temporary file removed, an earlier file left as it was (a
        file written directly keeps what it took)."""
        if not self.done:
            self.done = True
            self._remove()

    def _failed(self, exc: OSError) -> bytes:
        """Say so, and take back what the temporary file held, removing it."""
        print(f"minitransformer translate: could not write --output {self.path} "
              f"({exc.strerror or exc}); the translations follow on standard output.",
              file=sys.stderr)
        self.status = 1
        held = b""
        if self.temporary is not None:  # a device keeps what it took
            try:
                with open(self.temporary, "rb") as file:
                    held = file.read(self.written)
            except OSError:
                pass
        self._remove()
        return held

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            if self.file is not None:
                self.file.close()
        with contextlib.suppress(OSError):
            if self.temporary is not None:
                self.temporary.unlink(missing_ok=True)


def to_standard_output(data: bytes) -> None:
    """Write all of ``data`` to standard output. A large write to a pipe whose reader has
    gone can be cut short without an error from Python's buffered file; os.write's count
    tells, and the next write raises BrokenPipeError."""
    sys.stdout.flush()
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a file-like object (tests)
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
        return
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def picture_out_refused(args: argparse.Namespace) -> bool:
    """Say why the picture cannot be written to --out and return True, before any work (a
    checkpoint loaded, a forward pass, the gradient checks) that would be lost there; False
    when it can be written."""
    problem = _cannotwrite_picture(args.out, args.picture)
    if problem:
        print(f"minitransformer plot {args.picture}: {problem}", file=sys.stderr)
    return problem is not None


def _cannotwrite_picture(out: str, picture: str) -> str | None:
    """Why the picture file ``out`` cannot be written, found by creating (and removing) the
    first of its folders that does not exist yet (saving makes them), or else the temporary
    file the picture is first written to beside it; None when it can. (Asking os.access is not
    enough: as root it says yes to /proc, where creating a file fails.)"""
    path = Path(out)
    if path.is_dir():
        return (f"--out {out} is a folder; give a file name for the picture, such as "
                f"{path / f'{picture}.png'}.")
    if out.endswith(("/", os.sep)):  # matplotlib wrote "NAME/.png" in there
        return (f"--out {out} ends in '{out[-1]}', so it names a folder; give a file name for "
                f"the picture, such as {out.rstrip('/' + os.sep)}.")
    try:
        missing = []
        for home in path.parents:  # the nearest that exists: "." or "/" at the latest
            if home.exists():
                break
            missing.append(home)
        if home.exists() and not home.is_dir():
            return (f"--out {out} is under {home}, which is a file, not a folder; give an --out "
                    "in a folder.")
        target = replaceable(path)
        if missing:
            missing[-1].mkdir()
            missing[-1].rmdir()
        elif target is not None:  # the picture there, if any, stays as it is
            file, temporary = temporary_beside(target)
            file.close()
            temporary.unlink()
        else:  # a device or a pipe, written directly
            open(path, "ab").close()
    except OSError as exc:
        return (f"cannot create --out {out} ({exc.strerror or exc}); give an --out in a folder "
                "you can write to.")
    return None


def write_picture(args: argparse.Namespace, draw: Callable[[], Any]) -> int:
    """Run ``draw``, which draws the picture and saves it to --out, and let go of its figure:
    0, or 1 with one sentence when writing failed after the work (a full disk). The picture is
    written beside --out and renamed into place (``viz``), so an earlier one stays as it was;
    a new file the failed write left behind is removed all the same."""
    import matplotlib.pyplot as plt

    figures, existed = set(plt.get_fignums()), Path(args.out).exists()
    try:
        figure = draw()
    except OSError as exc:
        for number in set(plt.get_fignums()) - figures:
            plt.close(number)
        if not existed:
            with contextlib.suppress(OSError):
                Path(args.out).unlink(missing_ok=True)
        print(f"minitransformer plot {args.picture}: writing {args.out} failed "
              f"({exc.strerror or exc}); free some space or give another --out.",
              file=sys.stderr)
        return 1
    _close(figure)
    print(f"wrote {args.out}")
    return 0


def _close(figure: Any) -> None:
    """Let go of a figure once written: a program that runs the command many times (a
    notebook, a test) would otherwise keep every figure open."""
    import matplotlib.pyplot as plt

    plt.close(figure)
