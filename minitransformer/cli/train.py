"""``minitransformer train``: train a translator, then translate the test set and score it.

Under ``mpiexec -n N`` it trains one model with N processes (``minitransformer.distributed``):
rank 0 reads the files, builds the vocabulary and writes the run folder; every process trains
its share of each step. A process that fails ends the whole run (MPI_Abort) rather than
leaving the others waiting for it.

SIGTERM (what a cluster scheduler sends before it kills a job, and what MPICH's ``mpiexec``
passes on to every process) stops the run at the next step boundary with a checkpoint of that
step, exit status 143 (128 + 15, as the shell reports a process ended by SIGTERM); ``--resume``
continues it with the losses of an uninterrupted run. Ctrl-C (SIGINT) stops at once, exit
status 130, and ``--resume`` continues from the last validation's checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .values import at_least, language_code, positive_float, probability, vocabulary_size

if TYPE_CHECKING:
    from ..data.parallel import Dropped
    from ..distributed import Communicator
    from ..translation.training import Trainer, TranslationData

# What "sensible defaults" means depends on the data: the built-in task is small and trains in
# minutes; a real corpus (Multi30k) gets the `small` model and the recipe of the Multi30k
# benchmark (bench/multi30k.py): the paper's schedule at factor 0.7 with 800 warmup steps (the
# paper's 4,000 suit its batches of 25,000 tokens, six times ours), validation every epoch
# (eval_every None). The stopping rule (max_steps or max_epochs) applies only when the command
# gives none of --max-steps, --max-epochs and --time-budget.
DEFAULTS = {
    "builtin": {"config": "tiny", "vocab_size": 1000, "max_steps": 1200, "warmup": 400,
                "eval_every": 300, "lr_scale": 1.0},
    "folder": {"config": "small", "vocab_size": 8000, "max_epochs": 10, "warmup": 800,
               "eval_every": None, "lr_scale": 0.7},
}
STOPPING = ("max_steps", "max_epochs", "time_budget")
# exit statuses; a TrainingError (a non-finite loss) and SIGTERM stop every process at the
# same step, since they all see the same reduced loss and stop flag, so no process is left
# waiting; a file rank 0 cannot write (RunWriteError) ends the others with MPI_Abort
STOPPED_TOGETHER, INTERRUPTED, TERMINATED = 1, 130, 143


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "train", help="train a translation model",
        description="Train a Transformer translator (§5 of the paper: label-smoothed loss, "
                    "Adam with the warmup schedule, dropout) on the built-in task or on a "
                    "folder of parallel text, keeping the best and last checkpoints, then "
                    "translate the test set with greedy and beam search and print BLEU.")
    data = p.add_argument_group("data")
    data.add_argument("--data", default="builtin", metavar="builtin|DIR",
                      help="'builtin' (generated, no download) or a folder of {split}.{lang} "
                           "files such as `minitransformer data multi30k` writes "
                           "(default: builtin)")
    data.add_argument("--src-lang", type=language_code,
                      help="source language suffix (Multi30k: de)")
    data.add_argument("--tgt-lang", type=language_code,
                      help="target language suffix (Multi30k: en)")
    data.add_argument("--vocab-size", type=vocabulary_size,
                      help="joint BPE vocabulary size (default 1000 built-in, 8000 folders)")
    data.add_argument("--max-len", type=at_least(1), default=100,
                      help="drop training pairs with more tokens than this on either side "
                           "(default 100; at most 1023, what the positional table holds)")
    model = p.add_argument_group("model")
    model.add_argument("--config", choices=["tiny", "small", "base", "big"],
                       help="model size (default tiny built-in, small folders)")
    model.add_argument("--dropout", type=probability, help="P_drop (default: the configuration's)")
    model.add_argument("--pre-norm", action="store_true", help="pre-LN instead of post-LN")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--max-tokens", type=at_least(1), default=4000,
                     help="padded tokens per batch (default 4000)")
    opt.add_argument("--accumulate", type=at_least(1), default=1,
                     help="batches per optimizer step, for larger effective batches "
                          "(default 1)")
    opt.add_argument("--warmup", type=at_least(1), help="warmup steps of the schedule (default 400 "
                                                "built-in, 800 folders)")
    opt.add_argument("--lr-scale", type=positive_float,
                     help="factor on the schedule (default 1.0 built-in, 0.7 folders)")
    opt.add_argument("--label-smoothing", type=probability, default=0.1, help="ε_ls (default 0.1)")
    opt.add_argument("--clip-norm", type=positive_float, help="clip gradients to this global norm "
                                                     "(default: no clipping, as the paper)")
    stop = p.add_argument_group("when to stop (the first reached; with none of them given: "
                                "1200 steps built-in, 10 epochs for folders)")
    stop.add_argument("--max-steps", type=at_least(1), help="optimizer steps")
    stop.add_argument("--max-epochs", type=at_least(1), help="epochs")
    stop.add_argument("--time-budget", type=positive_float, metavar="MINUTES",
                      help="wall-clock minutes of training and validation")
    run = p.add_argument_group("run")
    run.add_argument("--out", help="run folder (default runs/<data>-<config>)")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in --out from its last checkpoint")
    run.add_argument("--eval-every", type=at_least(1),
                     help="steps between validation and checkpoints (default 300 built-in, "
                          "one epoch for folders)")
    run.add_argument("--bleu-sentences", type=at_least(0), default=500,
                     help="validation sentences translated for BLEU at each validation "
                          "(default 500; 0 for none)")
    run.add_argument("--keep-last", type=at_least(1), default=5,
                     help="step checkpoints kept and averaged at the end (default 5)")
    run.add_argument("--keep-best", type=at_least(0), default=0,
                     help="step checkpoints of the best validations also kept and averaged; "
                          "the final model is whichever of the two averages and the best "
                          "checkpoint validates best (default 0: none)")
    run.add_argument("--select-by", choices=["loss", "bleu"], default="loss",
                     help="what the best validation is, for best.npz, --keep-best and the "
                          "final model: the lowest validation loss or the highest validation "
                          "BLEU (default loss)")
    run.add_argument("--beam", type=at_least(1), default=4,
                     help="beam size of the final test translation (default 4)")
    run.add_argument("--seed", type=at_least(0), default=0, help="seed of everything (default 0)")
    run.add_argument("--device", choices=["cpu", "cuda"],
                     help="default: $MINITRANSFORMER_DEVICE, else cpu")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--cuda-graphs", action="store_true",
                     help="GPU: replay each batch shape's training step as a CUDA graph "
                          "(one process; docs/performance.md)")
    run.add_argument("--shape-multiple", type=at_least(0), default=0, metavar="M",
                     help="batches of fixed shapes: widths rounded up to a multiple of M, one "
                          "batch size per width, so that --cuda-graphs replays every step "
                          "(default 0: each batch padded to its longest pair)")
    p.set_defaults(run=run_train)


def run_train(args: argparse.Namespace) -> int:
    from .. import backend, set_num_threads
    from ..distributed import DistributedError, select_gpu, threads_per_process, world

    try:
        comm = world()
        if comm.size > 1:
            if backend.current_device() == "cuda":
                select_gpu(comm)  # one GPU per process, before anything is allocated
            else:
                set_num_threads(threads_per_process(comm))
    except DistributedError as exc:
        print(f"minitransformer train: {exc}", file=sys.stderr)
        return 2
    if comm.size == 1:
        return _train(args, comm)
    try:
        status = _train(args, comm)
    except BaseException:  # a bug: say where, then end every process of the run
        traceback.print_exc()
        print(f"minitransformer train (rank {comm.rank} of {comm.size}): this process "
              "failed (above), so every process of the run stops now; the checkpoints "
              "already written are intact, and --resume continues from the last one.",
              file=sys.stderr)
        comm.abort(1)
        raise
    if status == INTERRUPTED and comm.rank != 0:
        time.sleep(2)  # rank 0, interrupted too, says where the last checkpoint is
    if status not in (0, STOPPED_TOGETHER, TERMINATED):  # the others would wait for this
        comm.abort(status)                                 # process forever: end them too
    return status


def _train(args: argparse.Namespace, comm: Communicator) -> int:
    from .. import backend, blas, manual_seed
    from ..data.errors import DataError
    from ..data.tokenizer import Tokenizer
    from ..distributed import DistributedError
    from ..nn import Transformer, TransformerConfig
    from ..translation.checkpoint import CheckpointError, load_checkpoint
    from ..translation.corpus import check_max_len, load_corpus, prepare_corpus
    from ..translation.memory import MemoryLimitError
    from ..translation.scoring import score_test_set
    from ..translation.training import (
        RunWriteError,
        TrainConfig,
        Trainer,
        TrainingError,
        TrainingStopped,
        check_training_memory,
    )
    from ..translation.translator import beam_problem

    name = ("minitransformer train" if comm.size == 1
            else f"minitransformer train (rank {comm.rank} of {comm.size})")
    main = comm.rank == 0  # reads and writes the run folder
    kind = "builtin" if args.data == "builtin" else "folder"
    defaults = DEFAULTS[kind]
    if any(getattr(args, name) is not None for name in STOPPING):  # the command's rule alone
        defaults = {k: v for k, v in defaults.items() if k not in STOPPING}
    pick = lambda name: getattr(args, name) if getattr(args, name) is not None else (  # noqa: E731
        defaults.get(name))
    out = Path(args.out or Path("runs") / f"{Path(args.data).name}-{pick('config')}")
    problem = _cannot_create(out) if main else None
    if problem:  # found before any data is read
        print(f"{name}: {problem}", file=sys.stderr)
        return 2
    if main and out.exists() and not out.is_dir():
        print(f"{name}: --out {out} is a file, not a folder; choose another "
              "--out.", file=sys.stderr)
        return 2
    earlier = [path for path in (out / "log.jsonl", out / "checkpoints")
               if main and path.exists()]
    last = out / "checkpoints" / "last.npz"
    kept = sorted(p.name for p in last.parent.glob("*.npz")) if main and last.parent.is_dir() \
        else []
    if earlier and not last.exists() and kept:  # last.npz removed, or a save cut short
        print(f"{name}: {out} holds checkpoints ({', '.join(kept)}) but no {last.name}, which "
              "--resume continues from; copy the one to continue from over it, or choose "
              "another --out.", file=sys.stderr)
        return 2
    if earlier and not last.exists():  # stopped (a NaN, Ctrl-C) before it saved anything
        print(f"{name}: {out} holds a run that stopped before its first checkpoint "
              f"({earlier[0].name}, no {last.name}), so there is nothing to resume; remove "
              "that folder and start again, or choose another --out.", file=sys.stderr)
        return 2
    if earlier and not args.resume:  # a second run there would prune and average the first's
        print(f"{name}: {out} already holds a run ({earlier[0].name}); "
              "continue it with --resume, or start afresh with another --out (or after "
              "removing that folder).", file=sys.stderr)
        return 2
    try:
        # the length of the model's positional table, known before its vocabulary is
        positions = TransformerConfig.named(pick("config"), 1).max_len
        check_max_len(args.max_len, positions)  # before any data is read
        corpus = load_corpus(args.data, args.src_lang, args.tgt_lang, seed=args.seed)
        tokenizer = None
        if args.resume and main:
            tokenizer = Tokenizer.from_bytes(
                load_checkpoint(out / "checkpoints" / "last.npz").tokenizer_bytes)
            if args.vocab_size is not None and args.vocab_size != tokenizer.vocab_size:
                raise ValueError(f"--vocab-size {args.vocab_size} does not fit the run in {out}, "
                                 f"whose vocabulary has {tokenizer.vocab_size} pieces; leave "
                                 "--vocab-size out to resume it, or start afresh with another "
                                 "--out.")
        if main:
            prepared = prepare_corpus(corpus, pick("vocab_size"), args.max_len, tokenizer,
                                      positions)
        if comm.size > 1:  # rank 0's vocabulary, trained or resumed, for every process
            shared = comm.broadcast_bytes(prepared.tokenizer.to_bytes() if main else None)
            if not main:
                prepared = prepare_corpus(corpus, pick("vocab_size"), args.max_len,
                                          Tokenizer.from_bytes(shared), positions)
        tokenizer, data = prepared.tokenizer, prepared.data
        train_config = TrainConfig(
            max_tokens=args.max_tokens, accumulate=args.accumulate, warmup_steps=pick("warmup"),
            lr_scale=pick("lr_scale"), label_smoothing=args.label_smoothing,
            clip_norm=args.clip_norm, max_steps=pick("max_steps"),
            max_epochs=pick("max_epochs"),
            time_budget=None if args.time_budget is None else args.time_budget * 60,
            eval_every=pick("eval_every") or _steps_per_epoch(data, args, comm.size),
            bleu_sentences=args.bleu_sentences,
            keep_last=args.keep_last, keep_best=args.keep_best, select_by=args.select_by,
            seed=args.seed,
            progress=not args.no_progress,
            cuda_graphs=args.cuda_graphs, shape_multiple=args.shape_multiple)
        overrides = {"pre_norm": args.pre_norm}
        if args.dropout is not None:
            overrides["p_dropout"] = args.dropout
        manual_seed(args.seed)
        config = TransformerConfig.named(pick("config"), tokenizer.vocab_size, **overrides)
        if beam_problem(config.tgt_vocab_size, args.beam):  # found now, not after training
            raise ValueError(beam_problem(config.tgt_vocab_size, args.beam))
        # before the model is built: parameters, Adam, the largest step, validation,
        # averaging, and translating the longest test sentence with --beam (rank 0's)
        longest = max((len(tokenizer.encode(s)) for s, _ in corpus.test), default=0)
        check_training_memory(config, train_config, data, len(tokenizer.to_bytes()),
                              final_beam=args.beam if main else None,
                              final_source_len=longest)
        model = Transformer(config)
        trainer = Trainer(model, tokenizer, data, train_config, out, comm)
        if args.resume:  # before run.json is written: a refused resume changes nothing
            trainer.resume()
    except (DataError, CheckpointError, ValueError, DistributedError, RunWriteError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    train_dropped = _dropped(prepared.train_dropped, f"{args.max_len} tokens", always=True)
    valid_dropped = _dropped(prepared.valid_dropped, f"the model's {positions - 1} tokens")
    if not main:
        return _train_share(trainer, name)
    print(f"{corpus.name} {corpus.src_lang}->{corpus.tgt_lang}: {len(data.train):,} training "
          f"pairs{train_dropped}, "
          f"{len(data.valid):,} validation{valid_dropped}, {len(corpus.test):,} test; vocabulary "
          f"{tokenizer.vocab_size:,}; model '{pick('config')}' with "
          f"{model.num_parameters():,} parameters; {_where(comm)}; run folder {out}")
    if backend.current_device() == "cpu" and (note := blas.held_back()):
        print(f"note: {note}")  # with the run's setup above; stderr is for what went wrong
    try:
        out.mkdir(parents=True, exist_ok=True)
        tokenizer.save(out / "tokenizer.model")
        (out / "run.json").write_text(json.dumps(
            {"args": {k: v for k, v in vars(args).items() if k != "run"},
             "model": config.to_dict(), "train": vars(train_config)}, indent=1) + "\n")
    except OSError as exc:
        print(f"{name}: cannot write the run folder {out} ({exc.strerror or exc}); choose an "
              "--out on a disk with space that you can write to.", file=sys.stderr)
        if comm.size > 1:
            comm.abort(2)
        return 2
    if args.resume:
        print(f"resumed at step {trainer.state['step']}, epoch {trainer.state['epoch']}")
    try:
        with _stop_on_sigterm(trainer):
            trainer.fit()
    except (RunWriteError, MemoryLimitError) as exc:  # the other processes would wait
        print(f"{name}: {exc}", file=sys.stderr)
        if comm.size > 1:
            comm.abort(1)
        return 1
    except TrainingError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except TrainingStopped as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return TERMINATED
    except KeyboardInterrupt:
        if (out / "checkpoints" / "last.npz").exists():
            print(f"\ninterrupted; the last checkpoint is in {out / 'checkpoints'}; continue "
                  "with the same command and --resume.", file=sys.stderr)
        else:
            print(f"\ninterrupted before the first checkpoint; nothing to resume: remove {out} "
                  "and start again.", file=sys.stderr)
        return 130
    final = out / "checkpoints" / "final.npz"
    if trainer.stop_reason is not None:  # asked during the last validation or the average
        print(f"{name}: stopped after training ({trainer.stop_reason}), before translating "
              f"the test set; the final model is {final}: score it with --resume.",
              file=sys.stderr)
        return TERMINATED
    try:
        results = score_test_set(final, corpus.test, args.beam, out)
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    except MemoryLimitError as exc:  # memory taken since the check at the start
        print(f"{name}: {str(exc).rstrip('.')}, then score {final} with evaluate.",
              file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{name}: could not write the test set's translations or scores in {out} "
              f"({exc.strerror or exc}); the final model is {final}: free some space, or make "
              "the folder writable, and score it with --resume.", file=sys.stderr)
        return 1
    return 0


def _train_share(trainer: Trainer, name: str) -> int:
    """A process other than rank 0: train its share, and leave the files and the test set
    to rank 0."""
    from ..translation.memory import MemoryLimitError
    from ..translation.training import TrainingError, TrainingStopped

    try:
        with _stop_on_sigterm(trainer):
            trainer.fit()
    except MemoryLimitError as exc:  # this process alone: the others would wait for it
        print(f"{name}: {exc}", file=sys.stderr)
        trainer.comm.abort(1)
        return 1
    except TrainingError:  # every process sees the same loss: rank 0 says it
        return 1
    except TrainingStopped:  # every process stops after the same step: rank 0 says it
        return TERMINATED
    except KeyboardInterrupt:
        return 130
    return 0


@contextmanager
def _stop_on_sigterm(trainer: Trainer) -> Iterator[None]:
    """While the body runs, SIGTERM asks ``trainer`` to stop at the next step boundary
    (checkpointed) instead of ending the process at once. Signals reach only the main
    thread, so elsewhere (cli.main called from a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: trainer.request_stop(
        "SIGTERM"))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cannot_create(out: Path) -> str | None:
    """Why the run folder ``out`` cannot be created or written, found by creating (and
    removing) the first of its folders that does not exist yet; None when it can. (Asking
    os.access is not enough: as root it says yes to /proc, where mkdir fails.)"""
    try:
        missing = [folder for folder in (out, *out.parents) if not folder.exists()]
        if not missing:
            if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
                return (f"the run folder --out {out} may not be written (permission denied); "
                        "choose another --out, or make it writable.")
            return None
        first = missing[-1]
        first.mkdir()
        first.rmdir()
    except OSError as exc:
        where = f"creating {exc.filename} failed" if exc.filename else "it failed"
        return (f"cannot create the run folder --out {out} ({where}: {exc.strerror or exc}); "
                "choose an --out in a folder you can write to.")
    return None


def _dropped(dropped: Dropped, limit: str, always: bool = False) -> str:
    """" (3 longer than 100 tokens and 1 with an empty side dropped)", or "" when none were
    and not ``always``."""
    if not dropped.total and not always:
        return ""
    reasons = [f"{dropped.too_long:,} longer than {limit}"] if dropped.too_long or always else []
    if dropped.empty:
        reasons.append(f"{dropped.empty:,} with an empty side")
    return f" ({' and '.join(reasons)} dropped)"


def _steps_per_epoch(data: TranslationData, args: argparse.Namespace, processes: int) -> int:
    """Optimizer steps in one pass over the training pairs (the batches are the same every
    epoch; only their order changes): each step takes ``accumulate`` batches per process."""
    from ..data.batching import TokenBatcher

    batches = len(TokenBatcher(data.train, args.max_tokens, shape_multiple=args.shape_multiple))
    return max(1, math.ceil(batches / (args.accumulate * processes)))


def _where(comm: Communicator) -> str:
    """The device, and on the CPU how many threads ("cpu, 2 threads"; with several processes
    "2 processes on cpu, 1 thread each") and whether the compiled kernels run: a shared
    machine's user sees what the run takes (OMP_NUM_THREADS or set_num_threads change it)."""
    from .. import backend, get_compiled_kernels, threads

    device = backend.current_device()
    n = threads.get_num_threads()
    per_process = "one GPU" if device != "cpu" else f"{n} thread{'s' if n > 1 else ''}"
    kernels = ", compiled kernels" if device == "cpu" and get_compiled_kernels() else ""
    if comm.size == 1:
        return device if device != "cpu" else f"cpu, {per_process}{kernels}"
    return f"{comm.size} processes on {device}, {per_process} each{kernels}"
