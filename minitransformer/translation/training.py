"""Training a translator (§5): label-smoothed loss, Adam with warmup, safe checkpoints.

One optimizer step: ``accumulate`` token-bucketed batches are run forward and backward, each
batch's summed token loss divided by the step's number of target tokens, so that their summed
gradients are the gradient of the mean over the effective batch (exact, whatever the batches'
sizes); they are clipped to a global norm if asked, and applied by
Adam at the rate of the paper's schedule. Every ``eval_every`` steps the model is validated
(loss, and BLEU of greedy translations) and checkpointed; the best and the last checkpoints are
kept, and the last ``keep_last`` step checkpoints for averaging at the end (§6.1), and with
``keep_best`` also that many of the best validations, averaged too: a run that goes on past
its best validation (its loss rising as it overfits) averages those instead of its end when
they validate better. "Best" is by validation loss, or with ``select_by="bleu"`` by the
validation BLEU (as fairseq's ``--best-checkpoint-metric bleu``): the best checkpoint, the
kept ones and the final model alike.

Everything random in a step (dropout) is seeded from (seed, step, batch: one of the step's
accumulated batches), and the batch order from (seed, epoch), so a run resumed from a
checkpoint repeats the uninterrupted run's losses.

A run asked to stop (``request_stop``, which `minitransformer train` calls on SIGTERM) saves
a checkpoint at the next step boundary and raises ``TrainingStopped``; resumed, it repeats the
uninterrupted run's losses. A file of the run that cannot be written (a full disk, a read-only
file system) stops training with ``RunWriteError``, naming the file, the reason and the last
checkpoint, which a failed write never touches.

With several processes (``mpiexec -n N``, a ``communicator`` of size N) a step takes
``accumulate × N`` batches; process r computes batches r, r + N, ... of them (with the same
dropout seeds one process would use for those batches), their losses and gradients (each over
the step's tokens) are summed across processes, and every process applies the same update:
the arithmetic of one process with ``accumulate × N``. Validation is sharded the same way and
reduced. Rank 0 alone writes the log, the checkpoints and the progress bar.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import backend
from .. import functional as F
from ..autograd.grad_mode import no_grad
from ..data.batching import TokenBatcher, batches_in_order
from ..data.errors import DataError
from ..distributed import (
    Communicator,
    DistributedError,
    SingleProcess,
    allreduce_gradients,
    allreduce_scalars,
    broadcast_arrays,
    broadcast_parameters,
)
from ..optim import Adam, clip_grad_norm, noam_rate
from ..threads import CoreSharing, get_num_threads
from . import memory
from .checkpoint import (
    CheckpointError,
    average_checkpoints,
    first_non_finite,
    load_checkpoint,
    remove_stale_temporaries,
    save_averaged,
    save_checkpoint,
)
from .graphs import GraphedTraining
from .scoring import corpus_bleu
from .translator import translate


class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss or gradient, a file that cannot be written);
    the last good checkpoint is untouched."""


class RunWriteError(TrainingError):
    """A file of the run (the log, a checkpoint) could not be written. Only the process
    that writes files (rank 0) meets it; with several processes the others must be ended."""


class TrainingStopped(RuntimeError):
    """The run stopped where it was asked to (``Trainer.request_stop``), after saving a
    checkpoint of the step it stopped at; ``resume`` continues it exactly."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


# What "the best validation" means: the metric's key in a validation's result, and whether
# higher is better
SELECT_BY = {"loss": ("valid_loss", False), "bleu": ("valid_bleu", True)}


@dataclass
class TrainConfig:
    max_tokens: int = 4000         # padded tokens per batch (source or target side)
    accumulate: int = 1            # batches per optimizer step
    warmup_steps: int = 4000       # §5.3
    lr_scale: float = 1.0          # multiplies the schedule (the "factor")
    label_smoothing: float = 0.1   # §5.4, ε_ls
    clip_norm: float | None = None  # global gradient-norm limit; None: no clipping
    max_steps: int | None = None
    max_epochs: int | None = None
    time_budget: float | None = None  # seconds of training and validation
    eval_every: int = 500          # steps between validation and checkpoints
    bleu_sentences: int = 500      # validation sentences translated for BLEU (0: none)
    keep_last: int = 5             # step checkpoints kept, and averaged at the end
    keep_best: int = 0             # also those of the best validations, averaged too
    select_by: str = "loss"        # best validation: "loss" (lowest) or "bleu" (highest)
    seed: int = 0
    progress: bool = True
    cuda_graphs: bool = False      # the step in CUDA graphs (translation/graphs.py), GPU only
    shape_multiple: int = 0        # > 0: batches of fixed shapes (TokenBatcher), for graphs

    def __post_init__(self) -> None:
        if self.max_steps is None and self.max_epochs is None and self.time_budget is None:
            raise ValueError("give at least one of max_steps, max_epochs or time_budget, or "
                             "training would never stop.")
        for name in ("shape_multiple", "keep_best"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}.")
        for name in ("max_tokens", "accumulate", "warmup_steps", "eval_every", "keep_last",
                     "max_steps", "max_epochs"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        # a scale or a clipping norm of 0 or below would stop training or turn it around
        for name in ("lr_scale", "clip_norm", "time_budget"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be greater than 0, got {getattr(self, name)}.")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must satisfy 0 <= ε < 1, got "
                             f"{self.label_smoothing}.")
        if self.bleu_sentences < 0:
            raise ValueError(f"bleu_sentences must be at least 0, got {self.bleu_sentences}.")
        if self.select_by not in SELECT_BY:
            raise ValueError(f"select_by must be one of {', '.join(map(repr, SELECT_BY))}, "
                             f"got {self.select_by!r}.")
        if self.select_by == "bleu" and self.bleu_sentences == 0:
            raise ValueError("select_by='bleu' (--select-by bleu) picks checkpoints by the "
                             "validation BLEU, which bleu_sentences=0 (--bleu-sentences 0) "
                             "turns off; translate some validation sentences or select by "
                             "'loss'.")


@dataclass
class TranslationData:
    """Token-id pairs (no BOS/EOS) for training and validation, the validation text, and the
    languages translated (recorded in every checkpoint when known)."""

    train: list[tuple[list[int], list[int]]]
    valid: list[tuple[list[int], list[int]]]
    valid_sources: list[str] = field(default_factory=list)
    valid_references: list[str] = field(default_factory=list)
    src_lang: str | None = None
    tgt_lang: str | None = None


def training_memory(model_config: Any, config: TrainConfig, data: TranslationData,
                    tokenizer_bytes: int = 0, device: str | None = None,
                    final_beam: int | None = None, final_source_len: int = 0
                    ) -> tuple[int, int]:
    """(bytes on ``device``, bytes on the host besides) at the peak of a run: parameters,
    gradients and Adam's moments, the largest step over the run's batches, validation (its
    losses, and greedy decoding of the longest BLEU sentence; with ``select_by="bleu"`` that
    decoding again at the end for each average, beside the trained weights and the average's
    arrays), averaging the last checkpoints, and with ``final_beam`` decoding a test
    sentence of ``final_source_len`` tokens with that beam after training (``memory.py``
    derives each). On the CPU the second is 0: both are the same memory, counted in the
    first."""
    gpu, f = device == "cuda", backend.get_default_dtype().itemsize
    P = memory.parameter_count(model_config) * f
    decoding = []  # (bytes besides, sentence length, beam) of decoding besides training
    n = min(config.bleu_sentences, len(data.valid_sources), len(data.valid))
    longest = model_config.max_len - 1
    if n:
        S_valid = min(max(len(s) for s, _ in data.valid[:n]), longest)
        decoding.append((0, S_valid, 1))
        if config.select_by == "bleu":  # _average: the trained weights and the average beside
            decoding.append((2 * P, S_valid, 1))
    if final_beam:  # the final model is loaded beside the trained one
        decoding.append((P, min(final_source_len, longest), final_beam))
    after = max([extra + memory.decoding_bytes(
        model_config, 1, S, min(S + 50, model_config.max_len), beam, 0, f, gpu)
        for extra, S, beam in decoding] + [0])
    peak = memory.training_peak(model_config, _shapes(data.train, config.max_tokens,
                                                      config.shape_multiple),
                                f, tokenizer_bytes, _shapes(data.valid, config.max_tokens))
    return replace(peak, step=max(peak.step, after)).on(gpu)


def check_training_memory(model_config: Any, config: TrainConfig, data: TranslationData,
                          tokenizer_bytes: int = 0, held: int = 0, device: str | None = None,
                          final_beam: int | None = None, final_source_len: int = 0) -> None:
    """Refuse a run whose peak memory (``training_memory``) exceeds what is available, before
    it allocates more; ``held`` bytes the run holds already (a built model's parameters)
    count as available on ``device``. The MemoryLimitError says how much is needed and
    available, and a ``max_tokens`` that fits while the next one up does not (none when a
    batch of one pair does not fit)."""
    device = device or backend.current_device()
    available = memory.available_memory(device)
    host = memory.available_memory("cpu") if device == "cuda" else None

    def problem(max_tokens: int) -> tuple[int, int | None, str] | None:
        """(need, available, where) of the first place that does not fit, or None."""
        on_device, on_host = training_memory(
            model_config, replace(config, max_tokens=max_tokens), data, tokenizer_bytes,
            device, final_beam, final_source_len)
        if available is not None and on_device > available + held:
            return on_device, available + held, device
        if host is not None and on_host > host:
            return on_host, host, "cpu"
        return None

    found = problem(config.max_tokens)
    if found is None:
        return
    need, have, where = found
    # A max_tokens that fits while the next one does not (0 if none), by bisection: the need
    # mostly grows with max_tokens, but not always (the batches are cut elsewhere, and a
    # smaller bound can make a batch of longer pairs that needs more), so no smaller value is
    # promised to fit, and a larger one may (test_memory_properties.py). high + 1 is always
    # one found not to fit; 0 when 1 does not, whose batches (one pair each) are the smallest
    # any bound makes.
    low, high = 0, config.max_tokens - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if problem(mid) is None else (low, mid - 1)
    if low:
        accumulate = config.accumulate * -(-config.max_tokens // low)
        fix = (f"give --max-tokens {low} (with --accumulate {accumulate} for about as many "
               f"tokens a step), or a smaller --config")
    else:
        fix = (f"even batches of one sentence pair would not fit, so choose a smaller --config "
               f"(or drop long pairs with a lower --max-len), or {memory.free_some()}")
    memory.check(need, have, f"training a model of {memory.parameter_count(model_config):,} "
                 f"parameters on batches of {config.max_tokens:,} tokens", fix, where)


def _shapes(pairs: list[tuple[list[int], list[int]]], max_tokens: int, multiple: int = 0
            ) -> list[tuple[int, int, int]]:
    """(B, S, T) of every batch that ``TokenBatcher(pairs, max_tokens, shape_multiple=
    multiple)`` makes, as ``make_batch`` pads them, without making them (none without pairs:
    the Trainer names that problem)."""
    if not pairs:
        return []
    if multiple:
        return sorted(set(TokenBatcher(pairs, max_tokens, False, 0, multiple).shapes))
    lengths = [(max(len(s), 1), len(t) + 1) for s, t in pairs]
    shapes = set()
    for batch in TokenBatcher(pairs, max_tokens, shuffle=False).batches:
        rows = [lengths[i] for i in batch.tolist()]
        shapes.add((len(rows), max(s for s, _ in rows), max(t for _, t in rows)))
    return sorted(shapes)


class Trainer:
    def __init__(self, model: Any, tokenizer: Any, data: TranslationData, config: TrainConfig,
                 run_dir: str | Path, communicator: Communicator | None = None):
        self.model, self.tokenizer, self.data, self.config = model, tokenizer, data, config
        self.comm = communicator if communicator is not None else SingleProcess()
        self.is_main = self.comm.rank == 0  # the process that writes files and prints
        smallest = min(model.config.src_vocab_size, model.config.tgt_vocab_size)
        if smallest < tokenizer.vocab_size:  # found now, not at the first batch
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} pieces but the model's "
                             f"vocabulary only {smallest}; build the model for this tokenizer, "
                             "e.g. TransformerConfig.named(name, tokenizer.vocab_size).")
        self.run_dir = Path(run_dir)
        self.checkpoints = self.run_dir / "checkpoints"
        self.batcher = TokenBatcher(data.train, config.max_tokens, shuffle=True, seed=config.seed,
                                    shape_multiple=config.shape_multiple)
        if not data.valid:  # found now, not at the first validation, after training steps
            raise DataError("there are no validation pairs: the validation file is empty or "
                            "blank, or every pair has an empty side or is longer than the model "
                            "can encode; give a validation file with sentences in it.")
        if config.select_by == "bleu" and not data.valid_sources:
            raise DataError("select_by='bleu' picks checkpoints by the BLEU of translated "
                            "validation sentences, but the data has no validation text "
                            "(valid_sources); give it, or select by 'loss'.")
        parameters = [p.data for p in model.parameters()]
        check_training_memory(model.config, config, data, len(tokenizer.to_bytes()),
                              held=sum(a.nbytes for a in parameters),
                              device=backend.device_of(parameters[0]))
        self.optimizer = Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
        self.graphs: GraphedTraining | None = None
        if config.cuda_graphs:
            if self.comm.size > 1:  # the gradients' all-reduce runs between the graphs
                raise ValueError("CUDA graphs train in one process; leave out --cuda-graphs "
                                 "when running several processes.")
            self.graphs = GraphedTraining(model, self.optimizer, config.label_smoothing)
        self.state = {"step": 0, "epoch": 0, "batch": 0, "elapsed": 0.0, "tokens": 0,
                      "best_valid_loss": None, "seed": config.seed,
                      "processes": self.comm.size}
        self._started = time.perf_counter()  # fit() moves it back by a resumed run's time
        self.stop_reason: str | None = None  # set by request_stop, from a signal handler
        self._stopping = False               # every process agrees to stop at this step
        self._saved_step: int | None = None  # the step last.npz is known to hold
        if self.comm.size > 1:
            self._check_processes_agree()

    def request_stop(self, reason: str = "a request to stop") -> None:
        """Ask the run to stop at the next step boundary, saving a checkpoint there. It only
        sets a flag, so a signal handler may call it; with several processes, one process
        asked is enough: the flag is summed with the step's loss, and all stop together."""
        self.stop_reason = reason

    # ------------------------------------------------------------------ several processes
    def _fingerprint(self) -> dict[str, Any]:
        """What every process of a run must share, as JSON values."""
        def digest(value: Any) -> str:
            return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]

        return {"model configuration": self.model.config.to_dict(),
                "training configuration": {k: v for k, v in asdict(self.config).items()
                                           if k != "progress"},
                "vocabulary": hashlib.sha256(self.tokenizer.to_bytes()).hexdigest()[:16],
                "training pairs": digest(self.data.train),
                "validation pairs": digest(self.data.valid),
                "validation text": digest([self.data.valid_sources,
                                           self.data.valid_references]),
                "device": backend.current_device()}

    def _check_processes_agree(self) -> None:
        """Refuse, on every process at once, a run whose processes would train different
        things (another data file, vocabulary or option on one machine)."""
        everyone = self.comm.allgather_json(self._fingerprint())
        differences = []
        for rank, theirs in enumerate(everyone[1:], start=1):
            for key, value in theirs.items():
                ours = everyone[0][key]
                if value == ours:
                    continue
                if isinstance(value, dict):
                    fields = ", ".join(f"{name} {value.get(name)!r} against {ours.get(name)!r}"
                                       for name in sorted(set(value) | set(ours))
                                       if value.get(name) != ours.get(name))
                    differences.append(f"rank {rank}'s {key} ({fields})")
                else:
                    differences.append(f"rank {rank}'s {key}")
        if differences:
            raise DistributedError(
                "the processes of this run would not train the same model: "
                + "; ".join(differences) + " differ from rank 0's. Start every process with "
                "the same command, data files and installed version.")

    def _synchronise(self) -> None:
        """Give every process rank 0's weights, Adam moments and training state: at the
        start (random initialisations may differ) and after a resume (rank 0 read it)."""
        if self.comm.size > 1:
            broadcast_parameters(self.optimizer.params, self.comm)
            broadcast_arrays(self.optimizer.m + self.optimizer.v, self.comm)
            shared = self.comm.broadcast_json({"state": self.state,
                                               "adam": [self.optimizer.step_count,
                                                        self.optimizer.lr]})
            self.state.update(shared["state"])
            self.optimizer.step_count, self.optimizer.lr = shared["adam"]
        before = self.state.get("processes", self.comm.size)
        if before != self.comm.size and self.is_main:
            tqdm.write(f"resuming a run of {before} processes with {self.comm.size}: a step "
                       f"now takes {self.config.accumulate * self.comm.size} batches instead "
                       f"of {self.config.accumulate * before}, so the run goes on from the "
                       "same place in the data with a different effective batch, and its "
                       "losses will not repeat those of an uninterrupted run.")
        self.state["processes"] = self.comm.size

    # ------------------------------------------------------------------ resume
    def resume(self, path: str | Path | None = None) -> None:
        """Continue from a checkpoint (default: this run's last.npz). With several processes,
        rank 0 reads it and ``fit`` gives the others its state."""
        if not self.is_main:
            return
        path = Path(path or self.checkpoints / "last.npz")
        checkpoint = load_checkpoint(path)
        if checkpoint.config != self.model.config:
            saved, now = checkpoint.config.to_dict(), self.model.config.to_dict()
            differences = "; ".join(f"{name} {saved[name]!r} in the checkpoint, {now[name]!r} "
                                    "now" for name in saved if saved[name] != now[name])
            raise ValueError(f"the checkpoint's model configuration differs from this run's "
                             f"({differences}); resume with the same --config, --dropout, "
                             "--pre-norm and vocabulary.")
        trainer_state = checkpoint.state.get("trainer")
        if checkpoint.optimizer_state is None or not isinstance(trainer_state, dict):
            raise CheckpointError(f"{path} holds a model but no optimizer or training state "
                                  "(an averaged or exported checkpoint), so training cannot "
                                  "go on from it; resume from a run's last.npz or a step-*.npz "
                                  "(Trainer.resume(path)), or start a new run from scratch.")
        moments = {k: v for k, v in checkpoint.optimizer_state.items() if hasattr(v, "shape")}
        broken = first_non_finite(moments)
        if broken is not None:  # Adam would turn them into non-finite weights at once
            raise CheckpointError(f"{path} holds a non-finite optimizer state (NaN or "
                                  f"infinity), first in Adam's {broken}, so training cannot go "
                                  "on from it; resume from an earlier step-*.npz of the run "
                                  "(copy it over checkpoints/last.npz for `train --resume`), "
                                  "or start a new run.")
        self.model.load_state_dict(checkpoint.model_state)
        try:
            self.optimizer.load_state_dict(checkpoint.optimizer_state)
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"{path} has an incomplete optimizer state ({exc}); resume "
                                  "from another checkpoint of the run.") from None
        self.state.update(trainer_state)
        # the best checkpoints that are still there (a later part of the run, resumed from
        # here before, may have deleted some); later validations fill the free places
        self.state["kept_best"] = [[*entry, None][:3] for entry in  # (older runs: no BLEU)
                                   self.state.get("kept_best", [])
                                   if (self.checkpoints / _step_name(entry[0])).is_file()]
        if path == self.checkpoints / "last.npz":
            self._saved_step = self.state["step"]
        with self._writing(f"the log {self.run_dir / 'log.jsonl'}"):
            self._trim_log(self.state["step"])

    def _trim_log(self, step: int) -> None:
        """Drop the log's records of steps after ``step``: a run stopped after its last
        checkpoint logged steps that the resumed run computes, and logs, again."""
        path = self.run_dir / "log.jsonl"
        if not path.is_file():
            return
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                logged = record["validation"]["step"] if "validation" in record \
                    else record.get("step", 0)
            except (ValueError, TypeError, KeyError):
                continue  # the half-written last line of a killed run
            if logged <= step:
                kept.append(line + "\n")
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text("".join(kept), encoding="utf-8")
        os.replace(temporary, path)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        c, state = self.config, self.state
        self._synchronise()
        log_path = self.run_dir / "log.jsonl"
        if self.is_main:
            with self._writing(f"the run folder {self.run_dir}"):
                self.run_dir.mkdir(parents=True, exist_ok=True)
                for folder in (self.run_dir, self.checkpoints):  # what killed saves left
                    if folder.is_dir():
                        remove_stale_temporaries(folder)
        with self._writing(f"the log {log_path}"):
            log = _Log(log_path if self.is_main else None)
        bar = tqdm(total=c.max_steps, initial=state["step"],
                   disable=not (c.progress and self.is_main), unit="step", dynamic_ncols=True)
        started = self._started = time.perf_counter() - state["elapsed"]
        summary: dict[str, Any] = {}
        sharing = CoreSharing()  # the pool, or this thread alone where the cores are busy
        try:
            while not self._done(started):
                self.batcher.set_epoch(state["epoch"])
                batches = list(self.batcher)
                while state["batch"] < len(batches) and not self._done(started):
                    per_step = c.accumulate * self.comm.size
                    group = batches[state["batch"]:state["batch"] + per_step]
                    sharing.start_step()
                    record = self._step(group)
                    sharing.end_step(record["seconds"], record["tokens"])
                    record["threads"] = 1 if sharing.alone else get_num_threads()
                    state["batch"] += len(group)
                    if self.comm.size == 1:  # else rank 0's clock, brought by the step
                        state["elapsed"] = time.perf_counter() - started
                    record.update(epoch=state["epoch"], elapsed=round(state["elapsed"], 2))
                    with self._writing(f"the log {log_path} at step {state['step']}"):
                        log.write(record)
                    bar.update(1)
                    bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                                    tok_s=f"{record['tokens_per_s']:.0f}")
                    if state["step"] % c.eval_every == 0:
                        summary = self._validate_and_save(log)
                    if self._stopping:
                        self._stop()
                if state["batch"] >= len(batches):
                    state["epoch"] += 1
                    state["batch"] = 0
            if state["step"] % c.eval_every != 0 or not summary:
                summary = self._validate_and_save(log)
            if self.is_main:
                summary.update(self._average())
            self.comm.barrier()  # the others wait for rank 0's final model
        finally:
            sharing.close()
            bar.close()
            log.close()
        return summary

    def _done(self, started: float) -> bool:
        c, state = self.config, self.state
        # several processes must stop at the same step: they judge the time by rank 0's
        # clock, which every step's reduction brings them (state["elapsed"])
        elapsed = (time.perf_counter() - started if self.comm.size == 1
                   else state["elapsed"])
        return ((c.max_steps is not None and state["step"] >= c.max_steps)
                or (c.max_epochs is not None and state["epoch"] >= c.max_epochs)
                or (c.time_budget is not None and elapsed >= c.time_budget))

    def _step(self, group: list[Any]) -> dict[str, Any]:
        """One optimizer step over ``group`` (one or more batches; with N processes, this
        process computes every N-th of them)."""
        c, state, comm = self.config, self.state, self.comm
        start = time.perf_counter()
        self._stopping = False
        self.model.train()
        graphs = self.graphs  # None: the eager step
        self.optimizer.zero_grad() if graphs is None else graphs.zero_grad()
        n_tokens = sum(batch.n_tgt_tokens for batch in group)
        mean_shares = 0.0  # this process's batches' shares of the step's mean loss
        seeds_per_step = max(64, c.accumulate * comm.size)  # one seed per batch, none shared
        for i in range(comm.rank, len(group), comm.size):
            batch = group[i]
            # dropout masks depend on (seed, step, batch) only: resuming repeats them, and
            # N processes draw the masks one process would draw for the same batches
            backend.manual_seed((c.seed * 1_000_003 + state["step"]) * seeds_per_step + i)
            if graphs is not None:  # the same, in a graph of the batch's shape
                mean_shares += graphs.forward_backward(batch, n_tokens)
                continue
            logits = self.model(batch.src, batch.tgt_in)
            # the batch's summed token loss over the step's tokens: its share of the step's
            # mean, whose gradient backward gives as it is (no pass scaling the loss's
            # gradient, none dividing the summed gradients; loss.py)
            share = F.cross_entropy(logits, batch.tgt_out, c.label_smoothing,
                                    ignore_index=self.model.config.pad_id, normalizer=n_tokens)
            share.backward()
            mean_shares += share.item()
        # the step's mean loss (the processes' shares summed), rank 0's clock, and whether
        # any process was asked to stop: all of them stop after this same step
        clock = time.perf_counter() - self._started if comm.rank == 0 else 0.0
        asked = float(self.stop_reason is not None)
        mean_loss, state["elapsed"], asked = allreduce_scalars([mean_shares, clock, asked], comm)
        if not math.isfinite(mean_loss):
            raise TrainingError(
                f"the loss became {mean_loss} at step {state['step'] + 1} (epoch "
                f"{state['epoch']}), so training stopped {self._what_is_kept()}: lower "
                "--lr-scale or set --clip-norm.")
        if graphs is not None:  # clipping waits for the update's graph
            grad_norm = graphs.gradient_norm()
        else:  # every process: the gradient of the step's mean token loss
            allreduce_gradients(self.optimizer.params, comm)
            grad_norm = clip_grad_norm(self.optimizer.params, c.clip_norm)
        if not math.isfinite(grad_norm):  # a finite loss can still overflow its backward
            raise TrainingError(
                f"the gradient norm became {grad_norm} at step {state['step'] + 1} (epoch "
                f"{state['epoch']}) with a finite loss of {mean_loss:.4f}, so the update was "
                f"not applied and training stopped {self._what_is_kept()}: lower "
                "--lr-scale.")
        state["step"] += 1
        self.optimizer.lr = noam_rate(state["step"], self.model.config.d_model,
                                      c.warmup_steps, c.lr_scale)
        if graphs is not None:
            graphs.update(grad_norm, c.clip_norm)
        else:
            self.optimizer.step()
        self._stopping = asked > 0
        seconds = time.perf_counter() - start
        tokens = sum(b.n_src_tokens + b.n_tgt_tokens for b in group)
        state["tokens"] += tokens
        return {"step": state["step"], "loss": mean_loss, "lr": self.optimizer.lr,
                "grad_norm": grad_norm, "tokens": tokens,
                "tokens_per_s": tokens / seconds, "seconds": round(seconds, 4)}

    # ------------------------------------------------------------------ validation
    def validate_loss(self) -> float:
        """The label-smoothed loss per token on the validation pairs (as trained)."""
        return self._valid_losses()[0]

    def _valid_losses(self, comm: Communicator | None = None) -> tuple[float, float]:
        """(label-smoothed loss, negative log-likelihood) per token on the validation pairs;
        with several processes each computes every N-th batch, and the sums are reduced."""
        model, c = self.model, self.config
        comm = comm if comm is not None else self.comm
        model.eval()
        smoothed = nll = 0.0
        n_tokens = 0
        with no_grad():
            for batch in batches_in_order(self.data.valid, c.max_tokens)[comm.rank::comm.size]:
                logits = model(batch.src, batch.tgt_in)
                pad = model.config.pad_id
                smoothed += F.cross_entropy(logits, batch.tgt_out, c.label_smoothing,
                                            pad).item() * batch.n_tgt_tokens
                nll += F.cross_entropy(logits, batch.tgt_out, 0.0, pad).item() * batch.n_tgt_tokens
                n_tokens += batch.n_tgt_tokens
        model.train()
        smoothed, nll, n_tokens = allreduce_scalars([smoothed, nll, n_tokens], comm)
        return smoothed / n_tokens, nll / n_tokens

    def validate(self) -> dict[str, Any]:
        """Loss (label-smoothed, as trained) and perplexity on the validation pairs, and BLEU of
        greedy translations of the first ``bleu_sentences`` validation sentences."""
        model, c = self.model, self.config
        smoothed, nll = self._valid_losses()
        result: dict[str, Any] = {"valid_loss": smoothed, "valid_ppl": math.exp(min(nll, 50.0))}
        if min(c.bleu_sentences, len(self.data.valid_sources)):
            score, hypotheses = self._bleu(self.comm)
            result.update(valid_bleu=score.score, bleu_signature=score.signature,
                          sample=[self.data.valid_sources[0], hypotheses[0]])
        model.train()
        return result

    def _bleu(self, comm: Communicator) -> tuple[Any, list[str]]:
        """sacreBLEU's score of the greedy translations of the first ``bleu_sentences``
        validation sentences, and those translations, shared among ``comm``'s processes."""
        n = min(self.config.bleu_sentences, len(self.data.valid_sources))
        hypotheses = self._translate_shared(self.data.valid_sources[:n], comm)
        return corpus_bleu(hypotheses, self.data.valid_references[:n]), hypotheses

    def _translate_shared(self, sentences: list[str], comm: Communicator) -> list[str]:
        """Greedy translations of ``sentences``, process r translating every N-th one."""
        mine = translate(self.model, self.tokenizer, sentences[comm.rank::comm.size])
        if comm.size == 1:
            return mine
        shares = comm.allgather_json(mine)
        return [shares[i % comm.size][i // comm.size] for i in range(len(sentences))]

    def _what_is_kept(self) -> str:
        """The end of a stopped run's message: its last good checkpoint, or that it has none."""
        if (self.checkpoints / "last.npz").exists():
            return f"with the last good checkpoint in {self.checkpoints} untouched"
        return (f"before its first checkpoint, leaving nothing to resume (remove "
                f"{self.run_dir} and start again)")

    def _validate_and_save(self, log: Any) -> dict[str, Any]:
        state = self.state
        result = self.validate()
        result["step"], result["epoch"] = state["step"], state["epoch"]
        with self._writing(f"the log {self.run_dir / 'log.jsonl'} at step {state['step']}"):
            log.write({"validation": result})
        if not math.isfinite(result["valid_loss"]):  # an update broke the weights: keep them
            raise TrainingError(                        # out of every checkpoint
                f"the validation loss became {result['valid_loss']} at step {state['step']} "
                f"(epoch {state['epoch']}) because an update made the parameters non-finite, "
                f"so training stopped {self._what_is_kept()}: lower --lr-scale or set "
                "--clip-norm.")
        metric, higher = SELECT_BY[self.config.select_by]
        # against best.npz's own figure (a resumed run may select by the other measure now)
        best = state.get("best") or [None, state.get("best_valid_loss"), None]  # (older runs)
        improved = _better(result.get(metric), best[1 if metric == "valid_loss" else 2], higher)
        if _better(result["valid_loss"], state["best_valid_loss"], False):  # the run's lowest
            state["best_valid_loss"] = result["valid_loss"]
        entry = [state["step"], result["valid_loss"], result.get("valid_bleu")]
        if improved:  # best.npz's own figures
            state["best"] = entry
        if self.config.keep_best:  # [step, valid loss, valid BLEU] of the best ones, best first
            kept = [e for e in state.get("kept_best", []) if e[0] != state["step"]]
            kept.append(entry)  # once (a resumed end: again)
            state["kept_best"] = sorted(kept, key=self._rank)[: self.config.keep_best]
        if not self.is_main:
            return result
        step_path = self.checkpoints / _step_name(state["step"])
        with self._writing(f"the checkpoint of step {state['step']} ({step_path})"):
            save_checkpoint(step_path, self.model, self.optimizer, self.tokenizer.to_bytes(),
                            self._record(result))
            _link_atomically(step_path, self.checkpoints / "last.npz")
            self._saved_step = state["step"]
            if improved:
                _link_atomically(step_path, self.checkpoints / "best.npz")
            best = {_step_name(entry[0]) for entry in state.get("kept_best", [])
                    if self.config.keep_best}
            for old in sorted(self.checkpoints.glob("step-*.npz"))[: -self.config.keep_last]:
                if old.name not in best:
                    old.unlink()
        tqdm.write(f"step {state['step']}: valid loss {result['valid_loss']:.3f}, ppl "
                   f"{result['valid_ppl']:.2f}"
                   + (f", BLEU {result['valid_bleu']:.2f}" if "valid_bleu" in result else ""))
        return result

    def _record(self, validation: dict[str, Any] | None) -> dict[str, Any]:
        """The training state a checkpoint stores, to resume from and to read back."""
        record = {"trainer": dict(self.state), "train_config": asdict(self.config),
                  "validation": validation}
        if self.data.src_lang and self.data.tgt_lang:  # evaluate reads the same direction
            record["languages"] = [self.data.src_lang, self.data.tgt_lang]
        return record

    def _stop(self) -> None:
        """Save the step every process has just finished (unless its validation did) as
        last.npz, and raise TrainingStopped. The checkpoint is not validated and is no
        step-*.npz, so the best model and the average of a resumed run are those of an
        uninterrupted one."""
        step, last = self.state["step"], self.checkpoints / "last.npz"
        if self.is_main and self._saved_step != step:
            with self._writing(f"the checkpoint of step {step} ({last})"):
                save_checkpoint(last, self.model, self.optimizer, self.tokenizer.to_bytes(),
                                self._record(None))
            self._saved_step = step
        self.comm.barrier()  # no process ends before rank 0's checkpoint is on disk
        why = self.stop_reason or ("another process of the run was asked to stop"
                                   if self.comm.size > 1 else None)
        reason = f" ({why})" if why else ""
        raise TrainingStopped(f"stopped at step {step}{reason}; the checkpoint of step {step} "
                              f"is {last}: continue with --resume.", step)

    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Turn an OSError while writing ``what`` into a RunWriteError that names it, says
        why, and says which checkpoint is intact and how to go on."""
        try:
            yield
        except OSError as exc:
            reason, fix = _write_failure(exc)
            last = self.checkpoints / "last.npz"
            if self._saved_step is not None:
                kept = f"the checkpoint of step {self._saved_step} ({last}) is intact"
                then = "continue with --resume"
            elif last.is_file():
                kept, then = f"the last checkpoint ({last}) is intact", "continue with --resume"
            else:
                kept, then = "no checkpoint had been written yet", "start the run again"
            raise RunWriteError(f"could not write {what}: {reason}; {kept}: {fix} and "
                                f"{then}.") from None

    def _rank(self, entry: list) -> tuple:
        """The sort key of a kept_best entry [step, valid loss, valid BLEU]: best first by
        ``select_by`` (a validation without BLEU last), the earlier of equals first."""
        step, loss, bleu = entry
        if self.config.select_by == "bleu":
            return (-bleu if bleu is not None else math.inf, step)
        return (loss, step)

    def _average(self) -> dict[str, Any]:
        """Average the last step checkpoints (§6.1), and with ``keep_best`` those of the best
        validations, and pick the final model by ``select_by``: the average of the last ones,
        else that of the best ones, else the best checkpoint, whichever validates best (a tie
        goes to the first). Each average is validated for its loss, and with
        ``select_by="bleu"`` for its BLEU too (rank 0 alone). (Early in a short run the
        average mixes in weights far from converged, and loses; a run that overfits past its
        best validation averages weights from after it.)"""
        last = sorted(self.checkpoints.glob("step-*.npz"))[-self.config.keep_last:]
        sets = [("averaged.npz", last)]
        if self.config.keep_best:
            best = [self.checkpoints / _step_name(entry[0])
                    for entry in sorted(self.state.get("kept_best", []))]
            sets.append(("averaged-best.npz", [p for p in best if p.is_file()]))
        trained = {name: p.data for name, p in self.model.named_parameters()}
        by_bleu = self.config.select_by == "bleu"
        summary: dict[str, Any] = {}
        candidates = []  # (name, checkpoints averaged, {"valid_loss": ..., "valid_bleu": ...})
        for name, paths in sets:
            if not paths:
                continue
            try:
                averaged = average_checkpoints(paths)
            except memory.MemoryLimitError as exc:
                raise memory.MemoryLimitError(
                    f"training is done and its checkpoints are intact in {self.checkpoints}, "
                    f"but {str(exc).rstrip('.')}, then continue with --resume to average "
                    "them.") from None
            with self._writing(f"the averaged checkpoint ({self.checkpoints / name})"):
                save_averaged(self.checkpoints / name, averaged)
            self.model.load_state_dict(averaged.model_state)
            scores = {"valid_loss": self._valid_losses(SingleProcess())[0]}  # rank 0 alone
            if by_bleu:
                scores["valid_bleu"] = self._valid_bleu()
            key = name.removesuffix(".npz").replace("-", "_")
            summary[key] = str(self.checkpoints / name)
            summary.update({f"{key}_{metric}": value for metric, value in scores.items()})
            candidates.append((name, len(paths), scores))
        self.model.load_state_dict({n: backend.to_numpy(a) for n, a in trained.items()})
        _, loss, bleu = self.state.get("best") or (  # a run from before "best" was recorded
            None, self.state["best_valid_loss"], None)
        candidates.append(("best.npz", 1, {"valid_loss": loss, "valid_bleu": bleu}))
        metric, higher = SELECT_BY[self.config.select_by]
        chosen = candidates[0]
        for candidate in candidates[1:]:  # the first of equals
            if _better(candidate[2][metric], chosen[2][metric], higher):
                chosen = candidate
        final = self.checkpoints / chosen[0]
        with self._writing(f"the final checkpoint ({self.checkpoints / 'final.npz'})"):
            _link_atomically(final, self.checkpoints / "final.npz")
        tqdm.write("; ".join(("the best checkpoint" if name == "best.npz" else
                              f"{name.removesuffix('.npz')} ({n} checkpoints)")
                             + f": valid loss {scores['valid_loss']:.3f}"
                             + (f", BLEU {scores['valid_bleu']:.2f}"
                                if by_bleu and scores["valid_bleu"] is not None else "")
                             for name, n, scores in candidates)
                   + f"; final model: {final.name}")
        summary["final"] = final.name
        return summary

    def _valid_bleu(self) -> float:
        """``validate``'s BLEU of the model as it is now, on this process alone."""
        score = self._bleu(SingleProcess())[0].score
        self.model.train()
        return score


def _better(value: float | None, than: float | None, higher: bool) -> bool:
    """Whether the validation figure ``value`` beats the best so far, ``than`` (None: none
    yet); higher or lower is better. A missing ``value`` (no BLEU) never does."""
    if value is None:
        return False
    return than is None or (value > than if higher else value < than)


def _step_name(step: int) -> str:
    """The file name of step ``step``'s checkpoint."""
    return f"step-{step:07d}.npz"


class _Log:
    """log.jsonl, one JSON record per line, flushed at once; nothing where ``path`` is None
    (the processes other than rank 0)."""

    def __init__(self, path: Path | None):
        self.file = open(path, "a", encoding="utf-8") if path is not None else None

    def write(self, record: dict[str, Any]) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:  # what a failed write left in the buffer: that error was raised
                pass


def _write_failure(exc: OSError) -> tuple[str, str]:
    """(why a write failed, what to do about it), in words."""
    detail = f" ({exc.strerror or exc})"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full{detail}", "free some space on it"
    if exc.errno == errno.EROFS:
        return f"its file system is read-only{detail}", "make it writable again"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{detail}", "make the run folder writable"
    return (exc.strerror or str(exc)), "check that disk"


def _link_atomically(source: Path, target: Path) -> None:
    """Make ``target`` hold ``source``'s bytes, replacing it atomically (a hard link where the
    file system allows, a copy otherwise)."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if temporary.exists():
        temporary.unlink()
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copyfile(source, temporary)
    os.replace(temporary, target)
