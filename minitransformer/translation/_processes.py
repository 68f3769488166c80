"""Decoding shares on worker processes: the second core without Python's lock.

A search on several CPU cores splits the batch's sentences into shares, one per core
(``decode._on_cores``). On threads of one process the shares take turns at Python's lock,
which every NumPy call lets go of and takes back: two greedy decodings at once on two threads
took 1.20× the time of one alone, on two processes 0.99× (bench/decode_gil.py on the Xeon).
So the calling thread decodes the first share and each other share goes to a worker process
of its own, started once and kept:

    parent                                   a worker (a Python running serve())
    model's weights -> one file in /dev/shm  maps the file read-only: a model of the same
      (again whenever a weight changed)        configuration whose parameters view it
    share i: source ids, limits, search  ->  the same search on that share, one thread
    its own share meanwhile              <-  the share's results (JSON)

Nothing is pickled and no code is sent: messages are JSON headers and raw arrays, and the
worker runs only this module (a worker made by ``multiprocessing`` would import the user's
own script again). The results are those of the threads' shares (the same code, weights and
single-threaded BLAS; tests check it). A worker starting up (half a second) leaves the next
batches on threads until it is ready; one that fails is stopped, its share decoded on a
thread instead, with one warning, and later searches use threads.
MINITRANSFORMER_DECODE_PROCESSES=0 (or ``set_decode_processes(False)``) keeps every share on
threads.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
from typing import Any

import numpy as np

from .. import backend

_wanted = os.environ.get("MINITRANSFORMER_DECODE_PROCESSES", "1").strip().lower() not in {
    "0", "false", "no", "off"}
_HEADER = struct.Struct("<Q")  # each message: its JSON's length, the JSON, the arrays' bytes


def set_decode_processes(on: bool) -> None:
    """Decode the shares of a search on worker processes (``True``, the default) or on
    threads of this process (``False``; workers already started wait, idle, for ``True``)."""
    global _wanted
    if not isinstance(on, bool):
        raise TypeError(f"set_decode_processes takes True or False, got {on!r}.")
    _wanted = on


def get_decode_processes() -> bool:
    return _wanted


# ----------------------------------------------------------------------------- messages

def _send(stream: Any, header: dict, *arrays: np.ndarray) -> None:
    header = dict(header, arrays=[[a.shape, a.dtype.str] for a in arrays])
    data = json.dumps(header).encode()
    stream.write(_HEADER.pack(len(data)) + data)
    for array in arrays:
        stream.write(np.ascontiguousarray(array).tobytes())
    stream.flush()


def _receive(stream: Any) -> tuple[dict, list[np.ndarray]]:
    """One message: (header, arrays); EOFError when the other side has gone."""
    head = _read(stream, _HEADER.size)
    header = json.loads(_read(stream, _HEADER.unpack(head)[0]))
    arrays = []
    for shape, dtype in header.pop("arrays"):
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        arrays.append(np.frombuffer(_read(stream, count * dtype.itemsize),
                                    dtype=dtype).reshape(shape))
    return header, arrays


def _read(stream: Any, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("the other end of the pipe closed")
    return data


# ----------------------------------------------------------------------------- the results

def _encode(results: list) -> list:
    """A share's results as JSON values: token lists, (tokens, log-probabilities) pairs, or
    lists of Hypothesis (their fields in order)."""
    from .decode import Hypothesis

    def encode(item: Any) -> Any:
        if isinstance(item, Hypothesis):
            return {"hypothesis": [item.tokens, item.token_log_probs, item.log_prob,
                                   item.score, item.finished]}
        if isinstance(item, tuple):
            return {"pair": list(item)}
        if isinstance(item, list):
            return [encode(x) for x in item]
        return item
    return encode(results)


def _decode(values: list) -> list:
    from .decode import Hypothesis

    def decode(item: Any) -> Any:
        if isinstance(item, dict):
            if "hypothesis" in item:
                return Hypothesis(*item["hypothesis"])
            return tuple(item["pair"])
        if isinstance(item, list):
            return [decode(x) for x in item]
        return item
    return decode(values)


# ----------------------------------------------------------------------------- the parent

class _Worker:
    """One worker process and the pipes to it."""

    def __init__(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", MINITRANSFORMER_DECODE_PROCESSES="0")
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.ready = False
        self.weights: tuple | None = None   # (configuration, arrays) the worker holds

    def poll_ready(self) -> bool:
        """Whether the worker has started (its first message), without waiting."""
        if not self.ready and self.process.poll() is None:
            if select.select([self.process.stdout], [], [], 0)[0]:
                header, _ = _receive(self.process.stdout)
                self.ready = header.get("ready", False)
        return self.ready

    def send(self, header: dict, *arrays: np.ndarray) -> None:
        _send(self.process.stdin, header, *arrays)

    def receive(self) -> tuple[dict, list[np.ndarray]]:
        return _receive(self.process.stdout)

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_workers: list[_Worker] = []
_lock = threading.Lock()     # one search at a time uses the workers; others take threads
_failed = False              # a worker failed: threads from then on


def workers_for(n_shares: int) -> list[_Worker] | None:
    """n_shares - 1 ready workers, reserved for the caller (``release`` them), or None:
    processes switched off, a worker failed before, another search using them, or they are
    still starting (they are started here on the first call)."""
    if not _wanted or _failed or n_shares < 2 or not _lock.acquire(blocking=False):
        return None
    try:
        while len(_workers) < n_shares - 1:
            _workers.append(_Worker())
        ready = [w for w in _workers if w.poll_ready()]
    except (OSError, EOFError, ValueError) as exc:
        _fail(exc)
        _lock.release()
        return None
    if len(ready) < n_shares - 1:
        _lock.release()
        return None
    return ready[:n_shares - 1]


def release() -> None:
    _lock.release()


def run_share(worker: _Worker, model: Any, search: str, src: np.ndarray, limits: np.ndarray,
              args: list) -> None:
    """Send ``search`` over the share (src, limits) to ``worker``; ``collect`` the results."""
    from ..functional import _compiled, _layout

    _load_weights(worker, model)
    # the caller's kernels and weight layout, so that the worker's share rounds as its own
    held = [_layout.copy_rows(p.data) for p in model.parameters() if p.ndim == 2]
    worker.send({"search": search, "args": args, "compiled": _compiled.get_compiled_kernels(),
                 "copy_rows": min((r for r in held if r is not None),
                                  default=_layout.MIN_COPY_ROWS)}, src, limits)


def collect(worker: _Worker) -> list:
    header, _ = worker.receive()
    if "error" in header:
        raise RuntimeError(f"a decoding worker process failed: {header['error']}")
    return _decode(header["results"])


def fail(exc: BaseException) -> None:
    """A worker failed: stop them all, and decode on threads from now on."""
    _fail(exc)


def _fail(exc: BaseException) -> None:
    global _failed
    if not _failed:
        warnings.warn(f"decoding on worker processes stopped ({type(exc).__name__}: {exc}); "
                      "searches use threads from now on.", RuntimeWarning, stacklevel=3)
    _failed = True
    shutdown()


def shutdown() -> None:
    """Stop the worker processes (at exit, or when processes are switched off)."""
    while _workers:
        _workers.pop().stop()


atexit.register(shutdown)


def _load_weights(worker: _Worker, model: Any) -> None:
    """Give ``worker`` the model's current weights, unless it has them already: one file of
    them all, which the worker maps read-only and which is deleted once it has. This process
    keeps its own read-only mapping of the file, to compare the weights with at every search
    (a few milliseconds): a weight written in place (``w.data[...] = ...``) counts no version."""
    named = [(name, backend.to_numpy(p.data)) for name, p in model.named_parameters()]
    config = model.config.to_dict()
    if worker.weights is not None and _same_weights(worker.weights, config, named):
        return
    layout, offset = [], 0
    for name, array in named:
        layout.append([name, offset, list(array.shape), array.dtype.str])
        offset += -(-array.nbytes // 64) * 64   # each array 64-byte aligned
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    handle, path = tempfile.mkstemp(prefix="minitransformer-weights-", dir=folder)
    worker.weights = None
    try:
        with os.fdopen(handle, "wb") as file:
            file.truncate(max(offset, 1))
            for (_, array), (_, start, _, _) in zip(named, layout, strict=True):
                file.seek(start)
                file.write(np.ascontiguousarray(array).tobytes())
        mapped = np.memmap(path, mode="r")
        dtype = named[0][1].dtype.name if named else "float32"
        worker.send({"weights": path, "config": config, "layout": layout, "dtype": dtype})
        header, _ = worker.receive()
        if "error" in header:
            raise RuntimeError(f"a decoding worker process could not load the weights: "
                               f"{header['error']}")
    finally:
        os.unlink(path)  # the mappings keep the memory until they let go
    worker.weights = (config, [(name, _view(mapped, start, shape, dtype))
                               for name, start, shape, dtype in layout])


def _same_weights(sent: tuple, config: dict, named: list) -> bool:
    """Whether the worker's model (its configuration, and its weights as mapped here) is
    the model of ``config`` with the weights ``named``."""
    config_sent, arrays_sent = sent
    return (config_sent == config and len(arrays_sent) == len(named)
            and all(name == name_sent and array.shape == held.shape
                    and array.dtype == held.dtype and np.array_equal(array, held)
                    for (name, array), (name_sent, held) in zip(named, arrays_sent,
                                                                  strict=True)))


def _view(mapped: np.ndarray, offset: int, shape: list, dtype: str) -> np.ndarray:
    """The array of ``shape`` and ``dtype`` at byte ``offset`` of the mapped file."""
    dtype = np.dtype(dtype)
    if not int(np.prod(shape, dtype=np.int64)):
        return np.empty(shape, dtype)
    return np.ndarray(shape, dtype, mapped, offset)


# ----------------------------------------------------------------------------- the worker

def serve() -> None:
    """The worker's loop: weights and searches from stdin, answers on stdout, until stdin
    closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    from ..autograd.grad_mode import no_grad
    from ..autograd.tensor import Tensor
    from ..functional import _blocks, _compiled
    from ..functional._layout import frozen_weights
    from ..nn.config import TransformerConfig
    from ..nn.transformer import Transformer
    from . import decode

    _blocks.set_threads(1)
    searches = {"greedy": decode._greedy, "beam": decode._beam_search}
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries messages only
    _send(stdout, {"ready": True})
    model, session, session_rows = None, contextlib.ExitStack(), None
    while True:
        try:
            header, arrays = _receive(stdin)
        except EOFError:
            return
        try:
            if "weights" in header:
                session.close()
                mapped = np.memmap(header["weights"], mode="r")
                with backend.default_dtype(header["dtype"]):  # its tables in the weights' dtype
                    model = Transformer(TransformerConfig.from_dict(header["config"])).eval()
                params = dict(model.named_parameters())
                for name, offset, shape, dtype in header["layout"]:
                    params[name].data = _view(mapped, offset, shape, dtype)
                session, session_rows = contextlib.ExitStack(), None
                _send(stdout, {"loaded": True})
            else:
                src, limits = arrays
                _compiled.set_compiled_kernels(header["compiled"])  # the caller's kernels
                if header["copy_rows"] != session_rows:  # its weights' layout: kept copies
                    session.close()                      # while the caller's rule holds
                    session, session_rows = contextlib.ExitStack(), header["copy_rows"]
                    session.enter_context(frozen_weights(
                        [p.data for p in model.parameters()], copy_rows=session_rows))
                with no_grad():
                    results = searches[header["search"]](model, Tensor(src), limits,
                                                         *header["args"])
                _send(stdout, {"results": _encode(results)})
        except Exception as exc:  # the parent raises it, with the message
            _send(stdout, {"error": f"{type(exc).__name__}: {exc}"})
