"""The backend: device choice, array modules, transfers, dtypes and seeds."""

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import CUDA
from strict_backend import StrictArray, strict_xp

import minitransformer as mt
from minitransformer import backend


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_cpu_is_the_default_device_and_numpy_its_module():
    assert mt.current_device() == "cpu"
    x = mt.randn(2)
    assert isinstance(x.data, np.ndarray)
    assert mt.get_array_module(x.data) is np


def test_unknown_device_names_the_choices():
    with pytest.raises(mt.DeviceError, match=r"unknown device 'tpu': choose one of .*'cpu'"):
        mt.use("tpu")


@pytest.mark.skipif(CUDA, reason="this machine has CuPy and a GPU")
def test_cuda_without_cupy_or_gpu_says_how_to_install_it():
    with pytest.raises(mt.DeviceError, match=r'pip install -e "\.\[gpu\]"') as refused:
        mt.use("cuda")
    assert "--device cpu" in str(refused.value)  # the way back, for the command line too
    assert mt.current_device() == "cpu"  # a failed use() leaves the device unchanged


def test_environment_variable_chooses_the_device():
    code = "import minitransformer as mt; print(mt.current_device())"
    assert run_python(code, MINITRANSFORMER_DEVICE="CPU").stdout.strip() == "cpu"
    failed = run_python(code, MINITRANSFORMER_DEVICE="tpu")
    assert failed.returncode != 0
    assert "$MINITRANSFORMER_DEVICE='tpu': unknown device 'tpu'" in failed.stderr


def test_device_context_restores_the_previous_device():
    with mt.device("strict"):
        assert isinstance(mt.randn(2).data, StrictArray)
    assert mt.current_device() == "cpu"


def test_get_array_module_follows_the_array():
    assert backend.get_array_module(np.zeros(2)) is np
    assert backend.get_array_module(backend.to_device(np.zeros(2), "strict")) is strict_xp


def test_transfer_round_trip_keeps_values_and_dtype():
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    on_device = backend.to_device(host, "strict")
    assert isinstance(on_device, StrictArray)
    back = backend.to_numpy(on_device)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32
    np.testing.assert_array_equal(back, host)


def test_tensor_to_moves_data_and_gradient():
    x = mt.tensor([1.0, 2.0], requires_grad=True, name="w")
    (x * x).sum().backward()
    moved = x.to("strict")
    assert moved.device == "strict" and moved.requires_grad and moved.name == "w"
    assert isinstance(moved.grad, StrictArray)
    np.testing.assert_array_equal(moved.numpy(), [1.0, 2.0])
    assert moved.to("cpu").device == "cpu"


def test_default_dtype_context_and_setting():
    assert mt.get_default_dtype() == np.float32
    with mt.default_dtype("float64"):
        assert mt.get_default_dtype() == np.float64
        assert mt.randn(2).dtype == np.float64
    assert mt.get_default_dtype() == np.float32
    with pytest.raises(ValueError, match="must be float16, float32 or float64, got int32"):
        mt.set_default_dtype("int32")
    with pytest.raises(TypeError, match="'floaty' is not a dtype"):
        mt.set_default_dtype("floaty")


@pytest.mark.parametrize("device_name", ["cpu", "strict"])
def test_manual_seed_makes_draws_repeatable_on_each_device(device_name):
    mt.manual_seed(7)
    first = backend.to_numpy(backend.rng(device_name).standard_normal((3,), dtype="float32"))
    mt.manual_seed(7)
    again = backend.to_numpy(backend.rng(device_name).standard_normal((3,), dtype="float32"))
    mt.manual_seed(8)
    other = backend.to_numpy(backend.rng(device_name).standard_normal((3,), dtype="float32"))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_host_rng_is_shared_by_every_device():
    mt.manual_seed(1)
    a = backend.host_rng().standard_normal(3)
    mt.manual_seed(1)
    b = backend.host_rng().standard_normal(3)
    np.testing.assert_array_equal(a, b)


def test_bad_seed_is_refused():
    with pytest.raises(ValueError, match="non-negative integer"):
        mt.manual_seed(-1)


def test_memory_stats_report_the_peak_resident_memory_on_the_cpu():
    before = backend.memory_stats("cpu")["peak_rss_bytes"]
    block = np.ones(64 * 2**20 // 8)  # 64 MiB touched
    after = backend.memory_stats("cpu")["peak_rss_bytes"]
    assert block.sum() > 0 and after >= before > 10 * 2**20


def test_memory_stats_without_the_resource_module_says_so(monkeypatch):
    """Windows has no resource module: one sentence instead of an ImportError."""
    import sys
    monkeypatch.setitem(sys.modules, "resource", None)  # import resource now raises
    with pytest.raises(NotImplementedError, match="which Windows does not have"):
        backend.memory_stats("cpu")
