#!/usr/bin/env bash
# Everything a machine with an NVIDIA GPU should run, in one go, from the repository root:
#
#     bash bench/cuda_check.sh LOG_DIR [compare_torch options...]
#
# 1. what the machine has (GPU, driver, Python, NumPy, CuPy, torch);
# 2. the whole test suite, where every test parametrized over devices also runs on "cuda" and
#    tests/test_cuda.py checks the fused kernels against the NumPy path (pytest-xdist if
#    present: the suite is CPU-bound apart from those);
# 3. bench/compare_torch.py --device cuda (CuPy against CUDA PyTorch), with the options given;
#    its results go to bench/results/compare_torch.<gpu>.{json,md} (h100 on an NVIDIA H100).
#
# Needs CuPy, PyTorch with CUDA, and the project's dependencies importable; the project itself
# is used in place (PYTHONPATH), so nothing is installed. Logs go to LOG_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash bench/cuda_check.sh LOG_DIR [compare_torch options...]}
shift
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python=${PYTHON:-python3}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$python" - <<'EOF'
import sys, numpy, cupy, torch
print("python", sys.version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__,
      "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
EOF
} 2>&1 | tee "$out/machine.txt"

workers=()
if "$python" -c "import xdist" 2>/dev/null; then
    workers=(-n "${PYTEST_WORKERS:-8}")
fi
"$python" -m pytest -q -p no:cacheprovider "${workers[@]}" tests 2>&1 | tee "$out/pytest.log"
tests_status=${PIPESTATUS[0]}

"$python" bench/compare_torch.py --device cuda "$@" 2>&1 | tee "$out/compare_torch.log"
compare_status=${PIPESTATUS[0]}

echo "pytest exit $tests_status, compare_torch exit $compare_status"
[ "$tests_status" -eq 0 ] && [ "$compare_status" -eq 0 ]
