"""What machine a benchmark ran on, for its results file: the processor's model name (from
/proc/cpuinfo where there is one), the cores, Python and NumPy."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import numpy as np


def cpu_name() -> str:
    """The processor's model name, e.g. "AMD EPYC"; the architecture where it is unknown."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {"processor": platform.processor() or platform.machine(), "cpu": cpu_name(),
            "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
            "numpy": np.__version__}
