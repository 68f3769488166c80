"""Decoding shares on worker processes: the second core without Python's lock.

A search on several CPU cores splits the batch's sentences into shares, one per core
(``decode._on_cores``). On threads of one process the shares take turns at Python's lock,
which every NumPy call lets go of and takes back: two greedy decodings at once on two threads
took 1.20× the time of one alone, on two processes 0.99× (bench/decode_gil.py on the Xeon).
So the calling thread decodes the first share and each other share goes to a worker process
of its own, started once and kept:

    parent                                   a worker (a Python running serve())
    the weights -> one file (in /dev/shm)    maps it read-only: a Transformer of the same
      (again whenever a weight differs)        configuration whose parameters view it
    share i: source ids, limits, search  ->  the same search on that share, one thread
    its own share meanwhile              <-  the share's results (JSON), naming the request

Nothing is pickled and no code is sent: messages are JSON headers and raw arrays, and the
worker runs only this module (a worker made by ``multiprocessing`` would import the user's
own script again). With each share go the caller's compiled-kernel switch and weight layout,
so the tokens are those of the threads' shares (the scores to rounding; tests check it).
Workers still starting (about 0.2 s) leave the searches on threads until they are ready; a
worker that fails has its share decoded on the calling thread, with one warning, and later
searches use threads (until ``set_decode_processes(True)``). Any interruption while the
workers are in use stops them, so that no answer is left for another search to read.
MINITRANSFORMER_DECODE_PROCESSES=0 (or ``set_decode_processes(False)``) keeps every share on
threads, as do Windows (select() needs POSIX pipes) and frozen executables.
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
_MAX_HEADER = 2**26             # a longer "header" is not a worker's message


def set_decode_processes(on: bool) -> None:
    """Decode the shares of a search on worker processes (``True``, the default) or on
    threads of this process (``False``; workers already started wait, idle, for ``True``)."""
    global _wanted, _failed
    if not isinstance(on, bool):
        raise TypeError(f"set_decode_processes takes True or False, got {on!r}.")
    _wanted = on
    _failed = _failed and not on   # True: try again after a failure


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
    length = _HEADER.unpack(_read(stream, _HEADER.size))[0]
    if length > _MAX_HEADER:
        raise ValueError("the pipe does not carry a decoding worker's messages")
    header = json.loads(_read(stream, length))
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
                   MKL_NUM_THREADS="1", MINITRANSFORMER_DECODE_PROCESSES="0",
                   MINITRANSFORMER_DEVICE="cpu")
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.ready = False
        self.weights = 0        # the version of _sent's weights the worker holds (0: none)
        self.requests = 0       # requests sent; each answer names the one it answers

    def poll_ready(self) -> bool:
        """Whether the worker has started (its first message), without waiting; OSError if
        it ended before that (Python could not import the package there, say)."""
        if not self.ready:
            if select.select([self.process.stdout], [], [], 0)[0]:
                header, _ = _receive(self.process.stdout)
                self.ready = header.get("ready", False)
            elif self.process.poll() is not None:
                raise OSError(f"a worker process ended (exit code {self.process.returncode}) "
                              "before it started")
        return self.ready

    def ask(self, header: dict, *arrays: np.ndarray) -> int:
        self.requests += 1
        _send(self.process.stdin, dict(header, id=self.requests), *arrays)
        return self.requests

    def answer(self, request: int) -> dict:
        header, _ = _receive(self.process.stdout)
        if header.get("id") != request:
            raise RuntimeError(f"a worker answered request {header.get('id')} where "
                               f"{request} was awaited")
        if "error" in header:
            raise RuntimeError(f"a decoding worker process failed: {header['error']}")
        return header

    def stop(self, wait: float = 1.0) -> None:
        """End the worker: it ends when its input closes; killed if still running after
        ``wait`` seconds."""
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError, ValueError):
            self.process.stdout.close()


_workers: list[_Worker] = []
_lock = threading.Lock()     # one search at a time uses the workers; others take threads
_failed = False              # a worker failed: threads until set_decode_processes(True)
_sent: tuple | None = None   # (version, configuration, [(name, array mapped here)]) last sent


def run(model: Any, search: str, shares: list[tuple[np.ndarray, np.ndarray]], args: list,
        first: Any) -> list | None:
    """Every share's results: ``shares[1:]`` (source ids, limits) searched on the worker
    processes, the first by ``first()`` on this thread meanwhile; None where they cannot
    take them (switched off, another search using them, still starting, failed): then the
    caller uses threads. A share whose worker failed comes back None, for the caller to
    decode itself; every later search then uses threads."""
    workers = _reserve(len(shares))
    if workers is None:
        return None
    try:
        try:
            _load_weights(workers, model)
            header = _search_header(model, search, args)
            requests = [worker.ask(header, src, limits)
                        for worker, (src, limits) in zip(workers, shares[1:], strict=True)]
        except (OSError, EOFError, ValueError, TypeError, RuntimeError) as exc:
            _fail(exc)
            return None
        results = [first()]
        for worker, request in zip(workers, requests, strict=True):
            try:
                results.append(_decode(worker.answer(request)["results"]))
            except (OSError, EOFError, ValueError, KeyError, RuntimeError) as exc:
                _fail(exc)
                results.append(None)
        return results
    except BaseException:  # Ctrl-C, or an error in this thread's share: answers left unread
        shutdown(wait=0)
        raise
    finally:
        _lock.release()


def _reserve(n_shares: int) -> list[_Worker] | None:
    """n_shares - 1 ready workers, the lock held for the caller; or None (lock released)."""
    if (not _wanted or _failed or n_shares < 2 or os.name == "nt"  # select() needs POSIX pipes
            or getattr(sys, "frozen", False)                       # no Python to run a worker
            or not _lock.acquire(blocking=False)):
        return None
    try:
        while len(_workers) < n_shares - 1:
            _workers.append(_Worker())
        ready = [worker for worker in _workers if worker.poll_ready()]
    except (OSError, EOFError, ValueError) as exc:
        _fail(exc)
        ready = []
    except BaseException:
        _lock.release()
        shutdown(wait=0)
        raise
    if len(ready) < n_shares - 1:
        _lock.release()
        return None
    return ready[:n_shares - 1]


def _search_header(model: Any, search: str, args: list) -> dict:
    """A share's request: the search and its arguments, and the caller's compiled-kernel
    switch and weight layout (functional/_layout.py), so that the worker's share rounds as
    the caller's own would."""
    from ..functional import _compiled, _layout

    held = [_layout.copy_rows(p.data) for p in model.parameters() if p.ndim == 2]
    return {"search": search, "args": args, "compiled": _compiled.get_compiled_kernels(),
            "copy_rows": min((r for r in held if r is not None),
                             default=_layout.MIN_COPY_ROWS)}


def _fail(exc: BaseException) -> None:
    global _failed
    if not _failed:
        warnings.warn(f"decoding on worker processes stopped ({type(exc).__name__}: {exc}); "
                      "searches use threads from now on.", RuntimeWarning, stacklevel=4)
    _failed = True
    shutdown(wait=0)


def shutdown(wait: float = 1.0) -> None:
    """Stop the worker processes (at exit, or after a failure)."""
    global _sent
    while _workers:
        _workers.pop().stop(wait)
    _sent = None


def _forget_workers() -> None:
    """In a child made by fork(): the workers are the parent's. Let go of the pipes to them
    (a worker ends when the last write end of its input closes) and start afresh."""
    global _lock, _sent
    for worker in _workers:
        for pipe in (worker.process.stdin, worker.process.stdout):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()
    _workers.clear()
    _lock, _sent = threading.Lock(), None


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _load_weights(workers: list[_Worker], model: Any) -> None:
    """Give the workers the model's current weights, unless they have them already: one
    file of them all, which each worker maps read-only and which is deleted once they have.
    This process keeps its own read-only mapping of the file, to compare the weights with at
    every search (a few milliseconds for `small`): a weight written in place
    (``w.data[...] = ...``) counts no version."""
    global _sent
    named = [(name, backend.to_numpy(p.data)) for name, p in model.named_parameters()]
    config = model.config.to_dict()
    current = _sent is not None and _same_weights(_sent[1:], config, named)
    version = _sent[0] if current else _versions()
    stale = [worker for worker in workers if worker.weights != version]
    if not stale:
        return
    path, layout, mapped = _write_weights(named)
    try:
        header = {"weights": path, "config": config, "layout": layout,
                  "dtype": named[0][1].dtype.name if named else "float32"}
        requests = [worker.ask(header) for worker in stale]   # they load at once
        for worker, request in zip(stale, requests, strict=True):
            worker.answer(request)
            worker.weights = version
    finally:
        os.unlink(path)  # the mappings keep the memory until they let go
    _sent = (version, config, [(name, _view(mapped, start, shape, dtype))
                               for name, start, shape, dtype in layout])


_versions = iter(range(1, 2**62)).__next__


def _write_weights(named: list) -> tuple:
    """(the file, its layout, this process's read-only mapping of it): every
    array of ``named`` 64-byte aligned, in /dev/shm (memory) where it has room, else in the
    temporary folder."""
    layout, offset = [], 0
    for name, array in named:
        layout.append([name, offset, list(array.shape), array.dtype.str])
        offset += -(-array.nbytes // 64) * 64
    folder = None
    with contextlib.suppress(OSError):
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize > 2 * offset and os.access("/dev/shm", os.W_OK):
            folder = "/dev/shm"
    handle, path = tempfile.mkstemp(prefix="minitransformer-weights-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as file:
            file.truncate(max(offset, 1))
            for (_, array), (_, start, _, _) in zip(named, layout, strict=True):
                file.seek(start)
                file.write(np.ascontiguousarray(array).tobytes())
        mapped = np.memmap(path, mode="r")
    except BaseException:
        os.unlink(path)
        raise
    return path, layout, mapped


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
        answer = {"id": header.get("id")}
        try:
            if "weights" in header:
                session.close()
                session_rows, model = None, None
                mapped = np.memmap(header["weights"], mode="r")
                with backend.default_dtype(header["dtype"]):  # its tables in the weights' dtype
                    built = Transformer(TransformerConfig.from_dict(header["config"])).eval()
                params = dict(built.named_parameters())
                names = [name for name, *_ in header["layout"]]
                if sorted(names) != sorted(params):
                    raise ValueError("the model's parameters are not those of a Transformer "
                                     "of its configuration (weights tied by hand?)")
                for name, offset, shape, dtype in header["layout"]:
                    params[name].data = _view(mapped, offset, shape, dtype)
                model = built
                _send(stdout, dict(answer, loaded=True))
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
                _send(stdout, dict(answer, results=_encode(results)))
        except Exception as exc:  # the parent raises it, with the message
            _send(stdout, dict(answer, error=f"{type(exc).__name__}: {exc}"))
