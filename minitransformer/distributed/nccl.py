"""Reductions of GPU arrays through NCCL (``cupy.cuda.nccl``), set up over MPI.

Each process drives one GPU (chosen by its local rank, ``launch.select_gpu``). Rank 0 asks
NCCL for a unique id, MPI carries its 128 bytes to the others, and every process joins the
NCCL communicator with it. Reductions then run between the GPUs' memories on the current CUDA
stream, after the kernels that computed the gradients, with no copy to the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .communicator import Communicator, DistributedError


class NCCLCommunicator:
    def __init__(self, mpi: Communicator):
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as exc:  # CuPy built without NCCL
            raise DistributedError(f"reducing GPU arrays needs NCCL through CuPy ({exc}); "
                                   "install the GPU extra (pip install -e \".[gpu]\"), whose "
                                   "CuPy wheel loads NCCL.") from None
        self._cupy, self._nccl = cupy, nccl
        unique_id = (np.array(nccl.get_unique_id(), dtype=np.int8).tobytes()
                     if mpi.rank == 0 else None)
        unique_id = mpi.broadcast_bytes(unique_id, root=0)
        self.comm = nccl.NcclCommunicator(mpi.size, tuple(np.frombuffer(unique_id, np.int8)),
                                          mpi.rank)
        self._types = {np.dtype(np.float32): nccl.NCCL_FLOAT32,
                       np.dtype(np.float64): nccl.NCCL_FLOAT64,
                       np.dtype(np.float16): nccl.NCCL_FLOAT16}

    def allreduce_sum(self, array: Any) -> None:
        pointer = self._pointer(array)
        self.comm.allReduce(pointer, pointer, array.size, self._type(array),
                            self._nccl.NCCL_SUM, self._cupy.cuda.get_current_stream().ptr)

    def broadcast(self, array: Any, root: int) -> None:
        self.comm.bcast(self._pointer(array), array.size, self._type(array), root,
                        self._cupy.cuda.get_current_stream().ptr)

    def _pointer(self, array: Any) -> int:
        if not isinstance(array, self._cupy.ndarray) or not array.flags.c_contiguous:
            raise ValueError("NCCL reduces contiguous CuPy arrays in place; got "
                             f"{type(array).__name__}.")
        return array.data.ptr

    def _type(self, array: Any) -> int:
        try:
            return self._types[np.dtype(array.dtype)]
        except KeyError:
            raise ValueError(f"NCCL reductions here take float16, float32 or float64 arrays, "
                             f"got {array.dtype}.") from None
