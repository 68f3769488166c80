"""Whether operations record a graph for backward: ``no_grad()`` switches it off.

The switch belongs to the thread that flips it, as PyTorch's does: a thread decoding under
``no_grad()`` leaves another thread's training recording its graph, and every new thread
starts with recording on. Work handed to worker threads that should run in the caller's mode
carries it there (``functional._blocks.on_workers`` does).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class _GradMode(threading.local):
    enabled = True    # the class attribute: every thread's value until it sets its own


_mode = _GradMode()


def is_grad_enabled() -> bool:
    """Whether operations called on this thread record a graph."""
    return _mode.enabled


@contextlib.contextmanager
def set_grad_enabled(mode: bool) -> Iterator[None]:
    """Record a graph (``True``) or not (``False``) on this thread inside the block; the
    previous mode comes back after it, also when the block raises."""
    previous = _mode.enabled
    _mode.enabled = bool(mode)
    try:
        yield
    finally:
        _mode.enabled = previous


def no_grad() -> contextlib.AbstractContextManager[None]:
    """``with no_grad():`` operations run forward only: no graph, nothing saved for backward.

    Use it for evaluation and decoding, where it saves the memory of every cached activation.
    """
    return set_grad_enabled(False)


def enable_grad() -> contextlib.AbstractContextManager[None]:
    return set_grad_enabled(True)
