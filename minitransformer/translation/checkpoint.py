"""Checkpoints that lose nothing and never execute code.

One checkpoint is one ``.npz`` file holding

    model/<name>       every parameter (NumPy arrays, float32)
    optimizer/m.<i>    Adam's moments, optimizer/v.<i>
    tokenizer          the SentencePiece model's bytes (uint8), when there is one
    meta.json          JSON (as uint8 bytes): format version, model configuration, training
                       state (step, epoch, position in the epoch, seed, settings, metrics),
                       and the SHA-256 checksum of every other array

It is loaded with ``allow_pickle=False``, so opening a file can never run code, and written to
a temporary file in the same folder that is flushed to disk and then renamed over the old one:
a crash, or a SIGKILL, in the middle of a save leaves the previous checkpoint intact.

Loading verifies what it reads: every array against its checksum (a bit changed on the disk,
in a copy or by hand is reported as damage, naming the array), and every parameter finite (the
weights of a run that diverged are refused, naming the first array that holds a NaN or an
infinity, instead of translating into empty or meaningless output).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..nn.config import TransformerConfig

FORMAT = "minitransformer-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupted, or does not fit the model."""


@dataclass
class Checkpoint:
    config: TransformerConfig
    model_state: dict[str, np.ndarray]
    optimizer_state: dict[str, Any] | None = None
    tokenizer_bytes: bytes | None = None
    state: dict[str, Any] = field(default_factory=dict)  # step, epoch, seed, metrics, ...


def save_checkpoint(path: str | Path, model: Any, optimizer: Any = None,
                    tokenizer_bytes: bytes | None = None, state: dict | None = None) -> Path:
    """Write ``model`` (and optimizer, tokenizer, training state) to ``path`` atomically."""
    path = Path(path)
    if path.is_dir():  # os.replace would fail only after the whole file was written
        raise CheckpointError(f"{path} is a folder; give save_checkpoint a file name, such as "
                              f"{path / 'last.npz'}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {f"model/{k}": v for k, v in model.state_dict().items()}
    optimizer_meta = None
    if optimizer is not None:
        optimizer_state = optimizer.state_dict()
        optimizer_meta = {k: v for k, v in optimizer_state.items() if not hasattr(v, "shape")}
        arrays.update({f"optimizer/{k}": v for k, v in optimizer_state.items()
                       if hasattr(v, "shape")})
    if tokenizer_bytes is not None:
        arrays["tokenizer"] = np.frombuffer(tokenizer_bytes, dtype=np.uint8)
    meta = {"format": FORMAT, "version": VERSION, "config": model.config.to_dict(),
            "optimizer": optimizer_meta, "state": state or {},
            "checksums": {name: checksum(array) for name, array in arrays.items()}}
    arrays["meta.json"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)

    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            np.savez(file, **arrays)
            file.flush()
            os.fsync(file.fileno())  # on disk before it takes the checkpoint's name
        os.replace(temporary, path)  # atomic: readers see the old file or the new one
    finally:
        try:  # a full disk's OSError goes on; a failed clean-up must not replace it
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
    _fsync_directory(path.parent)
    return path


def checksum(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes, in hex: a changed bit changes it."""
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{array.dtype.str} {array.shape}".encode())
    digest.update(array.reshape(-1).view(np.uint8))
    return digest.hexdigest()


def first_non_finite(arrays: dict[str, np.ndarray]) -> str | None:
    """The name of the first floating-point array in ``arrays`` holding a NaN or an
    infinity, or None when every value is finite."""
    for name, array in arrays.items():
        if np.issubdtype(array.dtype, np.inexact) and not np.isfinite(array).all():
            return name
    return None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; never unpickles anything."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: check the path (a run keeps its "
                              "checkpoints in RUN/checkpoints/).")
    try:
        with path.open("rb") as file:
            signature = file.read(4)
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc}); check its "
                              "permissions.") from None
    if signature not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip archive, or an empty one
        raise CheckpointError(f"{path} is not a minitransformer checkpoint: a checkpoint is an "
                              ".npz file (a zip archive), and this file is not one; check the "
                              "path, or use another checkpoint of the run, e.g. best.npz.")
    arrays = _read_arrays(path)
    if "meta.json" not in arrays:
        raise CheckpointError(f"{path} is an .npz file but not a minitransformer checkpoint "
                              "(it has no meta.json).")
    try:
        meta = json.loads(arrays.pop("meta.json").tobytes().decode("utf-8"))
        if not isinstance(meta, dict):
            raise TypeError(f"a JSON {type(meta).__name__} where an object belongs")
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{path} has unreadable metadata ({exc}).") from None
    # the version first: another version's configuration may not parse as this one's
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CheckpointError(f"{path} has format {meta.get('format')!r} version "
                              f"{meta.get('version')!r}; this minitransformer reads {FORMAT} "
                              f"version {VERSION}.")
    try:
        for section, default in (("optimizer", None), ("state", {})):
            if not isinstance(meta.get(section, default), type(default) | dict):
                raise TypeError(f"its {section!r} is not a JSON object")
        config = TransformerConfig.from_dict(meta["config"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} has unreadable metadata ({exc}).") from None
    _verify_checksums(path, arrays, meta.get("checksums"))
    model_state = {k[len("model/"):]: v for k, v in arrays.items() if k.startswith("model/")}
    broken = first_non_finite(model_state)
    if broken is not None:
        raise CheckpointError(f"{path} holds non-finite parameters (NaN or infinity), first in "
                              f"{broken}, so the run that wrote it had diverged; use an "
                              "earlier checkpoint of the run, e.g. best.npz or an earlier "
                              "step-*.npz (for `train --resume`, copy it over "
                              "checkpoints/last.npz).")
    optimizer_state = None
    if meta.get("optimizer") is not None:
        optimizer_state = dict(meta["optimizer"])
        optimizer_state.update({k[len("optimizer/"):]: v for k, v in arrays.items()
                                if k.startswith("optimizer/")})
    tokenizer = arrays["tokenizer"].tobytes() if "tokenizer" in arrays else None
    return Checkpoint(config, model_state, optimizer_state, tokenizer, meta.get("state", {}))


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the archive at ``path``, read one by one so that a damaged one is
    named (the zip format's own CRC-32 finds most changed bits as the array is read)."""
    name = None
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {}
            for name in archive.files:
                arrays[name] = archive[name]
            return arrays
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        # NumPy's own text for a pickle suggests loading it unsafely: never pass that on
        if "pickle" in str(exc):
            reason = "it holds pickled data, which is never loaded"
        elif name is not None:
            raise CheckpointError(f"{path} is damaged: its array {name} cannot be read "
                                  f"({exc}); use another checkpoint of the run, e.g. best.npz "
                                  "or an earlier step-*.npz.") from None
        else:
            reason = str(exc)
        raise CheckpointError(f"{path} is corrupted or not a minitransformer checkpoint "
                              f"({reason}); use another checkpoint of the run, e.g. best.npz "
                              "or an earlier step-*.npz.") from None


def _verify_checksums(path: Path, arrays: dict[str, np.ndarray], checksums: Any) -> None:
    """Every array must have the checksum written with it. Checkpoints written before
    checksums were added have none (``checksums`` is None) and still load, as the same
    format version: for them only the zip format's CRC-32 guards the bytes."""
    if checksums is None:
        return
    if not isinstance(checksums, dict):
        raise CheckpointError(f"{path} has unreadable metadata (its 'checksums' is not a JSON "
                              "object).")
    for name in sorted(set(checksums) | set(arrays)):
        if name not in arrays:
            problem = "is missing, though its checksum is listed"
        elif name not in checksums:
            problem = "has no checksum, so it was added after the file was written"
        elif checksum(arrays[name]) != checksums[name]:
            problem = "does not match the checksum written with it"
        else:
            continue
        raise CheckpointError(f"{path} is damaged: its array {name} {problem}; use another "
                              "checkpoint of the run, e.g. best.npz or an earlier step-*.npz "
                              "(for `train --resume`, copy it over checkpoints/last.npz).")


def restore_model(checkpoint: Checkpoint, device: str | None = None) -> Any:
    """A Transformer built from the checkpoint's configuration holding its parameters."""
    from ..nn.transformer import Transformer

    _check_sizes(checkpoint.config, checkpoint.model_state)
    model = Transformer(checkpoint.config)
    if device is not None:
        model.to(device)
    try:
        model.load_state_dict(checkpoint.model_state)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    return model


def _check_sizes(config: TransformerConfig, model_state: dict[str, np.ndarray]) -> None:
    """The sizes in ``config`` must be those of the stored arrays, checked before a model of
    that configuration is built: a damaged or crafted file could otherwise have any amount of
    memory allocated for it. (Every other shape is checked when the arrays are loaded.)"""
    d_model, d_ff = config.d_model, config.d_ff
    expected = {"src_embed.weight": (config.src_vocab_size, d_model),
                "encoder.layers.0.feed_forward.w_1.weight": (d_ff, d_model),
                "decoder.layers.0.feed_forward.w_1.weight": (d_ff, d_model)}
    if not config.share_embeddings:
        expected["tgt_embed.weight"] = (config.tgt_vocab_size, d_model)
    if config.learned_positions:
        expected["src_positions.weight"] = (config.max_len, d_model)
    for name, shape in expected.items():
        stored = model_state.get(name)
        if stored is None or tuple(stored.shape) != shape:
            found = "is missing" if stored is None else f"has shape {tuple(stored.shape)}"
            raise CheckpointError(f"the checkpoint's parameter {name} {found}, but its "
                                  f"configuration implies {shape}: the file is damaged or was "
                                  "not written by save_checkpoint.")
    for stack in ("encoder", "decoder"):
        layers = {name.split(".")[2] for name in model_state
                  if name.startswith(f"{stack}.layers.")}
        if len(layers) != config.n_layers:
            raise CheckpointError(f"the checkpoint stores {len(layers)} {stack} layers, but its "
                                  f"configuration has n_layers={config.n_layers}: the file is "
                                  "damaged or was not written by save_checkpoint.")


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete the ``.NAME.PID.tmp`` files in ``folder`` left by saves whose process was
    killed before it could rename them (their PID no longer runs); return what was removed.
    A file whose writer still runs is left alone. Only on POSIX, where a PID can be probed
    without touching the process."""
    removed = []
    if os.name != "posix":
        return removed
    for temporary in Path(folder).glob(".*.tmp"):
        written_by = re.fullmatch(r"\..+\.(\d+)\.tmp", temporary.name)
        if written_by is None or _running(int(written_by[1])):
            continue
        temporary.unlink(missing_ok=True)
        removed.append(temporary)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, and belongs to someone else
        return True
    return True


def average_checkpoints(paths: list[str | Path]) -> Checkpoint:
    """The parameter-wise mean of several checkpoints of one model (§6.1: "we used a single
    model obtained by averaging the last 5 checkpoints"). Metadata comes from the last.

    The checkpoints are read one at a time into float64 sums, so the memory needed is that
    of the largest checkpoint and of the sums, however many are averaged; it is estimated
    from the archives' directories first (``memory.averaging_bytes``) and a job that would
    not fit is refused (``memory.MemoryLimitError``) before anything is read. The sums are
    taken in the order of ``paths`` and divided once, as ``numpy.mean`` over the stacked
    parameters does, so the mean is the same to the last bit."""
    from . import memory

    if not paths:
        raise CheckpointError("average_checkpoints needs at least one checkpoint.")
    memory.check(memory.averaging_bytes(paths), memory.available_memory("cpu"),
                 f"averaging {len(paths)} checkpoint{'s' * (len(paths) > 1)}",
                 f"{memory.free_some()} (they are read one at a time, so averaging fewer "
                 "would not help)")
    sums: dict[str, np.ndarray] = {}
    dtypes: dict[str, np.dtype] = {}
    config = None
    for path in paths:
        checkpoint = load_checkpoint(path)
        if config is None:
            config = checkpoint.config
            sums = {name: value.astype(np.float64)
                    for name, value in checkpoint.model_state.items()}
            dtypes = {name: value.dtype for name, value in checkpoint.model_state.items()}
        elif checkpoint.config != config:
            raise CheckpointError(f"cannot average {path}: its model configuration differs "
                                  f"from {paths[0]}'s.")
        elif checkpoint.model_state.keys() != sums.keys():
            different = sorted(checkpoint.model_state.keys() ^ sums.keys())[0]
            raise CheckpointError(f"cannot average {path}: its parameters differ from "
                                  f"{paths[0]}'s (first {different}); the file is damaged or "
                                  "was not written by save_checkpoint.")
        else:
            for name, value in checkpoint.model_state.items():
                np.add(sums[name], value, out=sums[name])  # float64 += float32, in place
        last = Checkpoint(checkpoint.config, {}, None, checkpoint.tokenizer_bytes,
                          checkpoint.state)
        del checkpoint  # its arrays go before the next file is read
    averaged = {}
    for name in list(sums):  # each sum freed as its mean is made
        averaged[name] = (sums.pop(name) / len(paths)).astype(dtypes[name])
    state = dict(last.state, averaged_from=[str(p) for p in paths])
    return Checkpoint(last.config, averaged, None, last.tokenizer_bytes, state)


def save_averaged(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write an averaged checkpoint (model and tokenizer, no optimizer) atomically."""
    model = restore_model(checkpoint)
    return save_checkpoint(path, model, None, checkpoint.tokenizer_bytes, checkpoint.state)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); harmless where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
