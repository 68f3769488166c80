"""Faults under ``mpiexec -n 2``. SIGTERM, sent to mpiexec (which passes it on to every
process, as MPICH's does) or to one process alone, stops every process after the same step,
with that step's checkpoint, exit status 143, and a run that resumes with the uninterrupted
losses. A file rank 0 cannot write ends the other process too, in one sentence."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minitransformer.translation.checkpoint import load_checkpoint

pytest.importorskip("mpi4py", reason="needs the distributed extra: pip install -e .[distributed]")
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                      f"{os.environ.get('PATH', '')}")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec (the mpich wheel)")
LIMIT = 120  # seconds: a run that hangs fails the test instead of the suite
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# one process writes its PID where the test can read it, then runs the command
WITH_PID = ("import os, sys; from pathlib import Path; "
            "Path(sys.argv[1]).write_text(str(os.getpid())); "
            "from minitransformer.cli import main; sys.exit(main(sys.argv[2:]))")
# rank 0's log becomes read-only after step 2: its writes fail as on a remounted disk
READ_ONLY_LOG = textwrap.dedent("""
    import errno, os, sys
    import minitransformer.translation.training as training
    from minitransformer.cli import main

    write = training._Log.write

    def read_only_after_step_2(log, record):
        if record.get("step", 0) > 2:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        write(log, record)

    training._Log.write = read_only_after_step_2
    sys.exit(main(sys.argv[1:]))
""")


def write_corpus(folder):
    rng = random.Random(0)
    words = ["ka", "lo", "mi", "nu", "pe", "ro", "si", "tu"]
    folder.mkdir()
    for split, n in (("train", 80), ("valid", 6), ("test", 5)):
        sentences = [[rng.choice(words) for _ in range(rng.randint(2, 5))] for _ in range(n)]
        (folder / f"{split}.xx").write_text("".join(" ".join(s) + "\n" for s in sentences))
        (folder / f"{split}.yy").write_text(
            "".join(" ".join(reversed(s)).upper() + "\n" for s in sentences))
    return folder


def train(corpus, run, *options):
    return ["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy", "--config",
            "tiny", "--vocab-size", "40", "--max-tokens", "200", "--warmup", "10",
            "--bleu-sentences", "4", "--keep-last", "2", "--beam", "1", "--no-progress",
            "--out", str(run), *options]


def steps_logged(run):
    """How many steps the log of a running run holds (whole lines only: the last one may be
    in the middle of being written)."""
    log = run / "log.jsonl"
    lines = log.read_text().split("\n")[:-1] if log.exists() else []
    return sum('"loss"' in line for line in lines)


def losses(run):
    lines = (run / "log.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def mpiexec(*args):
    return subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "minitransformer", *args],
                          capture_output=True, text=True, timeout=LIMIT, env=ENV)


def terminated(command, run, pid_of):
    """Start ``command``, SIGTERM ``pid_of(child)`` once the run has logged 3 steps, and
    return (exit status, standard error)."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=ENV)
    try:
        deadline = time.monotonic() + LIMIT
        while steps_logged(run) < 3:
            assert child.poll() is None, f"the run ended early: {child.communicate()}"
            assert time.monotonic() < deadline, "the run never reached step 3"
            time.sleep(0.05)
        os.kill(pid_of(child), signal.SIGTERM)
        _, err = child.communicate(timeout=LIMIT)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, err


@pytest.mark.parametrize("receiver", ["mpiexec", "rank 1"])
def test_sigterm_stops_both_processes_after_one_step_and_resume_repeats_the_losses(
        tmp_path, receiver):
    corpus, run, pid_file = write_corpus(tmp_path / "corpus"), tmp_path / "run", tmp_path / "pid"
    endless = train(corpus, run, "--max-steps", "100000", "--eval-every", "100000")
    rank_0 = [sys.executable, "-m", "minitransformer", *endless]
    rank_1 = [sys.executable, "-c", WITH_PID, str(pid_file), *endless]
    if receiver == "mpiexec":
        status, err = terminated([MPIEXEC, "-n", "2", *rank_0], run, lambda child: child.pid)
        why = "SIGTERM"
    else:
        status, err = terminated([MPIEXEC, "-n", "1", *rank_0, ":", "-n", "1", *rank_1], run,
                                 lambda child: int(pid_file.read_text()))
        why = "another process of the run was asked to stop"
    assert status == 143, err
    step = max(losses(run))             # rank 0 logged no step after the one saved
    last = run / "checkpoints" / "last.npz"
    assert (f"minitransformer train (rank 0 of 2): stopped at step {step} ({why}); the "
            f"checkpoint of step {step} is {last}: continue with --resume.") in err
    assert "Traceback" not in err and "MPI_Abort" not in err
    assert load_checkpoint(last).state["trainer"]["step"] == step
    # resumed by two processes, the losses of two processes that were never stopped
    resumed = mpiexec(*train(corpus, run, "--resume", "--max-steps", str(step + 2)))
    assert resumed.returncode == 0, resumed.stderr
    whole = mpiexec(*train(corpus, tmp_path / "whole", "--max-steps", str(step + 2)))
    assert whole.returncode == 0, whole.stderr
    assert losses(run) == losses(tmp_path / "whole")


def test_a_log_rank_0_cannot_write_ends_both_processes_in_one_sentence(tmp_path):
    corpus, run = write_corpus(tmp_path / "corpus"), tmp_path / "run"
    command = train(corpus, run, "--max-steps", "10", "--eval-every", "2")
    result = subprocess.run([MPIEXEC, "-n", "1", sys.executable, "-c", READ_ONLY_LOG, *command,
                             ":", "-n", "1", sys.executable, "-m", "minitransformer", *command],
                            capture_output=True, text=True, timeout=LIMIT, env=ENV)
    assert result.returncode != 0
    last = run / "checkpoints" / "last.npz"
    assert (f"minitransformer train (rank 0 of 2): could not write the log {run / 'log.jsonl'} "
            f"at step 3: its file system is read-only (Read-only file system); the checkpoint "
            f"of step 2 ({last}) is intact: make it writable again and continue with --resume."
            ) in result.stderr
    assert "Traceback" not in result.stderr
    assert load_checkpoint(last).state["trainer"]["step"] == 2
