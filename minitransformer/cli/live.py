"""Lines of standard input as they arrive, for ``translate`` reading a terminal or a pipe.

A person typing, or a program that writes a sentence and waits for its translation, must get
each translation when its line is complete, not at the end of the input. So the input is read
as it comes (``os.read`` of whatever is there, never waiting for more than is needed), and the
complete lines are handed on, all of them at once, as soon as the input pauses: a line typed
alone is translated alone, and a whole file piped in keeps arriving faster than it can be
read, so its lines are handed on ``max_lines`` at a time (some thousands: many batches, which
are then as large and as evenly sorted by length as a file's), and a stream of any length is
translated in bounded memory.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO

CHUNK = 1 << 16  # bytes read at a time: a pipe's whole buffer on Linux


def arrives_over_time(stream: BinaryIO) -> bool:
    """Whether ``stream`` is a terminal, pipe or socket, whose lines arrive over time (a
    regular file, or /dev/null, is there at once and is read whole)."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):  # no file descriptor (a test's StringIO)
        return False
    return stream.isatty() or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def lines_as_they_come(stream: BinaryIO, prompt: str | None = None,
                       max_lines: int = 4096) -> Iterator[list[bytes]]:
    """Lists of the complete lines (without their newline) that ``stream`` holds each time
    its input pauses or once ``max_lines`` of them have come, the last line included at the
    end even without a newline. ``prompt``, if given, is written to standard error whenever
    every line so far has been handed on."""
    fd = stream.fileno()
    pending: list[bytes] = []  # complete lines not yet handed on
    partial = b""              # the start of a line whose newline has not come
    with _signals_wake_select() as wake:
        while True:
            if not pending and not partial and prompt:
                sys.stderr.write(prompt)
                sys.stderr.flush()
            # wait for input only when there is nothing to hand on; else just look
            ready, _, _ = select.select([fd, *wake], [], [], None if not pending else 0)
            if wake and wake[0] in ready:  # a signal came (its handler has run): look again
                _drain(wake[0])
                continue
            if not ready or len(pending) >= max_lines:  # the input paused, or enough came
                yield pending
                pending = []
                continue
            data = os.read(fd, CHUNK)
            if not data:  # end of input
                if partial:
                    pending.append(partial)
                if pending:
                    yield pending
                return
            *complete, partial = (partial + data).split(b"\n")
            pending += complete


@contextlib.contextmanager
def _signals_wake_select() -> Iterator[list[int]]:
    """While it lasts, a signal (Ctrl-C) makes the select above return: ``[fd]``, a pipe that
    Python writes a byte to when a signal arrives (``signal.set_wakeup_fd``), to be selected
    with the input. Without it, a signal that arrives after the last check for signals and
    before select starts waiting (after the prompt is written, say) is only acted on once
    input comes. Only the main thread can set it up; elsewhere ``[]``."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        os.close(read_end)
        os.close(write_end)
        yield []
        return
    try:
        yield [read_end]
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)


def _drain(fd: int) -> None:
    """Read what the signals wrote to the wake-up pipe."""
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass
