"""Train the `tiny` Transformer on the built-in task with `minitransformer train`'s defaults.

    python bench/builtin.py                        # results in bench/results/builtin.<machine>/
    python bench/builtin.py --out /tmp/builtin     # elsewhere
    python bench/builtin.py --device cuda --cuda-graphs --shape-multiple 4   # on a GPU

This is the run the README quotes: `minitransformer train` with nothing but a run folder
(the built-in English->Velish task, the `tiny` model, 1,200 steps, validation every 300),
timed, then `minitransformer evaluate` on its final checkpoint with beam 4 and greedy search.
--device, --cuda-graphs and --shape-multiple go to both commands (the last to `train` alone),
so the same run measures a GPU with and without CUDA graphs.
The checkpoints stay in a scratch run folder (--run, by default a temporary one); what is
kept in --out is text: the command lines, the trainer's output, its log.jsonl, run.json and
results.json, the test translations, both evaluations and a summary (builtin.json, with the
machine and the commit it ran at).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import commit, kind, machine

KEPT = ("run.json", "log.jsonl", "results.json", "test.greedy.txt", "test.beam4.txt")


def run(command: list[str], log: Path) -> tuple[str, float]:
    """Run one `minitransformer` command, echo and keep its output; (stdout, seconds)."""
    print("$ " + " ".join(command), flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    output = done.stdout + done.stderr
    log.write_text(output)
    print(output, flush=True)
    if done.returncode:
        sys.exit(f"{command[1]} failed with exit status {done.returncode}")
    return done.stdout, seconds


def gpu_name() -> str:
    """The first GPU's name, as CUDA reports it ("NVIDIA H200")."""
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"
                                             / f"builtin.{kind()}"))
    parser.add_argument("--run", default=None, help="run folder for the checkpoints "
                        "(default: a temporary folder, removed at the end)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="train and evaluate with CUDA graphs (with --device cuda)")
    parser.add_argument("--shape-multiple", type=int, default=0, metavar="M",
                        help="train's batches of fixed shapes (see `train --help`)")
    args = parser.parse_args(argv)
    device = ["--device", args.device] + (["--cuda-graphs"] if args.cuda_graphs else [])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = None if args.run else tempfile.mkdtemp(prefix="builtin-")
    run_dir = Path(args.run or scratch) / "builtin-tiny"
    cli = [sys.executable, "-m", "minitransformer"]
    version = commit()

    train = [*cli, "train", "--out", str(run_dir), "--no-progress", *device]
    if args.shape_multiple:
        train += ["--shape-multiple", str(args.shape_multiple)]
    _, train_seconds = run(train, out / "train.txt")
    for name in KEPT:
        shutil.copy(run_dir / name, out / name)
    evaluations = {}
    for name, beam in (("beam4", 4), ("greedy", 1)):
        command = [*cli, "evaluate", "--checkpoint", str(run_dir / "checkpoints" / "final.npz"),
                   "--data", "builtin", "--beam", str(beam), "--json", *device]
        output, seconds = run(command, out / f"evaluate.{name}.txt")
        evaluations[name] = {"command": " ".join(command[1:]), "seconds": round(seconds, 1),
                             **json.loads(output)}
    trained = json.loads((out / "results.json").read_text())
    summary = {
        "benchmark": "built-in task, `minitransformer train` defaults (tiny model)",
        "train_command": " ".join(train[1:]), "train_seconds": round(train_seconds, 1),
        "train_results": trained, "evaluate": evaluations, "machine": machine(),
        "device": gpu_name() if args.device == "cuda" else "cpu",
        "cuda_graphs": args.cuda_graphs, "shape_multiple": args.shape_multiple,
        "commit": version}
    (out / "builtin.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"trained in {train_seconds / 60:.1f} minutes; test BLEU "
          f"{evaluations['beam4']['bleu']:.2f} beam 4, {evaluations['greedy']['bleu']:.2f} "
          f"greedy ({machine()['cpu']}, {machine()['cpu_count']} cores, "
          f"device {summary['device']}{', CUDA graphs' if args.cuda_graphs else ''})")
    if scratch:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
