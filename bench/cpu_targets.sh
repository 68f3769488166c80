#!/usr/bin/env bash
# Every run behind the CPU targets of docs/benchmarks.md, on this machine, in one go, from the
# repository root (each part's start is logged; on the 2-core EPYC the machine, BLAS-kernel and
# training parts took 10 minutes, and the recipe takes 45):
#
#     bash bench/cpu_targets.sh [--multi30k | --checkpoint C] [--data DIR]
#     bash bench/cpu_targets.sh --quick [--multi30k]   # a smoke run of each, into a temporary folder
#
# 1. the machine: processor, the OPENBLAS_* environment, numpy.show_runtime(), and
#    bench/blas_kernels.py (OpenBLAS's own kernels against those OPENBLAS_CORETYPE names);
# 2. a trained model for decoding, as every committed decoding run used (with random weights
#    every sentence runs to its limit, and decoding without the cache takes hours): with
#    --multi30k the 45-minute recipe (bench/multi30k.py), kept with the results; with
#    --checkpoint C that checkpoint; else the recipe for 12 minutes into a temporary folder;
# 3. compare_torch.py --only training memory --configs small: training against PyTorch eager,
#    the step against its matmul floor, a step's memory;
# 4. compare_torch.py --only decoding: greedy and beam 4 in translate's batches;
# 5. shared_cores.py: `train` alone, beside a busy process, and on one thread beside it.
#
# Every run uses OpenBLAS's own kernels (OPENBLAS_CORETYPE unset); where the environment sets
# OPENBLAS_CORETYPE, training and decoding run once more with it, as a user of this machine
# would meet them. Results are named as the committed ones, after the machine kind and the
# commit: bench/results/<bench>.<kind>-<commit>.openblas-own.<part>.{json,md} (openblas-<core
# type, lower case> for the second runs); the logs go to bench/results/cpu_targets.<kind>-
# <commit>.log. Nothing is committed: read the tables, then add the files you keep.
set -uo pipefail
if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4))); then
    echo "bench/cpu_targets.sh needs bash 4.4 or later (empty arrays under set -u)" >&2
    exit 2
fi
python=$(command -v "${PYTHON:-python3}") || { echo "no Python: set PYTHON" >&2; exit 2; }
python=$(realpath -s "$python")  # absolute, a virtual environment's link kept
usage="usage: bash bench/cpu_targets.sh [--quick] [--multi30k | --checkpoint C] [--data DIR]"
cd "$(dirname "$0")/.."
multi30k=0 quick=0
data=() checkpoint=()
while [ $# -gt 0 ]; do
    case "$1" in
        --multi30k) multi30k=1 ;;
        --quick) quick=1 ;;
        --data) data=(--data "$(realpath "${2:?$usage}")"); shift ;;
        --checkpoint) checkpoint=(--checkpoint "$(realpath "${2:?$usage}")"); shift ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
if [ "$multi30k" -eq 1 ] && [ ${#checkpoint[@]} -gt 0 ]; then
    echo "--multi30k trains the model decoding uses: give it or --checkpoint, not both" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
kind=$("$python" -c "import sys; sys.path.insert(0, 'bench'); from machine import kind; print(kind())")
[ -n "$kind" ] || { echo "bench/machine.py could not name this machine" >&2; exit 2; }
commit=$(git rev-parse --short HEAD)
name="$kind-$commit"
results=bench/results
blas=() minutes=(--minutes 12) compare=() shared=()
if [ "$quick" -eq 1 ]; then
    results=$(mktemp -d) blas=(--rounds 1 --lengths 16 --repeats 1) minutes=(--minutes 0.5)
    compare=(--quick) shared=(--steps 20 --repeats 1)
fi
log="$results/cpu_targets.$name.log"
coretype=${OPENBLAS_CORETYPE:-}
own=(env -u OPENBLAS_CORETYPE)
status=0
run() {  # run LABEL COMMAND...: echo, run, keep going on failure
    echo "== $1 ($(date +%T))" | tee -a "$log"
    shift
    "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "exit status $rc" | tee -a "$log"; status=1; }
}

{
    grep -m1 "model name" /proc/cpuinfo
    echo "cores: $(nproc)"
    env | grep '^OPENBLAS' || echo "no OPENBLAS_* variable set"
    "$python" -c "import numpy; numpy.show_runtime()"
} 2>&1 | tee "$log"
run "blas_kernels" "$python" bench/blas_kernels.py "${blas[@]}" \
    --output "$results/blas_kernels.$name.json"

if [ "$multi30k" -eq 1 ]; then
    out="$results/multi30k.$name.openblas-own"
    [ "$quick" -eq 1 ] || minutes=()
    run "multi30k" "${own[@]}" "$python" bench/multi30k.py --out "$out" "${minutes[@]}" \
        "${data[@]}"
    checkpoint=(--checkpoint "$out/checkpoints/last.npz")
elif [ ${#checkpoint[@]} -eq 0 ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT  # the model made for decoding only
    run "multi30k, a model for decoding" "${own[@]}" "$python" bench/multi30k.py \
        --out "$out/model" "${minutes[@]}" "${data[@]}"
    checkpoint=(--checkpoint "$out/model/checkpoints/last.npz")
fi

for variant in own "$coretype"; do
    [ -n "$variant" ] || continue
    if [ "$variant" = own ]; then
        prefix=("${own[@]}") suffix=openblas-own
    else
        prefix=(env "OPENBLAS_CORETYPE=$variant") suffix="openblas-${variant,,}"
    fi
    run "training and memory, $suffix" "${prefix[@]}" "$python" bench/compare_torch.py \
        --only training memory --configs small "${compare[@]}" \
        --output "$results/compare_torch.$name.$suffix.training-memory-small.json"
    run "decoding, $suffix" "${prefix[@]}" "$python" bench/compare_torch.py --only decoding \
        "${compare[@]}" "${checkpoint[@]}" "${data[@]}" \
        --output "$results/compare_torch.$name.$suffix.decoding.json"
done
run "shared cores" "${own[@]}" "$python" bench/shared_cores.py "${shared[@]}" \
    --output "$results/shared_cores.$name.openblas-own.json"
echo "cpu_targets: done ($(date +%T)), exit status $status; log in $log" | tee -a "$log"
exit "$status"
