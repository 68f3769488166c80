"""Which kernels NumPy's BLAS runs on this processor, and whether the environment holds it back.

A training step on the CPU is mostly matrix products, and NumPy hands them to its BLAS. The
OpenBLAS of NumPy's wheels picks its kernels for the processor when it loads, unless the
variable OPENBLAS_CORETYPE names others; named kernels are used on any processor that can run
them. The Haswell kernels (AVX2) on a processor with AVX-512 leave its wider units idle: on
the 2-core Zen 5 EPYC of the benchmarks, NumPy's float32 matmul ran 1.85 times as fast with
OpenBLAS's own choice (SkylakeX: 444 against 240 GFLOP/s) and a `small` training step 1.6
times (bench/results/blas_kernels.epyc-6ca6fe6.json, docs/performance.md). ``minitransformer
train`` says so when it starts on such a machine.

    numpy_blas()          threadpoolctl's record of NumPy's BLAS (name, version, kernels)
    openblas_kernels()    "SkylakeX", "Haswell", ...: the kernels NumPy's OpenBLAS runs; None
                          when NumPy's BLAS is another library
    held_back()           one sentence when OPENBLAS_CORETYPE holds OpenBLAS to kernels without
                          AVX-512 on a processor that has it, else None
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import backend

# OpenBLAS's kernels for x86 processors with AVX-512 (openblas_get_corename's names, lower case)
AVX512_KERNELS = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def numpy_blas() -> dict[str, Any] | None:
    """threadpoolctl's record of the BLAS that NumPy loaded ("internal_api": "openblas",
    "version", "architecture", ...): the one in NumPy's own folders when several are loaded
    (PyTorch may bring another); None when threadpoolctl finds none."""
    from threadpoolctl import threadpool_info

    libraries = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    site = Path(backend.numpy.__file__).parent.parent  # numpy/ and numpy.libs/ lie here
    own = [lib for lib in libraries if _top_folder(lib.get("filepath"), site)
           in ("numpy", "numpy.libs")]
    chosen = own or libraries
    return chosen[0] if chosen else None


def _top_folder(filepath: str | None, site: Path) -> str | None:
    """The folder of ``site`` that ``filepath`` lies in ("numpy.libs"); None outside it."""
    try:
        return Path(filepath or "").relative_to(site).parts[0]
    except (ValueError, IndexError):
        return None


def openblas_kernels() -> str | None:
    """The name of the kernels NumPy's OpenBLAS chose or was told to use ("SkylakeX"); None
    when NumPy's BLAS is not OpenBLAS (MKL, Accelerate) or does not say."""
    library = numpy_blas()
    if library is None or library.get("internal_api") != "openblas":
        return None
    return library.get("architecture") or None


def processor_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's feature flags ("avx2", "avx512f", ...) from the "flags" line of
    ``cpuinfo``; empty where there is no such file or line (not Linux, not x86)."""
    if not cpuinfo.is_file():
        return set()
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def held_back() -> str | None:
    """The sentence to show when OPENBLAS_CORETYPE has NumPy's OpenBLAS run kernels without
    AVX-512 on a processor with AVX-512; None otherwise (no variable, OpenBLAS's own choice,
    another BLAS, or a processor without AVX-512)."""
    coretype = os.environ.get("OPENBLAS_CORETYPE", "").strip()
    if not coretype:
        return None
    kernels = openblas_kernels()
    if kernels is None or kernels.lower() in AVX512_KERNELS:
        return None
    if "avx512f" not in processor_flags():
        return None
    return (f"OPENBLAS_CORETYPE={coretype} in the environment holds NumPy's matrix products to "
            f"OpenBLAS's {kernels} kernels on this processor, which has AVX-512; try a run "
            "with it unset, which lets OpenBLAS choose its own (on a Zen 5 EPYC, OpenBLAS "
            "0.3.31's products ran 1.85 times as fast).")
