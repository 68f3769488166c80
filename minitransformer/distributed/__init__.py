"""Data-parallel training on several processes: MPI between them, NCCL between their GPUs.

``mpiexec -n N minitransformer train ...`` runs N copies of the training loop, one per
process; ``world()`` joins them. Each takes its share of every step's batches, the gradients
are summed across processes (``allreduce_gradients``), and every copy applies the same update.
Without a launcher ``world()`` is a ``SingleProcess`` and nothing changes. The training loop
that uses these is ``translation.training.Trainer``; docs/distributed.md tells the whole story.
"""

from .communicator import Communicator, DistributedError, MPICommunicator, SingleProcess
from .gradients import (
    allreduce_gradients,
    allreduce_scalars,
    broadcast_arrays,
    broadcast_parameters,
)
from .launch import launched_size, select_gpu, threads_per_process, world

__all__ = [
    "Communicator",
    "DistributedError",
    "MPICommunicator",
    "SingleProcess",
    "allreduce_gradients",
    "allreduce_scalars",
    "broadcast_arrays",
    "broadcast_parameters",
    "launched_size",
    "select_gpu",
    "threads_per_process",
    "world",
]
