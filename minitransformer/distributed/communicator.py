"""Communicators: the collective operations data-parallel training needs, and nothing more.

A communicator joins the ``size`` processes of one run; each has a ``rank`` (0 .. size-1) and
a ``local_rank`` among the processes of its machine (which GPU it takes). Every method is a
*collective*: all processes call it, in the same order, or none returns.

    allreduce_sum(array)        in place: every process ends with the sum over processes
    broadcast(array, root=0)    in place: every process ends with root's values
    allgather_json(value)       [value of rank 0, value of rank 1, ...] on every process
    broadcast_bytes(data)       root's bytes on every process
    barrier()                   returns once every process has called it
    abort(status)               ends every process of the run now (a failed rank's last act)

``SingleProcess`` is the communicator of an ordinary run: size 1, and every operation returns
at once. ``MPICommunicator`` wraps an mpi4py communicator: host (NumPy) arrays travel through
MPI; device (CuPy) arrays through NCCL (``nccl.py``) when the run has GPUs, so gradients are
reduced on the GPUs without a copy to the host. Objects travel as JSON, never pickled.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from .. import backend

ABORT_GRACE_SECONDS = 1.0


class DistributedError(RuntimeError):
    """The processes of a run cannot work together (a missing MPI, ranks that disagree)."""


class Communicator:
    """The interface; see the module's docstring."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    def allreduce_sum(self, array: Any) -> None:
        raise NotImplementedError

    def broadcast(self, array: Any, root: int = 0) -> None:
        raise NotImplementedError

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        raise NotImplementedError

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def abort(self, status: int = 1) -> None:
        raise NotImplementedError

    # objects, as JSON on top of the byte operations
    def allgather_json(self, value: Any) -> list[Any]:
        return [json.loads(part) for part in self.allgather_bytes(_json_bytes(value))]

    def broadcast_json(self, value: Any, root: int = 0) -> Any:
        data = _json_bytes(value) if self.rank == root else None
        return json.loads(self.broadcast_bytes(data, root))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"


class SingleProcess(Communicator):
    """One process: the sum over processes is the array itself."""

    def allreduce_sum(self, array: Any) -> None:
        pass

    def broadcast(self, array: Any, root: int = 0) -> None:
        _check_root(root, 1)

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        _check_root(root, 1)
        return bytes(data)

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        return [bytes(data)]

    def barrier(self) -> None:
        pass

    def abort(self, status: int = 1) -> None:
        sys.exit(status)


class MPICommunicator(Communicator):
    """The processes started by ``mpiexec``, through mpi4py (``comm``: default COMM_WORLD)."""

    def __init__(self, comm: Any = None):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED)  # the processes of this machine
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        self._device = None  # the NCCL communicator, made at the first device array

    def allreduce_sum(self, array: Any) -> None:
        if isinstance(array, np.ndarray):
            self.comm.Allreduce(self._mpi.IN_PLACE, _contiguous(array), op=self._mpi.SUM)
        else:
            self._device_comm(array).allreduce_sum(array)

    def broadcast(self, array: Any, root: int = 0) -> None:
        _check_root(root, self.size)
        if isinstance(array, np.ndarray):
            self.comm.Bcast(_contiguous(array), root=root)
        else:
            self._device_comm(array).broadcast(array, root)

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        _check_root(root, self.size)
        length = np.array([len(data) if self.rank == root else 0], dtype=np.int64)
        self.comm.Bcast(length, root=root)
        buffer = (np.frombuffer(bytes(data), dtype=np.uint8).copy() if self.rank == root
                  else np.empty(int(length[0]), dtype=np.uint8))
        self.comm.Bcast(buffer, root=root)
        return buffer.tobytes()

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        lengths = np.empty(self.size, dtype=np.int64)
        self.comm.Allgather(np.array([len(data)], dtype=np.int64), lengths)
        gathered = np.empty(int(lengths.sum()), dtype=np.uint8)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self.comm.Allgatherv(np.frombuffer(bytes(data), dtype=np.uint8),
                             [gathered, lengths, offsets, self._mpi.BYTE])
        return [gathered[o:o + n].tobytes() for o, n in zip(offsets, lengths, strict=True)]

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, status: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        # The launcher forwards this process's output through a pipe and kills every
        # process as soon as it hears of the abort, which can be before it has read the
        # pipe: a moment's pause lets the message that explains the abort reach the user.
        time.sleep(ABORT_GRACE_SECONDS)
        self.comm.Abort(status)

    def _device_comm(self, array: Any) -> Any:
        if self._device is None:
            if backend.device_of(array) != "cuda":
                raise TypeError("an MPI communicator reduces NumPy arrays through MPI and CuPy "
                                f"arrays through NCCL; got a {type(array).__name__}.")
            from .nccl import NCCLCommunicator

            self._device = NCCLCommunicator(self)
        return self._device


def _contiguous(array: np.ndarray) -> np.ndarray:
    if not array.flags.c_contiguous:
        raise ValueError("collective operations work in place on contiguous arrays; "
                         "pass np.ascontiguousarray(array) and copy the result back.")
    return array


def _check_root(root: int, size: int) -> None:
    if not 0 <= root < size:
        raise ValueError(f"root must be a rank between 0 and {size - 1}, got {root}.")


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode("utf-8")
