"""Two real processes under ``mpiexec -n 2`` (MPICH from the ``distributed`` extra): the
gradients equal one process's, the weights stay identical, the loss curve is that of
``--accumulate 2``, and a failing process ends the run instead of hanging it."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minitransformer.translation.checkpoint import load_checkpoint

pytest.importorskip("mpi4py", reason="needs the distributed extra: pip install -e .[distributed]")
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                      f"{os.environ.get('PATH', '')}")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec (the mpich wheel)")
RANKS = Path(__file__).with_name("ranks.py")
LIMIT = 180  # seconds: a run that hangs fails the test instead of the suite
TRAIN = ["train", "--max-steps", "6", "--eval-every", "2", "--bleu-sentences", "8",
         "--beam", "1", "--no-progress", "--config", "tiny"]


def run(*command, env=None):
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    result.seconds = time.perf_counter() - start
    return result


def mpiexec(*per_rank):
    """``mpiexec -n 2 COMMAND``, or one command per rank (``mpiexec -n 1 A : -n 1 B``)."""
    if len(per_rank) == 1:
        return run(MPIEXEC, "-n", "2", *per_rank[0])
    command = [MPIEXEC]
    for i, rank_command in enumerate(per_rank):
        command += ([":"] if i else []) + ["-n", "1", *rank_command]
    return run(*command)


def cli(fault, *args):
    return [sys.executable, str(RANKS), "cli", fault, "--", *args]


def step_losses(run_dir):
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if "loss" in r]


def test_two_processes_compute_the_gradient_of_the_whole_step_in_float64():
    result = mpiexec([sys.executable, str(RANKS), "gradients"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["batches"] == [3, 2]                 # uneven shares of the step's tokens
    assert report["relative_error"] < 1e-12
    assert report["same_on_every_rank"]


def test_the_weights_of_both_processes_stay_bit_identical(tmp_path):
    result = mpiexec([sys.executable, str(RANKS), "trainer", str(tmp_path)])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"identical": True}


def test_two_processes_follow_the_loss_curve_of_one_process_with_accumulate_2(tmp_path):
    two = mpiexec([sys.executable, "-m", "minitransformer", *TRAIN, "--out",
                   str(tmp_path / "two")])
    assert two.returncode == 0, two.stderr
    assert "2 processes on cpu, 1 thread each" in two.stdout.splitlines()[0]
    one = run(sys.executable, "-m", "minitransformer", *TRAIN, "--accumulate", "2", "--out",
              str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    assert step_losses(tmp_path / "two") == pytest.approx(step_losses(tmp_path / "one"),
                                                          rel=1e-5)
    # rank 0 alone wrote the run: one log, one set of checkpoints, the test scores
    assert (tmp_path / "two" / "results.json").is_file()
    assert len(step_losses(tmp_path / "two")) == 6


def test_a_two_process_run_resumes_where_it_stopped(tmp_path):
    whole = mpiexec(cli("none", *TRAIN, "--out", str(tmp_path / "whole")))
    assert whole.returncode == 0, whole.stderr
    first = mpiexec(cli("none", *TRAIN[:2], "4", *TRAIN[3:], "--out", str(tmp_path / "cut")))
    assert first.returncode == 0, first.stderr
    resumed = mpiexec(cli("none", *TRAIN, "--out", str(tmp_path / "cut"), "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at step 4" in resumed.stdout
    assert step_losses(tmp_path / "cut") == step_losses(tmp_path / "whole")


def test_resuming_with_another_number_of_processes_says_what_changes(tmp_path):
    first = mpiexec(cli("none", *TRAIN[:2], "2", *TRAIN[3:], "--out", str(tmp_path)))
    assert first.returncode == 0, first.stderr
    alone = run(sys.executable, "-m", "minitransformer", *TRAIN, "--out", str(tmp_path),
                "--resume")
    assert alone.returncode == 0, alone.stderr
    assert "resuming a run of 2 processes with 1" in alone.stdout + alone.stderr


@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_failing_process_ends_the_run_and_the_last_checkpoint_survives(tmp_path, fault):
    result = mpiexec(cli(fault, *TRAIN, "--out", str(tmp_path)))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert result.seconds < 60                      # the other process did not wait forever
    if fault == "raise":
        assert "an injected failure on rank 1" in output
    else:
        assert "signal 9" in output.lower() or "killed" in output.lower()
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.npz")  # step 2's, intact
    assert checkpoint.state["trainer"]["step"] == 2


def test_processes_with_different_options_are_refused_naming_the_difference(tmp_path):
    base = [sys.executable, "-m", "minitransformer", *TRAIN, "--out", str(tmp_path)]
    result = mpiexec(base, base + ["--label-smoothing", "0.2"])
    assert result.returncode != 0
    assert "rank 1's training configuration (label_smoothing 0.2 against 0.1)" in result.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_bad_data_on_one_process_ends_the_run_with_its_message(tmp_path):
    (tmp_path / "data").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "data" / f"{split}.en").write_text("a b c\nd e f\n")
        (tmp_path / "data" / f"{split}.de").write_text("g h i\nj k l\n")
    base = [sys.executable, "-m", "minitransformer", *TRAIN, "--vocab-size", "20"]
    result = mpiexec(base + ["--data", str(tmp_path / "data"), "--out", str(tmp_path / "run")],
                     base + ["--data", str(tmp_path / "missing"), "--out",
                             str(tmp_path / "run")])
    assert result.returncode != 0
    assert result.seconds < 60
    assert "minitransformer train (rank 1 of 2):" in result.stderr
    assert "is not a folder" in result.stderr


def test_an_uncaught_exception_in_a_script_ends_every_process():
    """Not only the command: any script that joined the run with world()."""
    result = mpiexec([sys.executable, str(RANKS), "uncaught"])
    assert result.returncode != 0
    assert result.seconds < 60
    assert "an uncaught error on rank 1" in result.stderr
    assert "rank 1 of 2 failed (above): ending every process of the run." in result.stderr
