"""The distributed package inside one process: the launcher's environment, the single-process
communicator, and the GPU code path (device buffers reduced on the device, as NCCL does) run
on the strict CPU backend with a stand-in communicator."""

import sys
from pathlib import Path

import numpy as np
import pytest

# the small task of the training tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "translation"))
from train_task import make_task  # noqa: E402

import minitransformer as mt
from minitransformer import backend
from minitransformer import functional as F
from minitransformer.data.batching import batches_in_order
from minitransformer.distributed import (
    Communicator,
    DistributedError,
    SingleProcess,
    allreduce_gradients,
    allreduce_scalars,
    broadcast_parameters,
    launch,
    launched_size,
    world,
)
from minitransformer.nn import Transformer, TransformerConfig


@pytest.fixture
def fresh_world(monkeypatch):
    for name in launch.SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(launch, "_world", None)


def test_without_a_launcher_the_run_is_one_process_and_mpi_is_not_imported(fresh_world,
                                                                            monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # importing it would fail
    assert launched_size() == 1
    assert isinstance(world(), SingleProcess) and world().size == 1


@pytest.mark.parametrize("variable", ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"])
def test_the_launchers_environment_gives_the_number_of_processes(fresh_world, monkeypatch,
                                                                 variable):
    monkeypatch.setenv(variable, "4")
    assert launched_size() == 4


def test_a_launched_run_without_mpi4py_says_how_to_install_it(fresh_world, monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(DistributedError, match=r"2 processes.*mpi4py is not installed.*"
                                               r"\.\[distributed\]"):
        world()


def test_one_process_reduces_to_itself():
    comm = SingleProcess()
    array = np.arange(3.0)
    comm.allreduce_sum(array)
    assert array.tolist() == [0.0, 1.0, 2.0]
    assert allreduce_scalars([1.5, 2], comm) == [1.5, 2.0]
    assert comm.allgather_json({"a": 1}) == [{"a": 1}]
    assert comm.broadcast_json([1, "x"]) == [1, "x"]


class PeerGivenInAdvance(Communicator):
    """Rank ``rank`` of two, whose peer's side of each collective is given in advance: what
    the other process would contribute. Device arrays are reduced with device arithmetic,
    as NCCL reduces GPU buffers; the strict backend refuses any copy to the host."""

    size = 2

    def __init__(self, rank, peer_arrays):
        self.rank = rank
        self.peer = list(peer_arrays)
        self.device_calls = 0

    def allreduce_sum(self, array):
        self._count(array)
        array += self.peer.pop(0)

    def broadcast(self, array, root=0):
        self._count(array)
        if root != self.rank:
            array[...] = self.peer.pop(0)

    def _count(self, array):
        if not isinstance(array, np.ndarray):
            assert backend.device_of(array) in ("strict", "cuda")  # no copy to the host
            self.device_calls += 1


def tiny_model():
    mt.manual_seed(0)
    vocab = make_task()[0].vocab_size
    return Transformer(TransformerConfig.named("tiny", vocab, d_model=16, d_ff=32,
                                               p_dropout=0.0))


def summed_gradients(model, batches):
    for p in model.parameters():
        p.grad = None
    for batch in batches:
        logits = model(batch.src, batch.tgt_in)
        loss = F.cross_entropy(logits, batch.tgt_out, 0.1, ignore_index=model.config.pad_id)
        (loss * batch.n_tgt_tokens).backward()
    return [p.grad for p in model.parameters()]


def test_gradients_on_the_device_are_summed_on_the_device_to_the_whole_steps(device):
    if device == "cpu":
        pytest.skip("the device path: strict (CuPy-like) and cuda")
    backend.set_default_dtype("float64")
    step = batches_in_order(make_task()[1].train, 60)[:4]
    model = tiny_model()
    params = list(model.parameters())
    theirs = summed_gradients(model, step[1::2])            # what rank 1 computes
    xp = backend.get_array_module(params[0].data)
    peer = [np.ones(len(params)), xp.concatenate([g.reshape(-1) for g in theirs])]
    whole = [g.copy() for g in summed_gradients(model, step)]
    summed_gradients(model, step[0::2])                       # rank 0's share
    comm = PeerGivenInAdvance(0, peer)
    allreduce_gradients(params, comm)
    assert comm.device_calls == 1                             # one flat buffer, on the device
    for p, expected in zip(params, whole, strict=True):
        assert backend.device_of(p.grad) == device
        np.testing.assert_allclose(mt.to_numpy(p.grad), mt.to_numpy(expected), rtol=1e-12,
                                   atol=1e-14)


def test_rank_0s_weights_reach_the_others_on_the_device(device):
    if device == "cpu":
        pytest.skip("the device path: strict (CuPy-like) and cuda")
    ours, root = tiny_model(), tiny_model()
    for p in root.parameters():
        p.data += 1.0
    xp = backend.get_array_module(next(iter(root.parameters())).data)
    comm = PeerGivenInAdvance(1, [xp.concatenate([p.data.reshape(-1)
                                                  for p in root.parameters()])])
    broadcast_parameters(list(ours.parameters()), comm)
    assert comm.device_calls == 1
    for mine, sent in zip(ours.parameters(), root.parameters(), strict=True):
        assert (mt.to_numpy(mine.data) == mt.to_numpy(sent.data)).all()
