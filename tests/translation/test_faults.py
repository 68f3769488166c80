"""Faults injected in training: a full disk during a save, the log's disk turning read-only,
a request to stop; each leaves the last checkpoint intact and a run that resumes exactly."""

import errno
import json
import os
from pathlib import Path

import pytest
from train_task import make_trainer

import minitransformer.translation.training as train_module
from minitransformer.translation.checkpoint import load_checkpoint, restore_model
from minitransformer.translation.training import RunWriteError, TrainingStopped

# a device on which every write fails with ENOSPC, as on a full disk (Linux)
FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")


def losses(run_dir):
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The losses and checkpoints of an uninterrupted run of 6 steps (validation every 2)."""
    run_dir = tmp_path_factory.mktemp("whole")
    make_trainer(run_dir, max_steps=6).fit()
    return losses(run_dir), sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def full_disk_at(run_dir, step):
    """Make the save of ``step``'s checkpoint by this process meet a full disk: the
    temporary file it writes is a link to /dev/full."""
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / f".step-{step:07d}.npz.{os.getpid()}.tmp").symlink_to(FULL)


def resume_to_the_end(run_dir):
    trainer = make_trainer(run_dir, max_steps=6)
    trainer.resume()
    trainer.fit()


@needs_dev_full
def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint_and_the_run_resumes(
        tmp_path, whole):
    run_dir = tmp_path / "run"
    full_disk_at(run_dir, 4)
    last = run_dir / "checkpoints" / "last.npz"
    with pytest.raises(RunWriteError) as stopped:
        make_trainer(run_dir, max_steps=6).fit()
    assert str(stopped.value) == (
        f"could not write the checkpoint of step 4 ({run_dir / 'checkpoints'}"
        f"/step-0000004.npz): the disk is full (No space left on device); the checkpoint of "
        f"step 2 ({last}) is intact: free some space on it and continue with --resume.")
    assert load_checkpoint(last).state["trainer"]["step"] == 2
    restore_model(load_checkpoint(last))
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["best.npz", "last.npz", "step-0000002.npz"]  # nothing half-written
    resume_to_the_end(run_dir)
    assert losses(run_dir) == whole[0]


@needs_dev_full
def test_a_full_disk_before_the_first_checkpoint_says_to_start_again(tmp_path):
    run_dir = tmp_path / "run"
    full_disk_at(run_dir, 2)
    with pytest.raises(RunWriteError, match="the disk is full .*; no checkpoint had been "
                                            "written yet: free some space on it and start "
                                            "the run again."):
        make_trainer(run_dir, max_steps=6).fit()


def test_the_logs_disk_turning_read_only_stops_training_with_the_checkpoints_intact(
        tmp_path, monkeypatch, whole):
    """The log is open from the start of the run; its file system is remounted read-only
    at step 3 (every write then fails with EROFS, which is what the injected write does)."""
    run_dir = tmp_path / "run"
    trainer = make_trainer(run_dir, max_steps=6)
    real_write = train_module._Log.write

    def read_only_from_step_3(log, record):
        if trainer.state["step"] >= 3:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(run_dir / "log.jsonl"))
        real_write(log, record)

    monkeypatch.setattr(train_module._Log, "write", read_only_from_step_3)
    with pytest.raises(RunWriteError) as stopped:
        trainer.fit()
    last = run_dir / "checkpoints" / "last.npz"
    assert str(stopped.value) == (
        f"could not write the log {run_dir / 'log.jsonl'} at step 3: its file system is "
        f"read-only (Read-only file system); the checkpoint of step 2 ({last}) is intact: "
        "make it writable again and continue with --resume.")
    assert load_checkpoint(last).state["trainer"]["step"] == 2
    monkeypatch.undo()  # writable again
    resume_to_the_end(run_dir)
    assert losses(run_dir) == whole[0]


@pytest.mark.parametrize("stop_at", [3, 4])  # between validations, and at one
def test_a_run_asked_to_stop_saves_that_step_and_resumes_with_the_uninterrupted_losses(
        tmp_path, whole, stop_at):
    run_dir = tmp_path / "run"
    trainer = make_trainer(run_dir, max_steps=6)
    original_step = trainer._step

    def asked_during(group):
        if trainer.state["step"] == stop_at - 1:
            trainer.request_stop("asked by the test")
        return original_step(group)

    trainer._step = asked_during
    with pytest.raises(TrainingStopped) as stopped:
        trainer.fit()
    last = run_dir / "checkpoints" / "last.npz"
    assert stopped.value.step == stop_at
    assert str(stopped.value) == (f"stopped at step {stop_at} (asked by the test); the "
                                  f"checkpoint of step {stop_at} is {last}: continue with "
                                  "--resume.")
    assert max(losses(run_dir)) == stop_at                 # no step past the one saved
    assert load_checkpoint(last).state["trainer"]["step"] == stop_at
    step_file = run_dir / "checkpoints" / f"step-{stop_at:07d}.npz"
    # a validation's checkpoint is not written twice; between validations, only last.npz
    assert step_file.exists() == (stop_at % 2 == 0)
    if step_file.exists():
        assert os.path.samefile(step_file, last)
    resume_to_the_end(run_dir)
    assert losses(run_dir) == whole[0]
    # the same step checkpoints, best and average as the uninterrupted run
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == whole[1]
