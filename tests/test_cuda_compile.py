"""The fused CUDA kernels of functional/_cuda.py, compiled by NVRTC on a machine with no GPU.

CuPy writes a kernel's CUDA source and compiles it on the kernel's first call, which needs a
GPU. Here CuPy's own code generation and compile step run, for float32 and float64 and for
the argument types the layers pass, targeting a fixed architecture instead of asking a device,
and the binary is kept instead of being loaded onto one. A typo in a kernel fails here.

Needs ``pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12``; skipped without them. It reaches
into CuPy's internals (``cupy._core``), read off CuPy 14.2.
"""
# ruff: noqa: E402 (CuPy's modules are imported once CuPy and NVRTC are known to be there)

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs CuPy: pip install cupy-cuda12x")
try:
    cupy.cuda.nvrtc.getVersion()
except Exception as exc:  # whatever loading the library raised
    pytest.skip(f"needs NVRTC ({str(exc).strip()}): pip install nvidia-cuda-nvrtc-cu12",
                allow_module_level=True)

from cupy._core import _kernel, _reduction, core
from cupy._core._carray import Indexer
from cupy._core._scalar import CScalar
from cupy.cuda import compiler, function

from minitransformer.functional import _cuda

ARCH = "80"              # sm_80: there is no device to ask for its compute capability
REDUCE_BLOCK_SIZE = 512  # CuPy's threads per block for a ReductionKernel on CUDA
NDARRAY, INDEXER, SCALAR = 1, 2, 3  # _ArgKind in cupy/_core/_kernel.pxd

# The inputs that the functions of _cuda.py pass as scalars; every other argument is an array.
SCALARS = {
    "dropout_forward": {"p", "scale"},
    "dropout_backward": {"scale"},
    "mask_and_scale": {"scale", "neg_inf"},
    "cross_entropy_backward": {"eps", "V"},
    "adam": {"beta1", "beta2", "step", "eps"},
}
KERNELS = _cuda.make_kernels(cupy)
NAMES = [name for name, k in vars(KERNELS).items()
         if isinstance(k, cupy.ElementwiseKernel | cupy.ReductionKernel)]


def array(dtype, ndim):  # strided, as when a (N, 1) statistic meets (N, C) rows
    return _kernel._ArgInfo(NDARRAY, cupy.ndarray, dtype, ndim, False, True)


def scalar(dtype):
    return _kernel._ArgInfo(SCALAR, CScalar, dtype, 0, True, True)


def indexer(ndim):
    return _kernel._ArgInfo(INDEXER, Indexer, None, ndim, True, True)


def elementwise_source(kernel, dtype, scalars=()):
    """The source CuPy compiles on the first call of ``kernel``, with T = dtype and the
    inputs named in ``scalars`` given as scalars (ElementwiseKernel.__call__, less arrays)."""
    in_arrays = tuple(None if p.name in scalars else p.dtype or dtype for p in kernel.in_params)
    out_arrays = tuple(p.dtype or dtype for p in kernel.out_params)
    in_types, out_types, type_map = kernel._decide_params_type(in_arrays, out_arrays)
    args = [scalar(t) if a is None else array(t, 2)
            for a, t in zip(in_arrays + out_arrays, in_types + out_types, strict=True)]
    return _kernel._get_elementwise_kernel_code(
        tuple(args) + (indexer(2),), type_map, kernel.params, kernel.operation, kernel.name,
        kernel.preamble, **kernel.kwargs)


def reduction_source(kernel, dtype):
    """The source CuPy compiles on the first call of ``kernel(*args, axis=-1)``, with T = dtype,
    the inputs (N, C) and the output (N,) (ReductionKernel._call, less arrays)."""
    ins = tuple(p.dtype or dtype for p in kernel.in_params)
    outs = tuple(p.dtype or dtype for p in kernel.out_params)
    in_types, out_types, type_map = _reduction._decide_params_type(
        kernel.in_params, kernel.out_params, ins, outs)
    type_map = _kernel._TypeMap(type_map._pairs + (("IndexT", "int32"),))
    args = ([array(t, 2) for t in in_types] + [array(t, 1) for t in out_types]
            + [indexer(2), indexer(1), scalar(np.int32)])  # in, out, _block_stride
    return _reduction._ReductionKernel_get_cached_function_code(
        kernel.nin, kernel.nout, kernel._params, tuple(args), type_map, kernel.name,
        REDUCE_BLOCK_SIZE, kernel.reduce_type, kernel.identity, kernel.map_expr,
        kernel.reduce_expr, kernel.post_map_expr, kernel.preamble, kernel.options)


class Unloaded(function.Module):
    """A compiled module that keeps its binary instead of loading it onto a device."""

    def load(self, cubin):
        self.cubin = cubin


@pytest.fixture
def nvrtc(monkeypatch):
    """CuPy's compile step (headers, options, NVRTC), for ARCH, with no device: source -> cubin."""
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")  # compile each time, no ~/.cupy cache
    monkeypatch.setattr(function, "Module", Unloaded)
    # the same choice of -arch, without its memo, which is kept per device
    monkeypatch.setattr(compiler, "_get_arch_for_options_for_nvrtc",
                        compiler._get_arch_for_options_for_nvrtc.__wrapped__)

    def to_cubin(source, options=(), cupy_headers=True):  # a RawModule has none
        return core.compile_with_cache(source, tuple(options), arch=ARCH,
                                       prepend_cupy_headers=cupy_headers).cubin
    return to_cubin


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_compiles(name, dtype, nvrtc):
    kernel = getattr(KERNELS, name)
    if isinstance(kernel, cupy.ReductionKernel):
        cubin = nvrtc(reduction_source(kernel, dtype), kernel.options)
    else:
        source = elementwise_source(kernel, dtype, SCALARS.get(name, ()))
        cubin = nvrtc(source, kernel.kwargs.get("options", ()))
    assert cubin.startswith(b"\x7fELF") and kernel.name.encode() in cubin


def test_the_row_kernels_compile_for_both_dtypes(nvrtc):
    """ROW_KERNELS, as the RawModule of make_kernels compiles it on its first use."""
    assert isinstance(KERNELS.rows, cupy.RawModule)
    cubin = nvrtc(_cuda.ROW_KERNELS, cupy_headers=False)
    assert cubin.startswith(b"\x7fELF")
    for name in ("layer_norm_forward", "layer_norm_backward", "softmax_rows",
                 "logit_statistics"):
        for ctype in ("float", "double"):
            assert f"minitransformer_{name}_{ctype}".encode() in cubin


def test_a_typo_fails_to_compile(nvrtc):
    kernel = cupy.ElementwiseKernel("T x", "T y", "y = exp(xx);", "minitransformer_typo")
    with pytest.raises(compiler.CompileException, match='identifier "xx" is undefined'):
        nvrtc(elementwise_source(kernel, np.float32))
