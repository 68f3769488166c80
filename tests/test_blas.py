"""What the library says about NumPy's BLAS kernels (minitransformer/blas.py)."""

import pytest
from threadpoolctl import threadpool_info

from minitransformer import blas


def test_openblas_kernels_are_those_threadpoolctl_reports():
    reported = [lib.get("architecture") for lib in threadpool_info()
                if lib.get("internal_api") == "openblas"]
    assert blas.openblas_kernels() == (reported[0] or None if reported else None)


@pytest.mark.parametrize("coretype, kernels, flags, held", [
    ("Haswell", "Haswell", {"avx2", "avx512f"}, True),     # pinned below the processor
    ("Zen", "Zen", {"avx2", "avx512f", "avx512bw"}, True),
    (None, "Haswell", {"avx2", "avx512f"}, False),         # OpenBLAS's own choice
    ("SkylakeX", "SkylakeX", {"avx2", "avx512f"}, False),  # AVX-512 kernels named
    ("Haswell", "Haswell", {"avx2"}, False),               # the processor has no AVX-512
    ("Haswell", None, {"avx2", "avx512f"}, False),         # NumPy's BLAS is not OpenBLAS
])
def test_held_back_only_when_the_variable_narrows_kernels_below_the_processor(
        monkeypatch, coretype, kernels, flags, held):
    if coretype is None:
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_CORETYPE", coretype)
    monkeypatch.setattr(blas, "openblas_kernels", lambda: kernels)
    monkeypatch.setattr(blas, "processor_flags", lambda: flags)
    note = blas.held_back()
    if not held:
        assert note is None
    else:
        assert note.startswith(f"OPENBLAS_CORETYPE={coretype} in the environment")
        assert f"OpenBLAS's {kernels} kernels" in note and "unset it" in note


def test_processor_flags_come_from_cpuinfo_where_there_is_one():
    flags = blas.processor_flags()
    assert isinstance(flags, set)
    if flags:  # Linux: every x86-64 processor has SSE2, every other names its own
        assert "sse2" in flags or "fp" in flags or "fpu" in flags

