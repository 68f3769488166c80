"""Checkpoints: exact round trips, atomic writes, no pickle, clear errors, averaging."""

import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile

import numpy as np
import pytest
from killing import sigkill_when

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.checkpoint import (
    CheckpointError,
    average_checkpoints,
    load_checkpoint,
    remove_stale_temporaries,
    restore_model,
    save_checkpoint,
)

CONFIG = TransformerConfig.named("tiny", 20, d_model=16, d_ff=24)


def trained_model(seed=0):
    mt.manual_seed(seed)
    model = Transformer(CONFIG)
    optimizer = Adam(model.parameters(), lr=1e-3)
    src, tgt = np.array([[4, 5, 6, 0]]), np.array([[2, 7, 8]])
    F.cross_entropy(model(src, tgt), np.array([[7, 8, 3]]), 0.1, 0).backward()
    optimizer.step()
    return model, optimizer


def test_round_trip_restores_model_optimizer_tokenizer_and_state(tmp_path):
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer, b"tokenizer bytes",
                           {"step": 7, "note": "hello"})
    checkpoint = load_checkpoint(path)
    assert checkpoint.config == CONFIG
    assert checkpoint.tokenizer_bytes == b"tokenizer bytes"
    assert checkpoint.state == {"step": 7, "note": "hello"}
    restored = restore_model(checkpoint)
    for (name, p), (_, q) in zip(model.named_parameters(), restored.named_parameters(),
                                 strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=name)
    again = Adam(restored.parameters(), lr=0.0)
    again.load_state_dict(checkpoint.optimizer_state)
    assert again.step_count == optimizer.step_count == 1
    for m_saved, m_loaded in zip(optimizer.m, again.m, strict=True):
        np.testing.assert_array_equal(m_saved, m_loaded)


def test_saving_over_a_checkpoint_replaces_it_and_leaves_no_temporary_file(tmp_path):
    model, optimizer = trained_model()
    save_checkpoint(tmp_path / "last.npz", model, optimizer)
    save_checkpoint(tmp_path / "last.npz", model, optimizer, state={"step": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["last.npz"]
    assert load_checkpoint(tmp_path / "last.npz").state == {"step": 2}


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, optimizer = trained_model()
    save_checkpoint(tmp_path / "last.npz", model, optimizer, state={"step": 1})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "last.npz", model, optimizer, state={"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "last.npz").state == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.npz"]


KILLED_SAVE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    sys.path[:0] = sys.argv[2:]  # this folder and tests/, for test_checkpoint and killing
    from test_checkpoint import trained_model
    from minitransformer.translation.checkpoint import save_checkpoint
    path = Path(sys.argv[1])
    model, optimizer = trained_model()
    save_checkpoint(path, model, optimizer, state={"step": 1})
    real_savez = np.savez
    def hanging_savez(file, **arrays):  # half a file written, then the process is killed
        file.write(b"PK partial")
        file.flush()
        path.with_name("inside-save").touch()
        time.sleep(60)
    np.savez = hanging_savez
    save_checkpoint(path, model, optimizer, state={"step": 2})
""")


def test_a_process_killed_in_the_middle_of_a_save_leaves_the_previous_checkpoint(tmp_path):
    """SIGKILL while the new file is half written: the old one must still load whole (a save
    that wrote over the checkpoint in place would leave the half file under its name)."""
    script = tmp_path / "child.py"
    script.write_text(KILLED_SAVE)
    path = tmp_path / "last.npz"
    here = os.path.dirname(__file__)
    child = subprocess.Popen([sys.executable, str(script), str(path), here,
                              os.path.dirname(here)])
    sigkill_when(child, (tmp_path / "inside-save").exists, "the saving process")
    assert load_checkpoint(path).state == {"step": 1}
    restore_model(load_checkpoint(path))
    # the half-written temporary file stays until a later run removes it
    leftovers = list(tmp_path.glob(".last.npz.*.tmp"))
    assert [p.name for p in leftovers] == [f".last.npz.{child.pid}.tmp"]
    assert remove_stale_temporaries(tmp_path) == leftovers
    assert not list(tmp_path.glob("*.tmp")) and path.exists()


def test_temporary_files_of_running_writers_are_kept(tmp_path):
    ours = tmp_path / f".last.npz.{os.getpid()}.tmp"
    parent = tmp_path / f".best.npz.{os.getppid()}.tmp"    # a process that is still running
    other = tmp_path / ".notes.tmp"                          # not one of our temporary files
    for path in (ours, parent, other):
        path.write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == []
    assert ours.exists() and parent.exists() and other.exists()


def _edit_meta(path, edit):
    """Rewrite the checkpoint at ``path`` with ``edit`` applied to its metadata."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(arrays["meta.json"].tobytes().decode("utf-8"))
    arrays["meta.json"] = np.frombuffer(json.dumps(edit(meta)).encode("utf-8"), dtype=np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize("field, value, message", [
    ("src_vocab_size", 10**9, r"src_embed.weight has shape \(20, 16\).*implies \(1000000000, 16\)"),
    ("d_ff", 10**9, r"feed_forward.w_1.weight has shape \(24, 16\).*implies"),
    ("n_layers", 10**6, "stores 2 encoder layers.*n_layers=1000000"),
])
def test_a_configuration_its_arrays_do_not_fill_is_refused_before_building(tmp_path, field,
                                                                           value, message):
    """A damaged or crafted file must not make restore_model allocate a model of any size."""
    model, _ = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model)
    _edit_meta(path, lambda meta: {**meta, "config": {
        **meta["config"], field: value,
        **({"tgt_vocab_size": value} if field == "src_vocab_size" else {})}})
    checkpoint = load_checkpoint(path)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=message):
            restore_model(checkpoint)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10_000_000


def test_the_format_version_is_checked_before_the_configuration(tmp_path):
    """A file of another version is named as such, even when its configuration (another
    version's fields) would not parse."""
    model, _ = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model)
    _edit_meta(path, lambda meta: {**meta, "version": 2,
                                   "config": {**meta["config"], "rotary": True}})
    with pytest.raises(CheckpointError, match="version 2; this minitransformer reads"):
        load_checkpoint(path)


def test_files_are_read_without_pickle(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, **{"meta.json": np.array([{"code": "runs"}], dtype=object)})
    with pytest.raises(CheckpointError, match="corrupted or not a minitransformer checkpoint") \
            as refused:
        load_checkpoint(path)
    assert "pickled data, which is never loaded" in str(refused.value)
    assert "allow_pickle" not in str(refused.value)   # NumPy's advice to load it unsafely


def test_missing_corrupted_and_foreign_files_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nope.npz")
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer)
    data = path.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(tmp_path / "cut.npz")
    np.savez(tmp_path / "other.npz", weights=np.zeros(3))
    with pytest.raises(CheckpointError, match="has no meta.json"):
        load_checkpoint(tmp_path / "other.npz")
    # files that are no zip archive at all: text, a single .npy array, nothing
    (tmp_path / "notes.npz").write_text("junk")
    np.save(tmp_path / "array.npy", np.zeros(3))
    (tmp_path / "empty.npz").write_bytes(b"")
    for name in ("notes.npz", "array.npy", "empty.npz"):
        with pytest.raises(CheckpointError, match="is not a minitransformer checkpoint: a "
                                                  "checkpoint is an .npz file"):
            load_checkpoint(tmp_path / name)


def test_saving_to_a_folder_asks_for_a_file_name_and_writes_nothing(tmp_path):
    """It wrote the whole file, then failed to rename it with IsADirectoryError."""
    model, optimizer = trained_model()
    (tmp_path / "run").mkdir()
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(tmp_path / "run", model, optimizer)
    assert f"{tmp_path / 'run'} is a folder; give save_checkpoint a file name" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_unreadable_file_gives_a_clear_error(tmp_path, monkeypatch):
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer)

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(type(path), "open", refuse)
    with pytest.raises(CheckpointError, match="cannot be read \\(Permission denied\\); check"):
        load_checkpoint(path)


def test_a_checkpoint_of_another_configuration_does_not_load_into_a_model(tmp_path):
    model, _ = trained_model()
    checkpoint = load_checkpoint(save_checkpoint(tmp_path / "a.npz", model))
    other = Transformer(CONFIG.replace(d_model=32, d_ff=48))
    with pytest.raises(ValueError, match="shapes differ for src_embed.weight"):
        other.load_state_dict(checkpoint.model_state)


def test_a_newer_format_version_is_refused(tmp_path):
    model, _ = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model)
    with zipfile.ZipFile(path) as archive:
        arrays = {n[:-4]: np.load(archive.open(n)) for n in archive.namelist()}
    meta = json.loads(arrays["meta.json"].tobytes())
    meta["version"] = 99
    arrays["meta.json"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(path)


def test_averaging_takes_the_mean_of_every_parameter(tmp_path):
    paths = []
    for seed in range(3):
        model, _ = trained_model(seed)
        paths.append(save_checkpoint(tmp_path / f"s{seed}.npz", model, state={"seed": seed}))
    averaged = average_checkpoints(paths)
    states = [load_checkpoint(p).model_state for p in paths]
    for name, value in averaged.model_state.items():
        expected = np.mean([s[name].astype(np.float64) for s in states], axis=0)
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-9)
        assert value.dtype == np.float32
    assert averaged.state["seed"] == 2


def test_averaging_refuses_different_configurations(tmp_path):
    model, _ = trained_model()
    a = save_checkpoint(tmp_path / "a.npz", model)
    b = save_checkpoint(tmp_path / "b.npz", Transformer(CONFIG.replace(d_ff=40)))
    with pytest.raises(CheckpointError, match="configuration differs"):
        average_checkpoints([a, b])


@pytest.mark.parametrize("edit", [
    lambda meta: [meta],                                   # not an object at all
    lambda meta: {**meta, "optimizer": [1, 2]},
    lambda meta: {**meta, "state": "step 3"},
])
def test_metadata_of_the_wrong_json_types_is_explained(tmp_path, edit):
    import json
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer)
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(arrays["meta.json"].tobytes().decode("utf-8"))
    arrays["meta.json"] = np.frombuffer(json.dumps(edit(meta)).encode("utf-8"), dtype=np.uint8)
    np.savez(tmp_path / "edited.npz", **arrays)
    with pytest.raises(CheckpointError, match="has unreadable metadata"):
        load_checkpoint(tmp_path / "edited.npz")


def _rewrite(path, edit):
    """Rewrite the archive at ``path`` with ``edit`` applied to its arrays (the zip format's
    CRC-32 is computed afresh, as by any tool that rewrites an .npz)."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    np.savez(path, **edit(arrays))


def test_a_flipped_bit_is_reported_as_damage_naming_the_array(tmp_path):
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer)
    name = "decoder.layers.0.self_attn.w_q.weight"
    weights = model.state_dict()[name]
    assert weights.size > 100
    data = bytearray(path.read_bytes())
    at = data.find(weights.tobytes())
    assert at > 0 and data.find(weights.tobytes(), at + 1) < 0   # found once
    data[at + weights.nbytes // 2] ^= 0b0000_0100
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(path)
    message = str(refused.value)
    assert message.startswith(f"{path} is damaged: its array model/{name} cannot be read")
    assert message.endswith("use another checkpoint of the run, e.g. best.npz or an earlier "
                            "step-*.npz.")


@pytest.mark.parametrize("edit, problem", [
    (lambda arrays: {**arrays, "optimizer/m.2": arrays["optimizer/m.2"] * 1.0001},
     "optimizer/m.2 does not match the checksum written with it"),
    (lambda arrays: {k: v for k, v in arrays.items() if k != "tokenizer"},
     "tokenizer is missing, though its checksum is listed"),
    (lambda arrays: {**arrays, "model/extra": np.zeros(3, np.float32)},
     "model/extra has no checksum, so it was added after the file was written"),
], ids=["changed", "removed", "added"])
def test_arrays_changed_after_the_save_fail_their_checksums(tmp_path, edit, problem):
    """Rewritten with valid zip CRCs, as by a tool or by hand: only the checksums written
    with the checkpoint tell that an array is not the one saved."""
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer, b"tokenizer bytes")
    _rewrite(path, edit)
    with pytest.raises(CheckpointError, match=re.escape(f"{path} is damaged: its array "
                                                        f"{problem}; use another checkpoint")):
        load_checkpoint(path)


def test_checkpoints_written_before_checksums_still_load(tmp_path):
    model, optimizer = trained_model()
    path = save_checkpoint(tmp_path / "a.npz", model, optimizer, b"tokenizer bytes")
    _edit_meta(path, lambda meta: {k: v for k, v in meta.items() if k != "checksums"})
    checkpoint = load_checkpoint(path)
    assert checkpoint.tokenizer_bytes == b"tokenizer bytes"
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(checkpoint.model_state[name], value, err_msg=name)


def test_non_finite_parameters_are_refused_naming_the_first_array_that_holds_them(tmp_path):
    model, optimizer = trained_model()
    names = list(model.state_dict())
    first, later = names[3], names[-1]
    params = dict(model.named_parameters())
    params[later].data.flat[0] = np.nan
    params[first].data.flat[0] = np.inf
    path = save_checkpoint(tmp_path / "diverged.npz", model, optimizer)
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(path)
    assert str(refused.value) == (
        f"{path} holds non-finite parameters (NaN or infinity), first in {first}, so the run "
        "that wrote it had diverged; use an earlier checkpoint of the run, e.g. best.npz or an "
        "earlier step-*.npz (for `train --resume`, copy it over checkpoints/last.npz).")


def test_translate_refuses_a_checkpoint_of_nan_weights_in_one_sentence(tmp_path):
    """It translated into empty or meaningless output with exit status 0."""
    from minitransformer.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.train(["hello world", "ka lo mi nu", "pe ro si tu"] * 5,
                                vocab_size=30)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16,
                                                d_ff=24))
    for p in model.parameters():
        p.data[...] = np.nan
    path = save_checkpoint(tmp_path / "nan.npz", model, None, tokenizer.to_bytes())
    result = subprocess.run([sys.executable, "-m", "minitransformer", "translate",
                             "--checkpoint", str(path), "hello"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (f"minitransformer translate: {path} holds non-finite parameters "
                             "(NaN or infinity), first in src_embed.weight, so the run that "
                             "wrote it had diverged; use an earlier checkpoint of the run, e.g. "
                             "best.npz or an earlier step-*.npz (for `train --resume`, copy "
                             "it over checkpoints/last.npz).\n")
