"""Shared fixtures: every test starts on the CPU, in float32, with seed 0, on NumPy's own
kernels (the reference path; ``compiled`` switches a test to the Numba kernels), with the
shares of a search on threads (``translation/_processes.py``'s worker processes off).

The ``device`` fixture runs a test on each backend: NumPy ("cpu"), the CuPy-like strict
backend ("strict", see strict_backend.py) and real CuPy ("cuda", skipped without a GPU).
"""

import pytest
import strict_backend

from minitransformer import backend
from minitransformer.functional import _compiled
from minitransformer.translation import _processes

strict_backend.install()


def _cuda_available() -> bool:
    try:
        backend.get_backend("cuda")
    except backend.DeviceError:
        return False
    return True


CUDA = _cuda_available()
DEVICES = [
    "cpu",
    "strict",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="needs CuPy and a GPU")),
]


@pytest.fixture(autouse=True)
def _fresh_state():
    backend.use("cpu")
    backend.set_default_dtype("float32")
    backend.manual_seed(0)
    _compiled.set_compiled_kernels(False)
    _processes.set_decode_processes(False)  # shares on threads: the tests that want worker
    yield                                   # processes say so (test_decode_on_cores.py)
    backend.use("cpu")
    backend.set_default_dtype("float32")
    _compiled.set_compiled_kernels(False)
    _processes.set_decode_processes(False)


@pytest.fixture(params=DEVICES)
def device(request):
    """Run the test with ``request.param`` as the current device."""
    backend.use(request.param)
    backend.manual_seed(0)
    return request.param


@pytest.fixture
def compiled():
    """The CPU layers on the compiled kernels (functional/_compiled.py) for this test."""
    if not _compiled.available():
        pytest.skip("needs Numba (pip install 'minitransformer[fast]')")
    _compiled.set_compiled_kernels(True)
    yield
    _compiled.set_compiled_kernels(False)


class _FullDisk:
    """A file whose writes stop half-way with the error of a full disk."""

    def __init__(self, file):
        self.file = file

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def write(self, data):
        self.file.write(data[:len(data) // 2])
        raise OSError(28, "No space left on device")


@pytest.fixture
def disk_full_at_the_second_file(monkeypatch):
    """Files written whole (data/parallel.py's write_files) meet a full disk at the second
    one, half of it written; the fixture is the list of the names written so far."""
    from minitransformer.data import parallel

    writes, real = [], parallel.temporary_beside

    def beside(target):
        file, temporary = real(target)
        writes.append(target.name)
        return (_FullDisk(file) if len(writes) == 2 else file), temporary
    monkeypatch.setattr(parallel, "temporary_beside", beside)
    return writes
