"""Train the `small` Transformer on Multi30k German->English for a fixed wall-clock budget.

    python bench/multi30k.py            # 45 minutes; bench/results/multi30k.<machine>/
    python bench/multi30k.py --minutes 2 --out /tmp/smoke   # a quick smoke run
    mpiexec -n 2 python bench/multi30k.py   # two processes: bench/results/multi30k-mpi2.<machine>/

The recipe is the one of the PyTorch reference it is compared with: post-LN, d_model 256, 3+3
layers, 4 heads, d_ff 1024, dropout 0.1, a joint BPE vocabulary of 8,000 with three-way tied
embeddings (7.58M parameters), label smoothing 0.1, Adam (0.9, 0.98, 1e-9) with the paper's
schedule at factor 0.7 and 800 warmup steps, batches of at most 4,000 padded tokens. Training
and a validation after every epoch (loss and greedy BLEU on the 1,014 validation sentences)
share the budget. Then test_2016_flickr is translated with greedy and beam-4 search by the
last checkpoint, the best (highest validation BLEU: ``select_by="bleu"``), the average of the
last five epoch checkpoints and the average of the five of highest validation BLEU
(``keep_best``; the final model is whichever of the averages and the best checkpoint has the
highest validation BLEU, as ``minitransformer train --select-by bleu`` picks it), and scored with
sacreBLEU (13a, cased, detokenized). Everything measured is written to --out: the training
log, a JSON summary, the translations (one file per decoding) and a plot of the curves.

Under ``mpiexec -n N`` the same recipe trains on N processes (docs/distributed.md): each
takes batches of at most 4,000 / N padded tokens (``--max-tokens``), so that a step still
holds about 4,000 tokens, and the schedule and the steps per epoch stay about the
single-process recipe's; rank 0 validates with the others' help, then translates and scores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import minitransformer as mt  # first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads

# isort: split
from machine import commit, kind, machine

from minitransformer import viz
from minitransformer.data.batching import TokenBatcher
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.distributed import threads_per_process, world
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.checkpoint import load_checkpoint, restore_model
from minitransformer.translation.corpus import load_corpus, prepare, prepare_corpus
from minitransformer.translation.scoring import score
from minitransformer.translation.training import TrainConfig, Trainer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED), help="a Multi30k folder")
    parser.add_argument("--minutes", type=float, default=45.0)
    parser.add_argument("--out", help="results folder (default bench/results/multi30k.<machine>"
                                      ", multi30k-mpi<N>.<machine> with N processes)")
    parser.add_argument("--max-tokens", type=int,
                        help="padded tokens per batch (default 4000 / processes)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    comm = world()
    if comm.size > 1:
        mt.set_num_threads(threads_per_process(comm))
    name = "multi30k" if comm.size == 1 else f"multi30k-mpi{comm.size}"
    out = Path(args.out or Path(__file__).parent / "results" / f"{name}.{kind()}")
    max_tokens = args.max_tokens or 4000 // comm.size
    if not Path(args.data).is_dir():
        sys.exit(f"no Multi30k folder at {args.data}: get one with "
                 "`minitransformer data multi30k --dest DIR` and pass --data DIR.")

    corpus = load_corpus(args.data, "de", "en")
    started = time.perf_counter()
    if comm.rank == 0:
        tokenizer, data, n_dropped = prepare(corpus, vocab_size=8000, max_len=100)
    if comm.size > 1:  # rank 0's vocabulary for every process
        shared = comm.broadcast_bytes(tokenizer.to_bytes() if comm.rank == 0 else None)
        if comm.rank != 0:
            tokenizer = Tokenizer.from_bytes(shared)
            prepared = prepare_corpus(corpus, 8000, 100, tokenizer)
            data, n_dropped = prepared.data, prepared.train_dropped.total
    tokenizer_seconds = time.perf_counter() - started
    mt.manual_seed(args.seed)
    config = TransformerConfig.named("small", tokenizer.vocab_size)
    model = Transformer(config)
    steps_per_epoch = -(-len(TokenBatcher(data.train, max_tokens)) // comm.size)
    train_config = TrainConfig(
        max_tokens=max_tokens, warmup_steps=800, lr_scale=0.7, label_smoothing=0.1,
        time_budget=args.minutes * 60, eval_every=steps_per_epoch, bleu_sentences=1014,
        keep_last=5, keep_best=5, select_by="bleu", seed=args.seed, progress=False)
    if comm.rank == 0:
        print(f"{model.num_parameters():,} parameters, {len(data.train):,} training pairs "
              f"({n_dropped} dropped), {steps_per_epoch} steps per epoch, {comm.size} "
              f"process{'es' if comm.size > 1 else ''} x {mt.get_num_threads()} "
              f"thread{'s' if mt.get_num_threads() > 1 else ''}",
              flush=True)
    trainer = Trainer(model, tokenizer, data, train_config, out, comm)
    threads = mt.get_num_threads()  # while training
    summary = trainer.fit()
    if comm.rank != 0:  # rank 0 translates and scores the test set
        return
    if comm.size > 1:  # alone on the machine now: every core for the test translations
        mt.set_num_threads(max(1, min(8, len(os.sched_getaffinity(0)))))

    results = {
        "benchmark": "Multi30k de->en, small Transformer, fixed wall-clock budget",
        "budget_minutes": args.minutes, "seed": args.seed, "processes": comm.size,
        "threads_per_process": threads, "config": config.to_dict(),
        "train": vars(train_config), "num_parameters": model.num_parameters(),
        "tokenizer_seconds": round(tokenizer_seconds, 1), "steps": trainer.state["step"],
        "epochs": trainer.state["epoch"] + trainer.state["batch"] / steps_per_epoch,
        "train_seconds": round(trainer.state["elapsed"], 1),
        "tokens_per_s": trainer.state["tokens"] / trainer.state["elapsed"],
        "machine": machine(), "commit": commit(),
        "validations": _validations(out / "log.jsonl"), "test": {},
    }
    results["final"] = summary["final"]
    for metric in ("loss", "bleu"):
        results[f"averages_valid_{metric}"] = {name: summary.get(f"{name}_valid_{metric}")
                                               for name in ("averaged", "averaged_best")}
    for name in ("last", "averaged", "averaged-best", "best"):
        checkpoint = load_checkpoint(out / "checkpoints" / f"{name}.npz")
        results["test"].update(score_test_set(
            name, restore_model(checkpoint), Tokenizer.from_bytes(checkpoint.tokenizer_bytes),
            corpus.test, out))
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    viz.training_curves(out / "log.jsonl", out / "curves.png")
    for path in (out / "checkpoints").glob("step-*.npz"):  # keep the repository small
        path.unlink()


def score_test_set(name: str, model, tokenizer, test: list, out: Path) -> dict:
    """Greedy and beam-4 translations of ``test`` by ``model`` (checkpoint ``name``), written to
    ``out`` and scored: {"<name>.greedy": ..., "<name>.beam4": ...}, seconds included."""
    results = {}
    for decoding, beam in (("greedy", 1), ("beam4", 4)):
        t0 = time.perf_counter()
        result = score(model, tokenizer, test, beam,
                       output=out / f"test_2016_flickr.{name}.{decoding}.en")
        result["seconds"] = round(time.perf_counter() - t0, 1)
        results[f"{name}.{decoding}"] = result
        print(f"{name} {decoding}: BLEU {result['bleu']:.2f} chrF {result['chrf']:.2f}",
              flush=True)
    return results


def _validations(log: Path) -> list[dict]:
    return [json.loads(line)["validation"] for line in log.read_text().splitlines()
            if line.startswith('{"validation"')]


if __name__ == "__main__":
    main()
