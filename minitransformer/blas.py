"""Which kernels NumPy's BLAS runs on this processor, and whether the environment holds it back.

A training step on the CPU is mostly matrix products, and NumPy hands them to its BLAS. The
OpenBLAS of NumPy's wheels picks its kernels for the processor when it loads, unless the
variable OPENBLAS_CORETYPE names others; named kernels are used on any processor that can run
them. The Haswell kernels (AVX2) on a processor with AVX-512 multiply float32 matrices at about
half the rate of its own: 230 against 448 GFLOP/s on a 2-core Zen 5 EPYC, where a `small`
training step took 0.60 s with OpenBLAS's choice against 0.90 s with Haswell's
(docs/benchmarks.md). ``minitransformer train`` says so when it starts on such a machine.

    openblas_kernels()    "SkylakeX", "Haswell", ...: the kernels OpenBLAS runs; None when
                          NumPy's BLAS is another library
    held_back()           one sentence when OPENBLAS_CORETYPE holds OpenBLAS to kernels without
                          AVX-512 on a processor that has it, else None
"""

from __future__ import annotations

import os
from pathlib import Path

from . import backend  # noqa: F401  (NumPy, and with it its BLAS, loaded)

# OpenBLAS's kernels for x86 processors with AVX-512 (openblas_get_corename's names, lower case)
AVX512_KERNELS = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


def openblas_kernels() -> str | None:
    """The name of the kernels NumPy's OpenBLAS chose or was told to use; None when NumPy's
    BLAS is not OpenBLAS (MKL, Accelerate) or does not say."""
    from threadpoolctl import threadpool_info  # finds the BLAS that backend's NumPy loaded

    for library in threadpool_info():
        if library.get("internal_api") == "openblas":
            return library.get("architecture") or None
    return None


def processor_flags() -> set[str]:
    """The first processor's feature flags from /proc/cpuinfo ("avx2", "avx512f", ...); empty
    where there is no such file (not Linux)."""
    cpuinfo = Path("/proc/cpuinfo")
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
            f"OpenBLAS's {kernels} kernels on this processor, which has AVX-512; unset it to "
            "let OpenBLAS choose its own (on a Zen 5 EPYC they multiply twice as fast).")
