#!/usr/bin/env bash
# Everything a machine with an NVIDIA GPU should run, in one go, from the repository root:
#
#     bash bench/cuda_check.sh LOG_DIR [compare_torch options...]
#
# 1. what the machine has (GPU, driver, Python, NumPy, CuPy, torch);
# 2. the tests that run on the GPU (-k "cuda or cublas": every test parametrized over devices
#    on "cuda", tests/test_cuda.py's fused kernels and direct cuBLAS products against CuPy's,
#    the captured steps of tests/translation/test_cuda_graphs.py on CUDA itself; about 40 s on
#    16 cores with pytest-xdist); CUDA_CHECK_TESTS=all runs the whole suite instead (CI runs
#    the rest on every change);
# 3. bench/compare_torch.py --device cuda (CuPy against CUDA PyTorch), with the options given;
#    its results go to bench/results/compare_torch.<gpu>.{json,md} (h100 on an NVIDIA H100),
#    with a last section from bench/cuda_graphs.py: the training step and decoding replayed as
#    CUDA graphs beside eager, CUDA PyTorch eager and torch.compile; tests/translation/
#    test_cuda_graphs.py has already run in step 2 (on the strict device's stand-in);
# 4. with two GPUs or more and mpi4py (the distributed extra): data parallelism through NCCL,
#    the float64 gradients of two processes against one's (tests/distributed/ranks.py) and a
#    short two-process training run on the GPUs.
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
select=(-k "cuda or cublas")
if [ "${CUDA_CHECK_TESTS:-gpu}" = all ]; then
    select=()
fi
"$python" -m pytest -q -p no:cacheprovider "${workers[@]}" "${select[@]}" tests 2>&1 |
    tee "$out/pytest.log"
tests_status=${PIPESTATUS[0]}

"$python" bench/compare_torch.py --device cuda "$@" 2>&1 | tee "$out/compare_torch.log"
compare_status=${PIPESTATUS[0]}

distributed_status=0
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -ge 2 ] && "$python" -c "import mpi4py" 2>/dev/null; then
    {
        MINITRANSFORMER_DEVICE=cuda mpiexec -n 2 "$python" tests/distributed/ranks.py gradients &&
        mpiexec -n 2 "$python" -m minitransformer train --device cuda --max-steps 40 \
            --eval-every 20 --bleu-sentences 50 --no-progress --out "$out/distributed-run"
    } 2>&1 | tee "$out/distributed.log"
    distributed_status=${PIPESTATUS[0]}
else
    echo "data parallelism on GPUs: needs 2 GPUs (found $gpus) and mpi4py; not run" |
        tee "$out/distributed.log"
fi

echo "pytest exit $tests_status, compare_torch exit $compare_status," \
     "distributed exit $distributed_status"
[ "$tests_status" -eq 0 ] && [ "$compare_status" -eq 0 ] && [ "$distributed_status" -eq 0 ]
