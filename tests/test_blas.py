"""What the library says about NumPy's BLAS kernels (minitransformer/blas.py)."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import threadpoolctl

from minitransformer import blas

X86_LINUX = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def kernels_in_a_process_with(coretype):
    """openblas_kernels() of a fresh process whose OpenBLAS loaded with OPENBLAS_CORETYPE set
    to ``coretype`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    done = subprocess.run([sys.executable, "-c", "from minitransformer import blas; "
                           "print(blas.openblas_kernels())"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not X86_LINUX or blas.openblas_kernels() is None
                    or "avx2" not in blas.processor_flags(),
                    reason="needs NumPy's OpenBLAS on an x86-64 processor with AVX2")
def test_openblas_kernels_name_those_the_variable_chose_in_any_case():
    forced = kernels_in_a_process_with("haswell")
    if forced != "Haswell" and forced == kernels_in_a_process_with(None):
        pytest.skip(f"this OpenBLAS is built for one target ({forced}) and ignores the variable")
    assert forced == "Haswell"
    assert kernels_in_a_process_with("Haswell") == "Haswell"


def test_numpy_blas_is_the_library_in_numpys_own_folders(monkeypatch):
    site = Path(np.__file__).parent.parent
    others = [{"user_api": "blas", "internal_api": "openblas", "architecture": "Zen",
               "filepath": str(site / "scipy.libs" / "libscipy_openblas.so")},
              {"user_api": "blas", "internal_api": "mkl", "filepath": "/opt/torch/libmkl.so"}]
    own = {"user_api": "blas", "internal_api": "openblas", "architecture": "SkylakeX",
           "filepath": str(site / "numpy.libs" / "libscipy_openblas64_.so")}
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [*others, own])
    assert blas.numpy_blas() is own and blas.openblas_kernels() == "SkylakeX"
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: others)  # none of NumPy's own
    assert blas.numpy_blas() is others[0]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: others[1:])
    assert blas.openblas_kernels() is None  # MKL says nothing of OpenBLAS's kernels


@pytest.mark.parametrize("coretype, kernels, flags, held", [
    ("Haswell", "Haswell", {"avx2", "avx512f"}, True),     # pinned below the processor
    ("haswell", "Haswell", {"avx2", "avx512f"}, True),     # OpenBLAS reads it in any case
    ("Zen", "Zen", {"avx2", "avx512f", "avx512bw"}, True),
    (None, "Haswell", {"avx2", "avx512f"}, False),         # OpenBLAS's own choice
    ("SkylakeX", "SkylakeX", {"avx2", "avx512f"}, False),  # AVX-512 kernels named
    ("skylakex", "SkylakeX", {"avx2", "avx512f"}, False),
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
        assert f"OpenBLAS's {kernels} kernels" in note and "with it unset" in note


def test_processor_flags_read_the_flags_line_of_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 "
                       "avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert blas.processor_flags(cpuinfo) == {"fpu", "sse2", "avx2", "avx512f"}
    assert blas.processor_flags(tmp_path / "absent") == set()
    if X86_LINUX:  # the real file: every x86-64 processor has SSE2
        assert "sse2" in blas.processor_flags()
