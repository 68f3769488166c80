"""Killing a child process at a chosen moment, as a crash or a `kill -9` would."""

import os
import signal
import subprocess
import time
from collections.abc import Callable


def sigkill_when(child: subprocess.Popen, ready: Callable[[], bool], what: str) -> None:
    """SIGKILL ``child`` as soon as ``ready()`` holds (within a minute); ``what`` names the
    child in the failure messages."""
    deadline = time.monotonic() + 60
    try:
        while not ready():
            assert child.poll() is None, f"{what} ended early"
            assert time.monotonic() < deadline, f"{what} never got there"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
