"""What each process of the multi-process tests runs: ``mpiexec -n 2 python ranks.py SCENARIO``.

    gradients           float64 gradients of a step split over the processes, against the
                        gradients of the whole step on one process (rank 0 prints JSON)
    trainer RUN_DIR     a short Trainer run started from different weights on each rank;
                        rank 0 prints whether the ranks' weights are bit-identical after it
    uncaught            rank 1 raises before a reduction that rank 0 waits in
    cli FAULT -- ARGS   ``minitransformer ARGS`` where rank 1 meets FAULT at step 4:
                        "raise" (an exception), "kill" (SIGKILL), "none"
"""

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "translation"))

import numpy as np  # noqa: E402
from train_task import make_task  # noqa: E402

import minitransformer as mt  # noqa: E402
from minitransformer import functional as F  # noqa: E402
from minitransformer.data.batching import batches_in_order  # noqa: E402
from minitransformer.distributed import (  # noqa: E402
    allreduce_gradients,
    allreduce_scalars,
    broadcast_parameters,
    select_gpu,
    world,
)
from minitransformer.nn import Transformer, TransformerConfig  # noqa: E402
from minitransformer.translation.training import TrainConfig, Trainer  # noqa: E402


def tiny_model(vocab_size, seed):
    mt.manual_seed(seed)
    config = TransformerConfig.named("tiny", vocab_size, d_model=16, d_ff=32, p_dropout=0.0)
    return Transformer(config)


def token_summed_backward(model, batches):
    for batch in batches:
        logits = model(batch.src, batch.tgt_in)
        loss = F.cross_entropy(logits, batch.tgt_out, 0.1, ignore_index=model.config.pad_id)
        (loss * batch.n_tgt_tokens).backward()


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(mt.to_numpy(a)).tobytes())
    return h.hexdigest()


def gradients():
    comm = world()
    if mt.backend.current_device() == "cuda":  # bench/cuda_check.sh: NCCL between GPUs
        select_gpu(comm)
    mt.set_default_dtype("float64")
    tokenizer, data = make_task()
    model = tiny_model(tokenizer.vocab_size, seed=comm.rank)  # different on each rank...
    broadcast_parameters(list(model.parameters()), comm)       # ...until rank 0's are sent
    step = batches_in_order(data.train, 60)[:5]               # 5 batches: 3 on rank 0, 2 on 1
    token_summed_backward(model, step[comm.rank::comm.size])
    allreduce_gradients(list(model.parameters()), comm)
    reduced = [p.grad.copy() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    token_summed_backward(model, step)                          # the whole step, one process
    whole = [p.grad for p in model.parameters()]
    error = max(float(np.abs(r - w).max() / max(np.abs(w).max(), 1e-300))
                for r, w in zip(reduced, whole, strict=True))
    digests = comm.allgather_json(digest(reduced))
    if comm.rank == 0:
        print(json.dumps({"relative_error": error, "same_on_every_rank": len(set(digests)) == 1,
                          "batches": [len(step[r::comm.size]) for r in range(comm.size)]}))


def trainer(run_dir):
    comm = world()
    tokenizer, data = make_task()
    model = tiny_model(tokenizer.vocab_size, seed=100 + comm.rank)  # rank 0's is sent
    config = TrainConfig(max_tokens=60, warmup_steps=10, eval_every=3, max_steps=6,
                         bleu_sentences=4, progress=False)
    Trainer(model, tokenizer, data, config, run_dir, comm).fit()
    digests = comm.allgather_json(digest(p.data for p in model.parameters()))
    if comm.rank == 0:
        print(json.dumps({"identical": len(set(digests)) == 1}))


def cli(fault, args):
    from minitransformer.cli import main

    comm = world()
    if comm.rank == 1 and fault != "none":
        original = Trainer._step

        def failing(self, group):
            # the fourth step: rank 0 has saved step 2's checkpoint (it finished step 3's
            # reduction with us) and cannot have begun step 4's (it needs ours)
            if self.state["step"] == 3:
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("an injected failure on rank 1")
            return original(self, group)

        Trainer._step = failing
    sys.exit(main(args))


if __name__ == "__main__":
    scenario = sys.argv[1]
    if scenario == "gradients":
        gradients()
    elif scenario == "trainer":
        trainer(Path(sys.argv[2]))
    elif scenario == "uncaught":
        comm = world()
        if comm.rank == 1:
            raise ValueError("an uncaught error on rank 1")
        allreduce_scalars([1.0], comm)
    elif scenario == "cli":
        cli(sys.argv[2], sys.argv[sys.argv.index("--") + 1:])
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
