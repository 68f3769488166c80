"""What a benchmark ran on and at which commit, for its results file: the processor's model
name (from /proc/cpuinfo where there is one), the cores, Python and NumPy, the kernels NumPy's
BLAS chose for the processor (or was told to use by OPENBLAS_CORETYPE), and which CPU kernels
minitransformer ran (NumPy's or the compiled ones); a short name of the machine kind for the
file names ("epyc", "xeon", "h100"); the git commit."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    """The processor's model name, e.g. "AMD EPYC"; the architecture where it is unknown."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_generation() -> str:
    """The processor's family and model numbers and its widest vector instructions, e.g.
    "family 26, model 2, AVX-512": the model name alone ("AMD EPYC") does not tell one
    generation from another, and their matmul rates differ (Zen 3 has no AVX-512, Zen 4 and
    5 do); "" where /proc/cpuinfo does not say."""
    from minitransformer.blas import processor_flags

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return ""
    fields: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = processor_flags()
    vectors = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    parts = [f"family {fields['cpu family']}" if "cpu family" in fields else "",
             f"model {fields['model']}" if "model" in fields else "", vectors]
    return ", ".join(part for part in parts if part)


def blas() -> str:
    """NumPy's BLAS and the kernels it runs on this processor, e.g. "OpenBLAS 0.3.31,
    SkylakeX kernels" (``minitransformer.blas.numpy_blas``). OpenBLAS picks its kernels when it
    loads, from the processor, unless OPENBLAS_CORETYPE names them: then the setting is added
    ("Haswell kernels, OPENBLAS_CORETYPE=Haswell"), since kernels below the processor's own
    slow the products down (on the Zen 5 EPYC, Haswell's AVX2 kernels multiply at 0.54 times
    the rate of its own AVX-512 ones: bench/blas_kernels.py)."""
    from minitransformer.blas import numpy_blas

    lib = numpy_blas()
    if lib is None:
        return "unknown BLAS"
    name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(
        lib.get("internal_api", ""), lib.get("internal_api", "BLAS"))
    version = re.match(r"\d+(?:\.\d+)+", lib.get("version") or "")
    if version and name == "OpenBLAS":  # "0.3.31.188.0": the last two are the wheel's build
        text = f"{name} {'.'.join(version.group(0).split('.')[:3])}"
    else:
        text = f"{name} {version.group(0)}" if version else name
    if lib.get("architecture"):
        text += f", {lib['architecture']} kernels"
    if lib.get("internal_api") == "openblas" and os.environ.get("OPENBLAS_CORETYPE"):
        text += f", OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}"
    return text


def machine() -> dict:
    return {"processor": platform.processor() or platform.machine(), "cpu": cpu_name(),
            "cpu_generation": cpu_generation(), "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0], "numpy": np.__version__, "blas": blas(),
            "kernels": kernels()}


def kernels() -> str:
    """"numpy", or "compiled (numba 0.68.1)" when minitransformer runs its compiled kernels
    (the `fast` extra installed, MINITRANSFORMER_COMPILED not 0)."""
    import minitransformer as mt

    if not mt.get_compiled_kernels():
        return "numpy"
    import numba
    return f"compiled (numba {numba.__version__})"


def kind(gpu: str | None = None) -> str:
    """The machine kind that names results files: the GPU's model when one is given
    ("NVIDIA H100 80GB HBM3" -> "h100"), else the processor's family ("AMD EPYC" -> "epyc",
    "Intel(R) Xeon(R) Processor" -> "xeon")."""
    vendors = {"nvidia", "tesla", "geforce", "intel", "amd", "processor", "cpu"}
    name = re.sub(r"\((r|tm)\)", " ", (gpu or cpu_name()).lower())
    words = [w for w in re.findall(r"[a-z0-9]+", name) if w not in vendors]
    return words[0] if words else platform.machine().lower()


def commit() -> str:
    """The short hash of the checked-out commit, with "-dirty" when the package or bench/
    (results aside) differ from it; "unknown" outside a git checkout. $BENCH_COMMIT, where
    set, names it instead (a copy of the tree sent to another machine, whose git folder, if
    any, is not this tree's)."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    changed = git("status", "--porcelain", "--", "minitransformer", "bench",
                  ":(exclude)bench/results")
    return head + ("-dirty" if changed else "")
