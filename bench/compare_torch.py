"""minitransformer against PyTorch eager: the same Transformer, side by side on one machine.

    python bench/compare_torch.py               # small and base, about 15 minutes on 2 cores
    python bench/compare_torch.py --quick       # smoke test: small, lengths 16 32, 1 repeat
    python bench/compare_torch.py --only decoding   # parity, then one part (a few minutes)
    python bench/compare_torch.py --only decoding --decode-batch 50 100 200 256 500
    python bench/compare_torch.py --device cuda # both on a GPU (CuPy and CUDA PyTorch)

Needs ``pip install torch==2.13.0`` (only bench/ imports torch). The PyTorch model is
bench/torch_model.py: idiomatic eager modules, the same architecture, a copy of the weights.
One run measures, in order:

1. Parity, first: dropout off, a padded batch, logits, loss and every parameter gradient in
   float64 (relative error < 1e-8) and float32 (< 1e-3). Exits 1 if they disagree.
2. Training steps (zero grads, forward, label-smoothed loss, backward, Adam), float32, dropout
   on, source = target length L in --lengths, 4000 // L sentences; the implementations
   alternate step by step (and which goes first) so that machine noise hits both.
3. Model FLOPs utilisation: matmul FLOPs per step (``training_flops``) over the step time,
   divided by NumPy's own float32 matmul rate measured in the same run. And the matmul floor
   (CPU; bench/floor.py): every matrix product of the step at that length, forward and
   backward, timed alone (float32, warm, operands laid out as the step has them, outputs
   preallocated; the faster of one BLAS call at --threads threads and one block per thread on
   single-threaded BLAS), summed: what a NumPy implementation cannot go below. The floor is
   timed in every round, right after that round's steps, and step / floor is the median over
   the rounds of each round's ratio (the floor reported is the median round's, the upper of
   the two middle ones for an even count), so a slow spell of the machine falls on both.
   Each case reports it beside the ratio to PyTorch. The warm-up step of
   minitransformer is traced: the list's FLOPs must be those of the step's numpy.matmul calls.
4. Peak memory of two training steps, each implementation in a fresh subprocess (after one
   step of a tiny model, which loads its code).
5. Decoding: greedy and beam search, with and without the key/value cache, the same
   algorithm on both sides (torch_model.py ports translation/decode.py; minitransformer's
   weights frozen once a run, as translate freezes them for its batches), each case
   --decode-repeats times per side, alternating run by run (--decode-alternation batch: batch
   by batch), in batches of the size minitransformer's translate takes (128 sentences per
   CPU thread, at most 256; --decode-batch for another, the same for both), and a forced
   length (an EOS id that no step can produce) to see what the cache saves at 50 tokens.
   Given several sizes, --decode-batch times beam search with the cache at each size instead
   (every pair of library and size decodes all the sentences once a round, the pairs in turn,
   the order reversed every other round): which size suits which library, and the ratio at
   each size and at each library's own best.

Writes every raw timing as JSON, with the commit it ran at (--output; by default
bench/results/compare_torch.<machine>[.<parts>].json, the machine's kind as machine.py names
it: epyc, xeon, h100), and the tables as Markdown (--markdown). NumPy's BLAS reads its thread
count only when it loads, so the script runs itself again with OMP/OPENBLAS/MKL_NUM_THREADS
set to --threads when the environment says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from compare_report import (
    IMPLS,
    MiB,
    batch_size_table,
    decoding_tables,
    floor_table,
    memory_table,
    mfu_table,
    report,
    training_table,
)
from floor import check_against_trace, step_products, time_floor, traced_products
from machine import blas, commit, cpu_generation, cpu_name, kernels, kind
from parity_torch import KINK_MARGIN, batch_away_from_kinks, relative
from torch_model import TorchTransformer, copy_weights
from torch_model import beam_search as torch_beam_search
from torch_model import greedy_decode as torch_greedy_decode

import minitransformer as mt
from minitransformer import backend
from minitransformer import functional as F
from minitransformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from minitransformer.functional._layout import frozen_weights
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.checkpoint import load_checkpoint, restore_model
from minitransformer.translation.corpus import load_corpus
from minitransformer.translation.decode import beam_search, greedy_decode
from minitransformer.translation.translator import default_batch_size

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data" / "multi30k"
CHECKPOINT = HERE / "results" / f"multi30k.{kind()}" / "checkpoints" / "last.npz"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
KERNEL_VARIABLES = ("OPENBLAS_CORETYPE", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


# ----------------------------------------------------------------------------- the models

def build_pair(config: TransformerConfig, device: str, dtype=torch.float32):
    """A minitransformer Transformer on the current device, and a torch copy of it."""
    mt.manual_seed(0)
    ours = Transformer(config)
    theirs = TorchTransformer(config).to(device=device, dtype=dtype)
    copy_weights(theirs, ours)
    return ours, theirs


def minitransformer_step(model, optimizer):
    """One training step on a batch (src, tgt_in, tgt_out) of minitransformer arrays."""
    def step(batch):
        src, tgt_in, tgt_out = batch
        optimizer.zero_grad()
        logits = model(src, tgt_in)                                     # (B, T, V)
        loss = F.cross_entropy(logits, tgt_out, label_smoothing=0.1, ignore_index=PAD_ID)
        loss.backward()
        optimizer.step()
    return step


def torch_step(model, optimizer):
    """One training step on a batch (src, tgt_in, tgt_out) of torch tensors."""
    def step(batch):
        src, tgt_in, tgt_out = batch
        optimizer.zero_grad()
        logits = model(src, tgt_in)                                     # (B, T, V)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
            label_smoothing=0.1, ignore_index=PAD_ID)
        loss.backward()
        optimizer.step()
    return step


def make_steps(ours, theirs) -> dict:
    """Each implementation's step function, with its own Adam (β 0.9, 0.98; ε 1e-9)."""
    return {"minitransformer": minitransformer_step(ours, Adam(ours.parameters(), lr=1e-4)),
            "torch": torch_step(theirs, torch.optim.Adam(theirs.parameters(), lr=1e-4,
                                                         betas=(0.9, 0.98), eps=1e-9))}


def random_batch(rng, vocab_size: int, B: int, L: int) -> tuple:
    """(src, tgt_in, tgt_out), each (B, L): random ids in [4, V) on the host."""
    src = rng.integers(4, vocab_size, size=(B, L))
    tgt = rng.integers(4, vocab_size, size=(B, L + 1))
    return src, np.ascontiguousarray(tgt[:, :-1]), np.ascontiguousarray(tgt[:, 1:])


def to_device(arrays: tuple, impl: str, device: str) -> tuple:
    """Host arrays as ``impl``'s arrays on ``device``, moved once, outside the timings."""
    if impl == "torch":
        return tuple(torch.as_tensor(a, device=device) for a in arrays)
    return tuple(backend.to_device(a, device) for a in arrays)


def synchronize(device: str) -> None:
    """Wait for the GPU (both libraries' queues) before reading a clock."""
    if device == "cuda":
        torch.cuda.synchronize()
        backend.get_backend("cuda").xp.cuda.Device().synchronize()


def timed(run, device: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- 1. parity

def check_parity(config: TransformerConfig, device: str) -> dict:
    """Logits, loss and gradients of both models on a padded batch, dropout off, in float64
    and float32. Gradients are compared against the model's largest gradient entry: the key
    biases' true gradient is exactly zero, so both sides hold rounding noise there. The batch
    keeps every ReLU input KINK_MARGIN from zero (parity_torch.py says why)."""
    config = config.replace(p_dropout=0.0)
    with mt.default_dtype("float64"):
        _, theirs64 = build_pair(config, device, torch.float64)

    def relu_inputs(batch) -> list:
        recorded: list = []
        hooks = [module.register_forward_hook(
                     lambda _m, _i, out: recorded.append(out.detach().cpu().numpy()))
                 for name, module in theirs64.named_modules() if name.endswith("feed_forward.w_1")]
        with torch.no_grad():
            theirs64(*(torch.as_tensor(a, device=device) for a in batch[:2]))
        for hook in hooks:
            hook.remove()
        return recorded

    seed, (src, tgt_in, tgt_out) = batch_away_from_kinks(config, relu_inputs)
    result = {"batch_seed": seed, "kink_margin": KINK_MARGIN}
    for dtype, limit in (("float64", 1e-8), ("float32", 1e-3)):
        with mt.default_dtype(dtype):
            ours, theirs = build_pair(config, device, getattr(torch, dtype))
            logits = ours(src, tgt_in)
            loss = F.cross_entropy(logits, tgt_out, 0.1, ignore_index=PAD_ID)
            loss.backward()
        t_logits = theirs(*(torch.as_tensor(a, device=device) for a in (src, tgt_in)))
        t_loss = torch.nn.functional.cross_entropy(
            t_logits.reshape(-1, t_logits.shape[-1]),
            torch.as_tensor(tgt_out, device=device).reshape(-1),
            label_smoothing=0.1, ignore_index=PAD_ID)
        t_loss.backward()
        t_grads = {name: p.grad.cpu().numpy() for name, p in theirs.named_parameters()}
        grads = {name.replace(".gain", ".weight"): mt.to_numpy(p.grad)
                 for name, p in ours.named_parameters()}
        scale = max(np.abs(g).max() for g in grads.values())
        errors = {"logits": relative(mt.to_numpy(logits.data), t_logits.detach().cpu().numpy()),
                  "loss": relative(np.array(loss.item()), np.array(t_loss.item()))}
        errors.update({f"d {name}": relative(g, t_grads[name], scale)
                       for name, g in grads.items()})
        result[dtype] = {"limit": limit, "comparisons": len(errors),
                         "worst": max(errors.values()),
                         "disagreeing": {k: e for k, e in errors.items() if e > limit}}
    return result


# ----------------------------------------------------------------------------- 2-3. training

def training_flops(config: TransformerConfig, B: int, S: int, T: int) -> int:
    """Matmul FLOPs of one training step (forward and backward), counted analytically.

    A product of an (m, k) and a (k, n) matrix costs 2·m·k·n FLOPs. With N_s = B·S source and
    N_t = B·T target tokens, C = d_model, F = d_ff, V the vocabulary and N layers on each side,
    the forward pass costs

        encoder layer   4 · 2·N_s·C²                      projections q, k, v, o
                      + 2 · 2·B·S²·C                      Q Kᵀ and P V over all heads
                      + 2 · 2·N_s·C·F                     feed-forward w_1, w_2
        decoder layer   4 · 2·N_t·C² + 2 · 2·B·T²·C       self-attention
                      + 2 · 2·N_t·C² + 2 · 2·N_s·C²       cross-attention: q, o on the target,
                      + 2 · 2·B·T·S·C                     k, v on the memory; Q Kᵀ and P V
                      + 2 · 2·N_t·C·F                     feed-forward
        output          2·N_t·C·V                         the tied projection h Eᵀ

    and the backward pass twice as much, since every product Y = A B needs dA = dY Bᵀ and
    dB = Aᵀ dY of the same size (the first layer's input gradient too: the embeddings are
    trained). So a step is 3 × forward. Both implementations compute the causal scores in full
    and they are counted in full. Not counted: the embedding's gradient, a scatter-add rather
    than a matmul, and all element-wise work (softmax, layer norm, dropout, loss, Adam).
    """
    C, F_, V, N = config.d_model, config.d_ff, config.tgt_vocab_size, config.n_layers
    Ns, Nt = B * S, B * T
    encoder = 8 * Ns * C * C + 4 * B * S * S * C + 4 * Ns * C * F_
    decoder = (8 * Nt * C * C + 4 * B * T * T * C
               + 4 * Nt * C * C + 4 * Ns * C * C + 4 * B * T * S * C
               + 4 * Nt * C * F_)
    forward = N * (encoder + decoder) + 2 * Nt * C * V
    return 3 * forward


def matmul_rate(library: str, device: str, sizes: tuple[int, ...]) -> dict:
    """Best float32 FLOP/s of n×n @ n×n products (best of 3 per size) in NumPy/CuPy or torch."""
    rates = {}
    for n in sizes:
        if library == "torch":
            a, b = (torch.rand(n, n, device=device) for _ in range(2))
            run = functools.partial(torch.matmul, a, b)
        else:
            xp = backend.get_backend(device).xp
            a, b = (xp.asarray(np.random.default_rng(n).random((n, n), dtype=np.float32))
                    for _ in range(2))
            run = functools.partial(xp.matmul, a, b)
        run()  # warm up
        best = min(timed(run, device) for _ in range(3))
        rates[str(n)] = 2 * n ** 3 / best
    return {"flops_per_s": max(rates.values()), "by_size": rates}


FLOOR_REPEATS = 5  # each product's median of 5 calls, in every round


def time_training(name: str, config: TransformerConfig, args, peak: float) -> dict:
    """Alternating training steps at each length; per length the raw seconds and summaries."""
    ours, theirs = build_pair(config, args.device)
    steps = make_steps(ours, theirs)
    rng = np.random.default_rng(0)
    repeats = args.repeats or (5 if name == "small" else 3)
    rows = []
    for L in args.lengths:
        B = max(1, args.tokens // L)
        host = random_batch(rng, config.tgt_vocab_size, B, L)
        batches = {impl: to_device(host, impl, args.device) for impl in IMPLS}
        seconds = {impl: [] for impl in IMPLS}
        products = step_products(config, B, L, L)  # the matmul floor's list (floor.py)
        floors: list[dict] = []                     # one a round
        for rep in range(repeats + 1):  # the first round warms caches and allocators up
            for impl in (IMPLS if rep % 2 == 0 else IMPLS[::-1]):
                # the warm-up step of ours on the CPU is traced: the floor's products are
                # the step's (check_against_trace raises if not)
                tracing = rep == 0 and impl == "minitransformer" and args.device == "cpu"
                with traced_products() if tracing else contextlib.nullcontext() as calls:
                    s = timed(functools.partial(steps[impl], batches[impl]), args.device)
                if tracing:
                    check_against_trace(products, calls)
                if rep > 0:
                    seconds[impl].append(s)
            if rep > 0 and args.device == "cpu":
                # the products alone, in the same round as its steps: a slow spell of the
                # machine (this one's shared host moved a step's time by 7% within a minute)
                # then falls on the step and its floor alike
                floors.append(time_floor(products, args.threads, FLOOR_REPEATS))
        flops = training_flops(config, B, L, L)
        assert sum(p.flops for p in products) == flops, "floor.py and training_flops disagree"
        row = {"length": L, "batch": B, "target_tokens": B * L, "flops_per_step": flops}
        for impl in IMPLS:
            median = statistics.median(seconds[impl])
            row[impl] = {"seconds": seconds[impl], "median_s": median,
                         "min_s": min(seconds[impl]), "max_s": max(seconds[impl]),
                         "tokens_per_s": B * L / median, "flops_per_s": flops / median,
                         "mfu": flops / median / peak}
        # ours / theirs in tokens/s is theirs / ours in seconds, paired per repetition
        ratios = [t / o for o, t in zip(seconds["minitransformer"], seconds["torch"],
                                        strict=True)]
        row["ratio"] = {"median": statistics.median(ratios), "min": min(ratios),
                        "max": max(ratios), "per_repetition": ratios}
        if args.device == "cpu":  # step / floor: the median over rounds of each round's
            per_round = [f["seconds"] for f in floors]
            median_round = sorted(floors, key=lambda f: f["seconds"])[len(floors) // 2]
            row["floor"] = {**median_round, "seconds_per_round": per_round}
            for impl in IMPLS:
                over = [s / f for s, f in zip(seconds[impl], per_round, strict=True)]
                row[impl]["step_over_floor"] = statistics.median(over)
                row[impl]["step_over_floor_per_round"] = over
        rows.append(row)
        print(f"  {name} L={L:<4} minitransformer {row['minitransformer']['median_s']:.3f} s"
              f"  torch {row['torch']['median_s']:.3f} s  ratio {row['ratio']['median']:.2f}"
              + (f"  matmul floor {row['floor']['seconds']:.3f} s" if "floor" in row else ""),
              flush=True)
    return {"repeats": repeats, "rows": rows}


# ----------------------------------------------------------------------------- 4. memory

def memory_worker(spec: dict) -> dict:
    """In a fresh process: one step of a tiny model first (the library's code loaded: for
    minitransformer's compiled kernels, Numba and LLVM, about 150 MiB resident), then build
    one implementation's model and Adam, read the memory in use, run two training steps, read
    the peak. CPU: resident set size (RSS, Linux); GPU: bytes allocated (peak of CuPy's pool in
    use / torch.cuda.max_memory_allocated), and held. The step's memory is the peak over the
    baseline; the peak itself includes the libraries' code."""
    device, impl = spec["device"], spec["impl"]
    torch.set_num_threads(spec["threads"])
    if device == "cuda":
        mt.use("cuda")
        pool, cupy_peak = _track_cupy_peak()
    tiny = TransformerConfig(src_vocab_size=64, tgt_vocab_size=64, n_layers=1, d_model=16,
                             d_ff=32, n_heads=2)
    tiny_batch = to_device(random_batch(np.random.default_rng(1), 64, 4, 8), impl, device)
    if impl == "minitransformer":
        tiny_model = Transformer(tiny)
        minitransformer_step(tiny_model, Adam(tiny_model.parameters(), lr=1e-4))(tiny_batch)
    else:
        tiny_model = TorchTransformer(tiny).to(device)
        torch_step(tiny_model, torch.optim.Adam(tiny_model.parameters(), lr=1e-4))(tiny_batch)
    del tiny_model
    config = TransformerConfig.named(spec["config"], spec["vocab_size"])
    L = spec["length"]
    host = random_batch(np.random.default_rng(0), spec["vocab_size"],
                        max(1, spec["tokens"] // L), L)
    batch = to_device(host, impl, device)
    if impl == "minitransformer":
        mt.manual_seed(0)
        model = Transformer(config)
        step = minitransformer_step(model, Adam(model.parameters(), lr=1e-4))
    else:
        torch.manual_seed(0)
        model = TorchTransformer(config).to(device)
        step = torch_step(model, torch.optim.Adam(model.parameters(), lr=1e-4,
                                                  betas=(0.9, 0.98), eps=1e-9))
    synchronize(device)
    if device == "cpu":
        baseline = resident_bytes("VmRSS")
        with contextlib.suppress(OSError):  # start the peak (VmHWM) again from here
            Path("/proc/self/clear_refs").write_text("5")
    elif impl == "minitransformer":
        baseline = cupy_peak["bytes"] = pool.used_bytes()
    else:
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        step(batch)
    synchronize(device)
    result = {"baseline_bytes": baseline}
    if device == "cpu":
        result["peak_bytes"] = resident_bytes("VmHWM")
    elif impl == "minitransformer":
        result["peak_bytes"], result["held_bytes"] = cupy_peak["bytes"], pool.total_bytes()
    else:
        result["peak_bytes"] = torch.cuda.max_memory_allocated()
        result["held_bytes"] = torch.cuda.max_memory_reserved()
    result["increment_bytes"] = result["peak_bytes"] - baseline
    return result


def resident_bytes(field: str) -> int:
    """VmRSS (resident now) or VmHWM (peak) of this process, in bytes. Not getrusage's
    ru_maxrss: a child started by fork (or vfork) and exec keeps its parent's peak there."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024                          # kB
    raise RuntimeError(f"no {field} in /proc/self/status: memory is measured on Linux only")


def _track_cupy_peak():
    """CuPy's pool knows the bytes in use but not their peak: wrap its allocator to record it."""
    cupy = backend.get_backend("cuda").xp
    pool, peak = cupy.get_default_memory_pool(), {"bytes": 0}

    def malloc(size):
        memory = pool.malloc(size)
        peak["bytes"] = max(peak["bytes"], pool.used_bytes())
        return memory

    cupy.cuda.set_allocator(malloc)
    return pool, peak


def measure_memory(name: str, config: TransformerConfig, args) -> list[dict]:
    rows = []
    for L in args.memory_lengths:
        row = {"length": L, "batch": max(1, args.tokens // L)}
        for impl in IMPLS:
            spec = {"impl": impl, "config": name, "vocab_size": config.tgt_vocab_size,
                    "length": L, "tokens": args.tokens, "device": args.device,
                    "threads": args.threads}
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()),
                                   "--_memory-worker", json.dumps(spec)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"memory worker failed:\n{done.stderr}")
            row[impl] = json.loads(done.stdout.strip().splitlines()[-1])
        ours, theirs = row["minitransformer"], row["torch"]
        row["increment_ratio"] = ours["increment_bytes"] / theirs["increment_bytes"]
        row["peak_ratio"] = ours["peak_bytes"] / theirs["peak_bytes"]
        rows.append(row)
        print(f"  {name} L={L:<4} step increment minitransformer "
              f"{ours['increment_bytes'] / MiB:.0f} MiB, torch "
              f"{theirs['increment_bytes'] / MiB:.0f} MiB", flush=True)
    return rows


# ----------------------------------------------------------------------------- 5. decoding

def decoding_inputs(args) -> tuple:
    """(minitransformer model, padded source batches sorted by length, description), in
    batches of --decode-batch sentences (default: what minitransformer's translate takes)."""
    model, sources, what = decoding_sources(args)
    if args.decode_batch is None:  # what minitransformer's translate would take here
        args.decode_batch = [default_batch_size(model)]
    return model, padded_batches(sources, args.decode_batch[0]), what


def model_pair(ours, device: str) -> dict:
    """{"minitransformer": ours, "torch": the same architecture in PyTorch, same weights}."""
    theirs = TorchTransformer(ours.config).to(device)
    copy_weights(theirs, ours)
    return {"minitransformer": ours, "torch": theirs}


def decoding_sources(args) -> tuple:
    """(minitransformer model, source id lists sorted by length, description).

    The trained model of --checkpoint and the first --sentences of test_2016_flickr when the
    checkpoint and Multi30k are there, else a random small model on random ids of 8-20 tokens."""
    path = Path(args.checkpoint)
    if path.is_file() and Path(args.data).is_dir():
        checkpoint = load_checkpoint(path)
        model = restore_model(checkpoint, args.device)
        tokenizer = Tokenizer.from_bytes(checkpoint.tokenizer_bytes)
        pairs = load_corpus(args.data, "de", "en").test[: args.sentences]
        sources = [ids for ids in (tokenizer.encode(s.strip()) for s, _ in pairs) if ids]
        shown = path.relative_to(HERE.parent) if path.is_relative_to(HERE.parent) else path
        what = (f"trained small model ({shown}), first "
                f"{len(sources)} sentences of test_2016_flickr")
    else:
        mt.manual_seed(0)
        model = Transformer(TransformerConfig.named("small", args.vocab_size, p_dropout=0.0))
        rng = np.random.default_rng(0)
        sources = [rng.integers(4, args.vocab_size, size=n).tolist()
                   for n in rng.integers(8, 21, size=args.sentences)]
        what = f"random-weight small model, {len(sources)} random sources of 8-20 ids"
    sources.sort(key=len)  # as translation.translator: little padding per batch
    return model, sources, what


def padded_batches(sources: list, size: int) -> list:
    """The sources in batches of ``size``, each padded to its longest."""
    batches = []
    for start in range(0, len(sources), size):
        chunk = sources[start:start + size]
        width = max(len(ids) for ids in chunk)
        batches.append(np.array([ids + [PAD_ID] * (width - len(ids)) for ids in chunk]))
    return batches


def decode_batch(impl: str, model, src, algorithm: str, use_cache: bool, args,
                 eos_id: int = EOS_ID, max_len: int | None = None) -> list:
    """The hypotheses (token id lists) of one padded batch of sources."""
    if impl == "torch":
        src = torch.as_tensor(src, device=args.device)
        if algorithm == "greedy":
            return torch_greedy_decode(model, src, BOS_ID, eos_id, max_len, use_cache)
        return torch_beam_search(model, src, BOS_ID, eos_id, args.beam, args.alpha, max_len,
                                 use_cache)
    if algorithm == "greedy":
        return greedy_decode(model, src, BOS_ID, eos_id, max_len, use_cache=use_cache)
    return beam_search(model, src, BOS_ID, eos_id, args.beam, args.alpha, max_len,
                       use_cache=use_cache)


def decode_all(impl: str, model, batches: list, algorithm: str, use_cache: bool, args,
               eos_id: int = EOS_ID, max_len: int | None = None) -> tuple[float, list]:
    """Seconds to decode every batch, and the hypotheses (token id lists) in batch order.
    minitransformer's weights are frozen once for all the batches, as ``translate`` freezes
    them for its batches: the transposed copies that small products read are made once."""
    hyps: list[list[int]] = []

    def run():
        frozen = contextlib.nullcontext() if impl == "torch" else \
            frozen_weights(p.data for p in model.parameters())
        with frozen:
            for src in batches:
                hyps.extend(decode_batch(impl, model, src, algorithm, use_cache, args, eos_id,
                                         max_len))

    return timed(run, args.device), hyps


def decode_alternating(models: dict, batches: list, algorithm: str, use_cache: bool, args,
                       rep: int) -> dict:
    """Every batch decoded by both implementations, one straight after the other (which goes
    first alternates from batch to batch and from run to run), so that a slow stretch of the
    machine hits both: {impl: (seconds summed over the batches, hypotheses in batch order)}."""
    seconds = dict.fromkeys(IMPLS, 0.0)
    hyps: dict[str, list] = {impl: [] for impl in IMPLS}
    for i, src in enumerate(batches):
        for impl in (IMPLS if (rep + i) % 2 == 0 else IMPLS[::-1]):
            batch_seconds, batch_hyps = decode_all(impl, models[impl], [src], algorithm,
                                                   use_cache, args)
            seconds[impl] += batch_seconds
            hyps[impl].extend(batch_hyps)
    return {impl: (seconds[impl], hyps[impl]) for impl in IMPLS}


def time_decoding(args) -> dict:
    ours, batches, what = decoding_inputs(args)
    models = model_pair(ours, args.device)
    n = sum(len(b) for b in batches)
    print(f"  {what}, batches of {args.decode_batch[0]}", flush=True)
    for impl in IMPLS:  # warm-up on the first batch: a library's first call at a new size
        for algorithm in ("greedy", "beam"):  # may pay once (PyTorch's first took 4x longer)
            decode_all(impl, models[impl], batches[:1], algorithm, True, args)

    cases = []
    for algorithm, use_cache in [("greedy", True), ("greedy", False), ("beam", True),
                                 ("beam", False)]:
        case = {"algorithm": algorithm, "use_cache": use_cache, "sentences": n}
        runs: dict[str, list] = {impl: [] for impl in IMPLS}
        for rep in range(args.decode_repeats):
            if args.decode_alternation == "batch":
                timings = decode_alternating(models, batches, algorithm, use_cache, args, rep)
            else:  # whole runs, which goes first alternating, as the training steps
                timings = {impl: decode_all(impl, models[impl], batches, algorithm, use_cache,
                                            args)
                           for impl in (IMPLS if rep % 2 == 0 else IMPLS[::-1])}
            for impl, (seconds, hyps) in timings.items():
                runs[impl].append(seconds)
                case[impl] = {"hyps": hyps}
        for impl in IMPLS:
            median = statistics.median(runs[impl])
            case[impl].update({"seconds": median, "runs_s": runs[impl],
                               "sentences_per_s": n / median,
                               "tokens": sum(map(len, case[impl]["hyps"]))})
        ratios = [t / o for o, t in zip(runs["minitransformer"], runs["torch"], strict=True)]
        case["ratio"] = statistics.median(ratios)
        case["ratio_min"], case["ratio_max"] = min(ratios), max(ratios)
        case["identical"] = _identical(case["minitransformer"]["hyps"], case["torch"]["hyps"])
        cases.append(case)
        print(f"  {algorithm:<6} cache={use_cache!s:<5} minitransformer "
              f"{case['minitransformer']['seconds']:.2f} s  torch {case['torch']['seconds']:.2f} s"
              f"  ratio {case['ratio']:.2f} ({case['ratio_min']:.2f}-{case['ratio_max']:.2f})"
              f"  identical {case['identical']:.3f}", flush=True)

    cache_speedup = {}
    for algorithm in ("greedy", "beam"):
        on, off = (next(c for c in cases if c["algorithm"] == algorithm and c["use_cache"] == u)
                   for u in (True, False))
        cache_speedup[algorithm] = {
            impl: {"speedup": off[impl]["seconds"] / on[impl]["seconds"],
                   "same_output": _identical(on[impl]["hyps"], off[impl]["hyps"])}
            for impl in IMPLS}
    for case in cases:  # the JSON keeps the counts, not the token ids
        for impl in IMPLS:
            del case[impl]["hyps"]

    # Forced length: EOS id -1 is no vocabulary entry, so no sentence stops before max_len.
    forced = {"algorithm": "greedy", "length": args.forced_length, "eos_id": -1,
              "sentences": len(batches[0])}
    for impl in IMPLS:
        times = {"cache_s": [], "no_cache_s": []}
        for _ in range(2):  # best of two: one run is short enough for a hiccup to matter
            for use_cache in (True, False):
                seconds, hyps = decode_all(impl, models[impl], batches[:1], "greedy",
                                           use_cache, args, eos_id=-1,
                                           max_len=args.forced_length)
                assert all(len(h) == args.forced_length for h in hyps)
                times["cache_s" if use_cache else "no_cache_s"].append(seconds)
        forced[impl] = {**times, "speedup": min(times["no_cache_s"]) / min(times["cache_s"])}
    print(f"  forced {args.forced_length} tokens: cache speed-up minitransformer "
          f"{forced['minitransformer']['speedup']:.1f}x, torch {forced['torch']['speedup']:.1f}x",
          flush=True)
    return {"inputs": what, "batch_size": args.decode_batch[0], "beam_size": args.beam,
            "repeats": args.decode_repeats, "alternation": args.decode_alternation,
            "length_penalty": args.alpha, "max_len": "each source's length + 50",
            "cases": cases, "cache_speedup": cache_speedup, "forced_length": forced}


def _identical(a: list, b: list) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def time_batch_sizes(args) -> dict:
    """Beam search with the cache at each of the --decode-batch sizes: in each of
    --decode-repeats rounds every (library, size) pair decodes all the sentences once, the
    pairs in turn, the order reversed every other round."""
    ours, sources, what = decoding_sources(args)
    sizes = args.decode_batch
    batches = {size: padded_batches(sources, size) for size in sizes}
    models = model_pair(ours, args.device)
    for impl in IMPLS:  # warm-up, as time_decoding
        decode_all(impl, models[impl], batches[sizes[0]][:1], "beam", True, args)
    print(f"  {what}", flush=True)
    pairs = [(impl, size) for size in sizes for impl in IMPLS]
    seconds: dict[tuple, list[float]] = {pair: [] for pair in pairs}
    hyps: dict[tuple, list] = {}
    for round_ in range(args.decode_repeats):
        for impl, size in (pairs if round_ % 2 == 0 else pairs[::-1]):
            elapsed, hyps[impl, size] = decode_all(impl, models[impl], batches[size], "beam",
                                                   True, args)
            seconds[impl, size].append(elapsed)
        print(f"  round {round_}: " + ", ".join(
            f"{impl} {size} {seconds[impl, size][-1]:.2f} s" for impl, size in pairs), flush=True)
    median = {pair: statistics.median(s) for pair, s in seconds.items()}
    best = {impl: min(sizes, key=lambda size: median[impl, size]) for impl in IMPLS}
    return {
        "inputs": what, "beam_size": args.beam, "repeats": args.decode_repeats, "sizes": sizes,
        "seconds": {f"{impl} {size}": seconds[impl, size] for impl, size in pairs},
        "ratio_at_size": {str(size): median["torch", size] / median["minitransformer", size]
                          for size in sizes},
        "best_size": best,
        "ratio_at_best_sizes": (median["torch", best["torch"]]
                                / median["minitransformer", best["minitransformer"]]),
        "same_hypotheses": all(h == hyps[pairs[0]] for h in hyps.values()),
    }


# ----------------------------------------------------------------------------- main

def machine_info(args) -> dict:
    try:
        numpy_blas = np.__config__.CONFIG["Build Dependencies"]["blas"]["name"]
    except (AttributeError, KeyError):
        numpy_blas = "unknown BLAS"
    info = {"platform": platform.platform(), "cpu": cpu_name(),
            "cpu_generation": cpu_generation(), "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "numpy": np.__version__, "numpy_blas": numpy_blas, "torch": torch.__version__,
            "torch_blas": "MKL" if torch.backends.mkl.is_available() else "no MKL",
            # the kernels each side's products run: OpenBLAS's for this processor, unless
            # OPENBLAS_CORETYPE names others; torch's vector instructions (MKL picks its own)
            "numpy_blas_kernels": blas(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "kernel_environment": {v: os.environ.get(v) for v in KERNEL_VARIABLES},
            "threads": args.threads, "minitransformer_kernels": kernels(),
            "thread_environment": {v: os.environ.get(v)
                                   for v in (*THREAD_VARIABLES, "OPENBLAS_THREAD_TIMEOUT")},
            "load_average_at_start": os.getloadavg()[0]}
    if args.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cupy"] = backend.get_backend("cuda").xp.__version__
        info["torch_cuda"] = torch.version.cuda
    return info


def cuda_usable() -> bool:
    """Whether both CuPy and PyTorch see a GPU; minitransformer uses it from then on."""
    try:
        mt.use("cuda")
    except mt.DeviceError:
        return False
    return torch.cuda.is_available()


def pin_threads(threads: int, argv: list[str]) -> None:
    """NumPy's OpenBLAS reads its thread count once, when it loads: unless the environment
    already says ``threads``, run the script again with it set (torch gets it too). Also
    OPENBLAS_THREAD_TIMEOUT=4, which minitransformer sets when it is imported before NumPy
    (backend.py) and this script, importing NumPy first, must set itself."""
    wanted = {**dict.fromkeys(THREAD_VARIABLES, str(threads)),
              "OPENBLAS_THREAD_TIMEOUT": os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4")}
    if all(os.environ.get(name) == value for name, value in wanted.items()):
        return
    print(f"running again with {'='.join(THREAD_VARIABLES)}={threads}, "
          f"OPENBLAS_THREAD_TIMEOUT={wanted['OPENBLAS_THREAD_TIMEOUT']}", flush=True)
    env = {**os.environ, **wanted}
    script = Path(sys.argv[0]).resolve()  # this script, or another bench script using this
    os.execve(sys.executable, [sys.executable, str(script), *argv], env)


# what --only can pick; parity always runs; "graphs" (bench/cuda_graphs.py) only on a GPU
PARTS = ("training", "memory", "decoding", "graphs")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", "--config", nargs="+", default=["small", "base"])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--repeats", type=int, help="timed steps per length (default: 5 for "
                        "small, 3 for larger), after one warm-up step")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of both")
    parser.add_argument("--kernels", choices=["numpy", "compiled"], default=None,
                        help="minitransformer's CPU kernels (default: compiled where Numba "
                             "is installed)")
    parser.add_argument("--memory-lengths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--decode-batch", type=int, nargs="+", default=None,
                        help="sentences per decoding batch, the same for both (default: what "
                             "minitransformer's translate takes, 128 per CPU thread up to "
                             "256, so 256 with 2 threads); several sizes: beam search with "
                             "the cache at each size instead of the decoding cases")
    parser.add_argument("--decode-repeats", type=int, default=6,
                        help="runs of each decoding case per implementation, or rounds over "
                             "the batch sizes (even: each goes first as often)")
    parser.add_argument("--decode-alternation", choices=["run", "batch"], default="run",
                        help="run: each timed run decodes every batch with one library, then "
                             "with the other (what a user of either sees); batch: every batch "
                             "by both, one straight after the other (less of the machine's "
                             "drift)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty α")
    parser.add_argument("--forced-length", type=int, default=50)
    parser.add_argument("--data", default=str(SHARED), help="the Multi30k folder")
    parser.add_argument("--checkpoint", default=str(CHECKPOINT),
                        help="the trained model to decode with (default: the Multi30k run's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="smoke test: small only, "
                        "lengths 16 32, 1 repeat, 100 sentences, memory at 32")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS),
                        help="measure only these parts (parity always runs first)")
    parser.add_argument("--output", help="JSON (default bench/results/compare_torch.<machine>"
                        "[.quick][.<parts>].json)")
    parser.add_argument("--markdown", help="Markdown tables (default: --output with .md)")
    parser.add_argument("--_memory-worker", dest="memory_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.configs, args.lengths, args.repeats = ["small"], [16, 32], 1
        args.sentences, args.memory_lengths = min(args.sentences, 100), [32]
        args.decode_repeats = 1
    if args.output is None:
        gpu = args.device == "cuda" and torch.cuda.is_available()
        suffix = "." + kind(torch.cuda.get_device_name() if gpu else None)
        suffix += ".quick" if args.quick else ""
        every = [part for part in PARTS if part != "graphs" or gpu]
        parts = [part for part in every if part in args.only]
        if "decoding" in parts and len(args.decode_batch or ()) > 1:
            parts[parts.index("decoding")] = "decoding-batch-sizes"
        if parts != every:  # a partial run does not replace the full results
            suffix += "." + "-".join(parts)
        args.output = str(HERE / "results" / f"compare_torch{suffix}.json")
    args.markdown = args.markdown or str(Path(args.output).with_suffix(".md"))
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.memory_worker:
        print(json.dumps(memory_worker(json.loads(args.memory_worker))))
        return 0
    if args.kernels is not None:  # the memory workers, run as processes, inherit it
        os.environ["MINITRANSFORMER_COMPILED"] = "1" if args.kernels == "compiled" else "0"
        mt.set_compiled_kernels(args.kernels == "compiled")
    pin_threads(args.threads, argv)
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not cuda_usable():
        print("compare_torch: --device cuda needs an NVIDIA GPU that both CuPy and PyTorch "
              "can use, and there is none here.", file=sys.stderr)
        return 1
    configs = {name: TransformerConfig.named(name, args.vocab_size) for name in args.configs}
    results = {
        "benchmark": "minitransformer vs PyTorch eager: parity, training step, MFU, memory, "
                     "decoding", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": args.device, "machine": machine_info(args), "commit": commit(),
        "vocab_size": args.vocab_size,
        "tokens": args.tokens, "configs": {
            name: {**c.to_dict(), "num_parameters": Transformer(c).num_parameters()}
            for name, c in configs.items()},
    }
    print(f"{results['machine']['cpu']}, {args.threads} threads, device {args.device}, "
          f"minitransformer's kernels: {results['machine']['minitransformer_kernels']}", flush=True)
    if args.device == "cpu" and os.getloadavg()[0] > 0.5:
        print(f"warning: the machine is busy (load average {os.getloadavg()[0]:.1f}); BLAS "
              "threads that wait for a busy core make every timing here much slower",
              flush=True)

    print("\n== 1. parity (dropout off, padded batch)", flush=True)
    results["parity"] = {}
    for name, config in configs.items():
        parity = results["parity"][name] = check_parity(config, args.device)
        for dtype in ("float64", "float32"):
            p = parity[dtype]
            print(f"  {name} {dtype}: {p['comparisons']} comparisons, worst relative error "
                  f"{p['worst']:.1e} (limit {p['limit']:g}; batch of seed "
                  f"{parity['batch_seed']})", flush=True)
            for what, error in p["disagreeing"].items():
                print(f"    {what}: {error:.1e}  <-- disagrees")
        if parity["float64"]["disagreeing"] or parity["float32"]["disagreeing"]:
            print("parity failed: the two models do not compute the same thing", flush=True)
            return 1

    if "training" in args.only:
        print("\n== float32 matmul rate", flush=True)
        sizes = (4096, 8192) if args.device == "cuda" else (1024, 2048)
        results["matmul_peak"] = {lib: matmul_rate(lib, args.device, sizes)
                                  for lib in ("numpy", "torch")}
        for lib, rate in results["matmul_peak"].items():
            print(f"  {lib}: {rate['flops_per_s'] / 1e9:.1f} GFLOP/s", flush=True)

        print("\n== 2-3. training step", flush=True)
        peak = results["matmul_peak"]["numpy"]["flops_per_s"]
        results["training"] = {name: time_training(name, config, args, peak)
                               for name, config in configs.items()}
        print(training_table(results["training"]) + "\n\n" + mfu_table(results["training"]),
              flush=True)
        if args.device == "cpu":
            print("\nstep time over the matmul floor (the step's products alone, floor.py)\n"
                  + floor_table(results["training"]), flush=True)

    if "memory" in args.only:
        measure_all_memory(results, configs, args)
    if "decoding" in args.only and len(args.decode_batch or ()) > 1:
        print("\n== 5. beam search at each batch size", flush=True)
        results["decoding_batch_sizes"] = time_batch_sizes(args)
        print(batch_size_table(results["decoding_batch_sizes"]), flush=True)
    elif "decoding" in args.only:
        print("\n== 5. decoding", flush=True)
        results["decoding"] = time_decoding(args)
        print(decoding_tables(results["decoding"]), flush=True)

    if args.device == "cuda" and "graphs" in args.only:  # the steps replayed as CUDA graphs
        import cuda_graphs
        graph_args = cuda_graphs.parse_args(["--config", args.configs[0], "--vocab-size",
                                             str(args.vocab_size), "--checkpoint",
                                             args.checkpoint, "--data", args.data]
                                            + (["--quick"] if args.quick else []))
        results["cuda_graphs"] = cuda_graphs.measure(graph_args)
    results["cuda"] = ("not measured (no GPU)" if args.device == "cpu"
                       else {"gpu": results["machine"]["gpu"], "measured": "every section"})
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    Path(args.markdown).write_text(report(results) + (
        "\n" + cuda_graphs.report(results["cuda_graphs"]) if "cuda_graphs" in results else ""))
    print(f"\nwrote {args.output} and {args.markdown}", flush=True)
    return 0


def measure_all_memory(results: dict, configs: dict, args: argparse.Namespace) -> None:
    print("\n== 4. memory of two training steps, fresh process each", flush=True)
    moments = ", ".join(f"{name} {8 * c['num_parameters'] / MiB:,.0f} MiB"
                        for name, c in results["configs"].items())
    results["memory_note"] = (
        "Each implementation in a fresh process: one step of a tiny model first, which loads "
        "the implementation's code (minitransformer's compiled kernels: Numba and LLVM), then "
        "baseline = memory in use once model and Adam are built, peak = maximum over two "
        "training steps, step = peak − baseline. "
        + ("Resident set size (RSS; its peak VmHWM is reset at the baseline); both processes "
           "load the same libraries (NumPy, torch, minitransformer), and minitransformer's "
           "with the compiled kernels Numba as well. "
           if args.device == "cpu" else
           "GPU bytes allocated (CuPy's pool in use; torch.cuda.max_memory_allocated); the "
           "JSON also has the bytes each allocator holds. ")
        + f"Adam's two moments ({moments}) are in minitransformer's baseline (allocated when "
          "the optimizer is built) but in torch's step (allocated at the first step).")
    results["memory"] = {name: measure_memory(name, config, args)
                         for name, config in configs.items()}
    print(memory_table(results["memory"]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
