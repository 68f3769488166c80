"""`minitransformer train` under faults: SIGTERM, a full disk, a NaN loss, a read-only log,
a damaged optimizer state, a run folder that cannot be created. Each ends in one sentence on
standard error, with the exit status of docs/cli.md, and the last checkpoint intact."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_cli_train import TRAIN_ARGS, write_corpus

import minitransformer.translation.training as train_module
from minitransformer import cli
from minitransformer.translation.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.translation.training import Trainer

FULL = Path("/dev/full")  # every write to it fails with ENOSPC, as on a full disk (Linux)


def steps_logged(run):
    """How many steps the log of a running run holds (whole lines only: the last one may be
    in the middle of being written)."""
    log = run / "log.jsonl"
    lines = log.read_text().split("\n")[:-1] if log.exists() else []
    return sum('"loss"' in line for line in lines)


def losses(run):
    lines = (run / "log.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def train(corpus, run, *options):
    """``minitransformer train`` on ``corpus`` into ``run``: 4 steps, validation every 2."""
    return cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                     "--out", str(run), *TRAIN_ARGS, *options])


def only_line(err):
    """The one line of standard error a refused or failed run prints."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("faults") / "corpus")


@pytest.fixture(scope="module")
def whole(corpus, tmp_path_factory):
    """The losses of an uninterrupted run of 4 steps."""
    run = tmp_path_factory.mktemp("whole") / "run"
    assert train(corpus, run) == 0
    return losses(run)


def test_sigterm_saves_the_step_it_ends_and_resume_repeats_the_uninterrupted_losses(
        corpus, whole, tmp_path, monkeypatch, capsys):
    """The signal is real, sent by the process to itself during step 3, and handled by the
    command's handler: the run finishes step 3, saves it, and exits with status 143."""
    original_step = Trainer._step

    def terminated_in_step_3(self, group):
        if self.state["step"] == 2:
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, \
                "train installed no SIGTERM handler (the signal would end the tests)"
            os.kill(os.getpid(), signal.SIGTERM)
        return original_step(self, group)

    monkeypatch.setattr(Trainer, "_step", terminated_in_step_3)
    run = tmp_path / "run"
    assert train(corpus, run) == 143
    last = run / "checkpoints" / "last.npz"
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: stopped at step 3 (SIGTERM); the checkpoint of step 3 is "
        f"{last}: continue with --resume.")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL   # the handler is gone
    assert load_checkpoint(last).state["trainer"]["step"] == 3
    assert not (run / "results.json").exists()
    monkeypatch.undo()
    assert train(corpus, run, "--resume") == 0
    assert "resumed at step 3" in capsys.readouterr().out
    assert losses(run) == whole
    assert (run / "results.json").is_file()


def test_sigterm_after_the_last_step_leaves_the_test_set_to_resume(corpus, tmp_path,
                                                                   monkeypatch, capsys):
    """Asked while the last checkpoints are averaged: training is done, the test set is not
    translated, and --resume (which validates and averages again) scores it."""
    original_average = Trainer._average

    def terminated_while_averaging(self):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, \
            "train installed no SIGTERM handler (the signal would end the tests)"
        os.kill(os.getpid(), signal.SIGTERM)
        return original_average(self)

    monkeypatch.setattr(Trainer, "_average", terminated_while_averaging)
    run = tmp_path / "run"
    assert train(corpus, run) == 143
    final = run / "checkpoints" / "final.npz"
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: stopped after training (SIGTERM), before translating the "
        f"test set; the final model is {final}: score it with --resume.")
    assert final.is_file() and not (run / "results.json").exists()
    monkeypatch.undo()
    assert train(corpus, run, "--resume") == 0
    assert (run / "results.json").is_file()


def test_sigterm_from_another_process_stops_the_command_with_status_143(corpus, tmp_path):
    """As a cluster scheduler ends a job: `kill -TERM` at whatever step the run is in."""
    run = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-m", "minitransformer", "train", "--data", str(corpus),
         "--src-lang", "xx", "--tgt-lang", "yy", "--out", str(run), *TRAIN_ARGS,
         "--max-steps", "100000", "--eval-every", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 60
        while steps_logged(run) < 3:
            assert child.poll() is None, f"the run ended early: {child.communicate()}"
            assert time.monotonic() < deadline, "the run never reached step 3"
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 143, err
    step = max(losses(run))                 # the last step logged is the one saved
    last = run / "checkpoints" / "last.npz"
    assert only_line(err) == (f"minitransformer train: stopped at step {step} (SIGTERM); the "
                              f"checkpoint of step {step} is {last}: continue with --resume.")
    assert load_checkpoint(last).state["trainer"]["step"] == step


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_during_a_save_says_so_and_the_run_resumes(corpus, whole, tmp_path,
                                                                capsys):
    run = tmp_path / "run"
    assert train(corpus, run, "--max-steps", "2") == 0
    checkpoints = run / "checkpoints"
    # the next save of step 4 by this process writes into /dev/full
    (checkpoints / f".step-0000004.npz.{os.getpid()}.tmp").symlink_to(FULL)
    capsys.readouterr()
    assert train(corpus, run, "--resume") == 1
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: could not write the checkpoint of step 4 ({checkpoints}"
        f"/step-0000004.npz): the disk is full (No space left on device); the checkpoint of "
        f"step 2 ({checkpoints / 'last.npz'}) is intact: free some space on it and continue "
        "with --resume.")
    assert load_checkpoint(checkpoints / "last.npz").state["trainer"]["step"] == 2
    assert not list(checkpoints.glob(".*.tmp"))
    assert train(corpus, run, "--resume") == 0
    assert losses(run) == whole


def test_a_nan_loss_names_the_step_and_keeps_the_last_good_checkpoint(corpus, tmp_path,
                                                                       monkeypatch, capsys):
    original_step = Trainer._step

    def poisoned(self, group):
        if self.state["step"] == 3:  # after the checkpoint of step 2, break a weight
            self.model.encoder.layers[0].feed_forward.w_1.weight.data[0, 0] = np.nan
        return original_step(self, group)

    monkeypatch.setattr(Trainer, "_step", poisoned)
    run = tmp_path / "run"
    assert train(corpus, run) == 1
    checkpoints = run / "checkpoints"
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: the loss became nan at step 4 (epoch 0), so training stopped "
        f"with the last good checkpoint in {checkpoints} untouched: lower --lr-scale or set "
        "--clip-norm.")
    last = load_checkpoint(checkpoints / "last.npz")   # refused if it held a NaN
    assert last.state["trainer"]["step"] == 2


def test_a_nan_before_the_first_checkpoint_says_there_is_nothing_to_resume(corpus, tmp_path,
                                                                          monkeypatch, capsys):
    """The message of a run stopped before it saved anything says what to do, and so do a
    second run into the same folder and --resume (each once pointed the other way)."""
    original_step = Trainer._step

    def poisoned(self, group):
        self.model.encoder.layers[0].feed_forward.w_1.weight.data[0, 0] = np.nan
        return original_step(self, group)

    monkeypatch.setattr(Trainer, "_step", poisoned)
    run = tmp_path / "run"
    assert train(corpus, run) == 1
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: the loss became nan at step 1 (epoch 0), so training stopped "
        f"before its first checkpoint, leaving nothing to resume (remove {run} and start "
        "again): lower --lr-scale or set --clip-norm.")
    monkeypatch.undo()
    for options in ((), ("--resume",)):
        assert train(corpus, run, *options) == 2
        assert only_line(capsys.readouterr().err).startswith(
            f"minitransformer train: {run} holds a run that stopped before its first "
            "checkpoint (log.jsonl, no last.npz), so there is nothing to resume; remove that "
            "folder and start again")


def test_a_run_whose_last_checkpoint_is_missing_names_the_ones_it_has(corpus, tmp_path,
                                                                      capsys):
    """Not "nothing to resume, remove the folder": that would delete good checkpoints."""
    run = tmp_path / "run"
    assert train(corpus, run) == 0
    (run / "checkpoints" / "last.npz").unlink()
    capsys.readouterr()
    assert train(corpus, run, "--resume") == 2
    line = only_line(capsys.readouterr().err)
    assert line.startswith(f"minitransformer train: {run} holds checkpoints (")
    assert "step-0000004.npz" in line and line.endswith(
        "but no last.npz, which --resume continues from; copy the one to continue from over "
        "it, or choose another --out.")


def test_resume_refuses_another_vocabulary_size(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert train(corpus, run, "--max-steps", "2") == 0
    capsys.readouterr()
    vocabulary = load_checkpoint(run / "checkpoints" / "last.npz").config.src_vocab_size
    assert train(corpus, run, "--resume", "--vocab-size", str(vocabulary + 10)) == 2
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: --vocab-size {vocabulary + 10} does not fit the run in {run}, "
        f"whose vocabulary has {vocabulary} pieces; leave --vocab-size out to resume it, or "
        "start afresh with another --out.")


def test_the_logs_disk_turning_read_only_ends_without_a_traceback(corpus, tmp_path,
                                                                  monkeypatch, capsys):
    run = tmp_path / "run"
    real_write = train_module._Log.write

    def read_only_after_step_2(log, record):  # the file system remounted read-only
        if record.get("step", 0) > 2:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_write(log, record)

    monkeypatch.setattr(train_module._Log, "write", read_only_after_step_2)
    assert train(corpus, run) == 1
    last = run / "checkpoints" / "last.npz"
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: could not write the log {run / 'log.jsonl'} at step 3: its "
        f"file system is read-only (Read-only file system); the checkpoint of step 2 ({last}) "
        "is intact: make it writable again and continue with --resume.")
    assert load_checkpoint(last).state["trainer"]["step"] == 2


def test_resume_refuses_a_non_finite_optimizer_state(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert train(corpus, run, "--max-steps", "2") == 0
    last = run / "checkpoints" / "last.npz"
    checkpoint = load_checkpoint(last)
    from minitransformer.optim import Adam
    from minitransformer.translation.checkpoint import restore_model

    model = restore_model(checkpoint)
    optimizer = Adam(model.parameters(), lr=0.0)
    optimizer.load_state_dict(checkpoint.optimizer_state)
    optimizer.m[0][...] = np.nan
    save_checkpoint(last, model, optimizer, checkpoint.tokenizer_bytes, checkpoint.state)
    capsys.readouterr()
    assert train(corpus, run, "--resume") == 2
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: {last} holds a non-finite optimizer state (NaN or infinity), "
        "first in Adam's m.0, so training cannot go on from it; resume from an earlier "
        "step-*.npz of the run (copy it over checkpoints/last.npz for `train --resume`), or "
        "start a new run.")


@pytest.mark.parametrize("out, where", [
    ("/proc/nope/run", "/proc/nope"),          # a folder no one can create
    ("{tmp}/a_file/run", "{tmp}/a_file/run"),  # a folder inside a file
])
def test_a_run_folder_that_cannot_be_created_is_refused_before_reading_data(
        out, where, tmp_path, capsys):
    """/proc/nope/run ended in FileNotFoundError's traceback."""
    (tmp_path / "a_file").write_text("")
    out, where = out.format(tmp=tmp_path), where.format(tmp=tmp_path)
    assert cli.main(["train", "--data", str(tmp_path / "no-such-corpus"), "--out", out,
                     "--no-progress"]) == 2
    line = only_line(capsys.readouterr().err)
    assert line.startswith(f"minitransformer train: cannot create the run folder --out {out} "
                           f"(creating {where} failed: ")
    assert line.endswith("); choose an --out in a folder you can write to.")
    assert not Path("/proc/nope").exists()


def test_a_run_folder_that_may_not_be_written_is_refused_before_reading_data(
        tmp_path, monkeypatch, capsys):
    (tmp_path / "run").mkdir()
    monkeypatch.setattr("os.access", lambda path, mode: False)  # as a folder of another user
    assert cli.main(["train", "--data", str(tmp_path / "no-such-corpus"), "--out",
                     str(tmp_path / "run"), "--no-progress"]) == 2
    assert only_line(capsys.readouterr().err) == (
        f"minitransformer train: the run folder --out {tmp_path / 'run'} may not be written "
        "(permission denied); choose another --out, or make it writable.")
