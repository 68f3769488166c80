"""Joining a run: was this process started by ``mpiexec``, and with how many others?

``mpiexec -n 4 minitransformer train ...`` starts four processes and tells each, through its
environment, how many there are (MPICH's and Intel MPI's ``PMI_SIZE``, Open MPI's
``OMPI_COMM_WORLD_SIZE``, MVAPICH's ``MV2_COMM_WORLD_SIZE``). ``world()`` reads that: without
a launcher, or with one process, it returns ``SingleProcess`` and never imports MPI, so an
ordinary run is exactly what it was; with several, it starts MPI (mpi4py) and returns an
``MPICommunicator``.

Each process then takes its share of the machine: ``threads_per_process`` divides the cores
among the processes of one machine, and ``select_gpu`` gives each process its own GPU.
"""

from __future__ import annotations

import os
import sys

from .communicator import Communicator, DistributedError, SingleProcess

# the variables by which MPI launchers tell a process the size of its job
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
INSTALL_HINT = ('pip install -e ".[distributed]" (mpi4py, and the mpich wheel with its '
                "mpiexec) or mpi4py built against the system's MPI")

_world: Communicator | None = None


def launched_size() -> int:
    """The number of processes the launcher started (1 without a launcher)."""
    for name in SIZE_VARIABLES:
        try:
            size = int(os.environ.get(name, ""))
        except ValueError:
            continue
        if size > 0:
            return size
    return 1


def world() -> Communicator:
    """The communicator of all the processes of this run (made once)."""
    global _world
    if _world is None:
        if launched_size() == 1:
            _world = SingleProcess()
        else:
            try:
                from .communicator import MPICommunicator

                _world = MPICommunicator()
            except ImportError:
                raise DistributedError(
                    f"this process was started by an MPI launcher with {launched_size()} "
                    f"processes, but mpi4py is not installed: {INSTALL_HINT}.") from None
            _abort_on_uncaught_exceptions(_world)
    return _world


def _abort_on_uncaught_exceptions(communicator: Communicator) -> None:
    """An exception that ends one process of a run would leave the others waiting for it in
    their next collective, forever: after printing it, end them all (MPI_Abort), as
    ``python -m mpi4py`` does."""
    previous = sys.excepthook

    def hook(kind, value, trace):
        previous(kind, value, trace)
        if not issubclass(kind, KeyboardInterrupt):
            print(f"rank {communicator.rank} of {communicator.size} failed (above): ending "
                  "every process of the run.", file=sys.stderr)
        communicator.abort(1)

    sys.excepthook = hook


def threads_per_process(communicator: Communicator) -> int:
    """The threads this process should use: ``OMP_NUM_THREADS`` when set, else the cores it
    may run on (its CPU affinity) shared among the processes on its machine, at least 1."""
    from ..threads import get_num_threads

    if os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip().isdigit():
        return get_num_threads()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(get_num_threads(), cores // communicator.local_size))


def select_gpu(communicator: Communicator) -> int:
    """Make GPU ``local_rank`` this process's CUDA device; its number."""
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if communicator.local_rank >= count:
        raise DistributedError(
            f"{communicator.local_size} processes on this machine, but it has {count} "
            f"GPU{'s' if count != 1 else ''}; start at most {count} processes per machine "
            "with --device cuda (one GPU each).")
    cupy.cuda.Device(communicator.local_rank).use()
    return communicator.local_rank
