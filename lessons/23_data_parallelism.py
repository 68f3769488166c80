# %% [markdown]
# # Chapter 23 — Data parallelism: many workers, one gradient
#
# §5.2 of the paper, "Hardware and Schedule":
#
# > We trained our models on one machine with 8 NVIDIA P100 GPUs. For our base models using
# > the hyperparameters described throughout the paper, each training step took about 0.4
# > seconds.
#
# and §5.1: "Each training batch contained a set of sentence pairs containing approximately
# 25000 source tokens and 25000 target tokens." The paper does not say how the eight GPUs
# shared a step. The simplest way, and the one its code (tensor2tensor) used, is *data
# parallelism*: every worker holds the whole model, computes the gradient of its own share of
# the batch, the workers add their gradients up, and each applies the same update to the same
# weights, so the copies never drift apart and never need to be sent again.
#
# This chapter shows why the sum of the workers' gradients is the whole batch's gradient (on
# a real model, to the last digits), how a natural shortcut gets it wrong, how the workers
# add their gradients up without anyone becoming a bottleneck (the ring all-reduce, written
# in NumPy and its bytes counted), what network that needs, estimated from a step timed on
# this machine, and finally the library's own `mpiexec -n N minitransformer train`. The
# workers here are simulated in one process: nothing below needs MPI or a second machine. It
# builds on chapter 12 (the loss), 13 (Adam) and 16 (the trainer).

# %%
import os
import threading
import time
import types
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.data.batching import TokenBatcher, make_batch
from minitransformer.distributed import Communicator, allreduce_gradients
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam, noam_rate
from minitransformer.translation.corpus import load_corpus, prepare

FAST = os.environ.get("MINITRANSFORMER_FAST") == "1"  # the tests run every lesson quickly
FIGURES = Path("figures")
FIGURES.mkdir(exist_ok=True)
mt.manual_seed(0)
rng = np.random.default_rng(0)

# %% [markdown]
# ## The gradient of a sum is the sum of the gradients
#
# The loss of a step is a mean over its $n$ target tokens, $L = \frac{1}{n} \sum_{t} \ell_t$
# (chapter 12's label-smoothed loss of each token). Split the step's batches among $N$
# workers, worker $k$ holding the set $W_k$ of $n_k$ tokens. Differentiation is linear, so
#
# $$\nabla L = \frac{1}{n} \sum_{t} \nabla \ell_t
#   = \frac{1}{n} \sum_{k=1}^{N} \underbrace{\sum_{t \in W_k} \nabla \ell_t}_{g_k:\
#     \text{worker } k\text{'s summed gradient}}, \qquad n = \sum_k n_k .$$
#
# Each worker computes the gradient of the *sum* of its token losses, the workers add these
# up, and the total is divided by the step's number of tokens. One process does exactly this
# when it *accumulates*: it runs the batches one after another, adding their gradients, before
# one update (`minitransformer train --accumulate 4`). Data parallelism runs the same batches
# side by side.
#
# On the tiny model in float64, with dropout off (its masks come later), and token-bucketed
# batches of the built-in task (chapter 16). The reference is the gradient of the mean loss of
# *one* batch holding all the pairs, padded together:

# %%
corpus = load_corpus("builtin")
tokenizer, data, _ = prepare(corpus, vocab_size=1000, max_len=100)
with mt.default_dtype("float64"):
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, p_dropout=0.0))
params = model.parameters()
n_batches, max_tokens = (4, 200) if FAST else (8, 300)
batches = list(TokenBatcher(data.train, max_tokens, shuffle=True, seed=0))[:n_batches]
print(f"{n_batches} batches of at most {max_tokens} tokens; target tokens:",
      [b.n_tgt_tokens for b in batches])


def summed_gradient(share):
    """The gradient of the sum of the token losses of ``share`` (a worker's batches), flat."""
    for p in params:
        p.grad = None
    for batch in share:
        loss = F.cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1,
                               ignore_index=0)                  # the mean over the batch
        (loss * batch.n_tgt_tokens).backward()                  # a sum over its tokens
    return np.concatenate([p.grad.ravel() for p in params])


everything = make_batch([data.train[i] for b in batches for i in b.indices])
for p in params:
    p.grad = None
F.cross_entropy(model(everything.src, everything.tgt_in), everything.tgt_out, 0.1,
                ignore_index=0).backward()
reference = np.concatenate([p.grad.ravel() for p in params])
print(f"one batch of all {len(everything)} pairs: {everything.n_tgt_tokens} target tokens, "
      f"a gradient of {reference.size:,} numbers")

# %%
n_total = sum(b.n_tgt_tokens for b in batches)
shares = {}
for N in (2, 4):
    shares[N] = [summed_gradient(batches[k::N]) for k in range(N)]   # worker k: k, k+N, ...
    combined = sum(shares[N]) / n_total
    error = np.linalg.norm(combined - reference) / np.linalg.norm(reference)
    print(f"{N} workers, tokens {[sum(b.n_tgt_tokens for b in batches[k::N]) for k in range(N)]}"
          f": |sum of g_k / n - one batch's gradient| / |one batch's| = {error:.1e}")

# %% [markdown]
# A relative error of a few $10^{-16}$, float64's rounding: the additions happen in another
# order, nothing else differs. (Padding changes nothing either: the big batch pads every pair
# to its longest, the small ones to theirs, and the masks and the loss's `ignore_index` make
# the padding invisible.) Worker $k$ takes batches $k, k + N, \ldots$ of the step, as the
# library's workers do.
#
# ## Where it breaks: averaging the averages
#
# A tempting shortcut is for each worker to compute the mean loss of its own tokens, as a
# single process would, and for the workers to average their gradients:
#
# $$\frac{1}{N} \sum_k \frac{g_k}{n_k} = \frac{1}{n} \sum_k \frac{n}{N n_k}\, g_k .$$
#
# Each token of worker $k$ is weighted $n / (N n_k)$ instead of 1: the tokens of a worker with
# fewer tokens count for more. That is a different weighting of the data, not rounding, and it
# is exact only when every $n_k$ is the same. Token-bucketed batches of the same `max_tokens`
# have unequal numbers of real target tokens (the padding and the sources' lengths differ),
# and the last step of an epoch may hand one worker fewer batches than another. Measured, with
# two workers:

# %%
def compare(workers, case):
    """``workers``: (summed gradient g_k, token count n_k) of each worker."""
    counts = [n_k for _, n_k in workers]
    n, N = sum(counts), len(workers)
    exact = sum(g for g, _ in workers) / n
    naive = sum(g / n_k for g, n_k in workers) / N
    error = np.linalg.norm(naive - exact) / np.linalg.norm(exact)
    weights = ", ".join(f"{n / (N * n_k):.3f}" for n_k in counts)
    print(f"{case:<34} tokens {str(counts):<12} token weights {weights:<13} "
          f"|naive - exact| / |exact| = {error:.1e}")


counts = [sum(b.n_tgt_tokens for b in batches[k::2]) for k in range(2)]
compare(list(zip(shares[2], counts, strict=True)), "a step as above")
last = batches[:3]                           # three batches left at the end of an epoch
compare([(summed_gradient(last[0::2]), last[0].n_tgt_tokens + last[2].n_tgt_tokens),
         (summed_gradient(last[1:2]), last[1].n_tgt_tokens)], "the last step of an epoch")
sizes = [b.n_tgt_tokens for b in TokenBatcher(data.train, max_tokens, shuffle=False)]
common = max(set(sizes), key=sizes.count)    # the most frequent count of target tokens
alike = [b for b in TokenBatcher(data.train, max_tokens, shuffle=False)
         if b.n_tgt_tokens == common][:2]
compare([(summed_gradient([b]), b.n_tgt_tokens) for b in alike], "equal token counts")

# %% [markdown]
# With equal counts the two schemes agree to rounding. With unequal ones they part: by about
# half a percent of the gradient for a step like the first (token counts 4% apart), by about
# a sixth for the lopsided last step of an epoch (twice as many tokens on one worker). And
# it is a bias, not noise that averages out over steps: a token's weight depends on how many
# tokens share its worker, so the pairs that land in batches with fewer real tokens (the most
# padded ones) always count for more. PyTorch's `DistributedDataParallel` averages the
# workers' gradients (their sum divided by $N$), so with a per-worker mean loss it computes
# this weighting, exact when every worker has the same number of tokens (batches of a fixed
# number of sentences of fixed length); fairseq, with token-bucketed batches like ours, sums
# the token losses and divides by the global count, as this library does. The global count
# costs one more number in the reduction.
#
# ## Adding up the gradients: the ring all-reduce
#
# Every worker needs the sum of all the workers' gradient buffers, $B$ bytes each: an
# *all-reduce*. The obvious way sends every buffer to worker 0, which adds them and sends the
# sum back: worker 0 receives $(N - 1) B$ and sends $(N - 1) B$, while the others idle, so the
# time grows with $N$. The *ring* all-reduce (Patarasuk and Yuan, 2009; brought to deep
# learning by Baidu in 2017 and Horovod, Sergeev and Del Balso, 2018) keeps every link busy
# instead. The workers stand in a ring, each sending only to the next, and each buffer is cut
# into $N$ chunks:
#
# 1. **Reduce-scatter**, $N - 1$ steps: at step $s = 0, 1, \ldots, N - 2$ (printed below as
#    steps 1 to $N - 1$) worker $r$ sends its chunk $(r - s) \bmod N$ to worker $r + 1$, which
#    adds it to its own copy of that chunk. After $N - 1$ steps, worker $r$ holds the complete
#    sum of chunk $(r + 1) \bmod N$.
# 2. **All-gather**, $N - 1$ steps: each worker passes the complete chunks along the ring, and
#    the receiver overwrites its copy, until every worker has every complete chunk.
#
# Each worker sends $2(N - 1)$ chunks of $B/N$ bytes: $2 (N - 1) / N \cdot B$, less than $2B$
# for any $N$. In NumPy, over a list of workers' buffers, with the messages of a step taken
# before any is delivered, since on a real network they travel at the same time:

# %%
def ring_allreduce(buffers, states=None):
    """Every worker's buffer replaced by the sum of all of them, along a ring; returns the
    new buffers and the bytes each worker sent. ``states`` (a list) receives after each step
    a (worker, chunk) table of how many workers' contributions each copy holds."""
    N = len(buffers)
    chunks = [np.array_split(b.copy(), N) for b in buffers]          # chunks[r][c]
    held = np.ones((N, N), dtype=int)                                 # (worker, chunk)
    sent = np.zeros(N, dtype=int)
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(N - 1):
            start = -s if phase == "reduce-scatter" else 1 - s
            messages = [(r, (r + start) % N) for r in range(N)]       # (sender, chunk)
            data = [(chunks[r][c].copy(), held[r, c]) for r, c in messages]
            for (r, c), (values, count) in zip(messages, data, strict=True):
                receiver = (r + 1) % N
                if phase == "reduce-scatter":
                    chunks[receiver][c] += values
                    held[receiver, c] += count
                else:
                    chunks[receiver][c][...] = values
                    held[receiver, c] = count
                sent[r] += values.nbytes
            if states is not None:
                states.append((f"{phase} {s + 1}", held.copy()))
    return [np.concatenate(c) for c in chunks], sent


states = [("start", np.ones((4, 4), dtype=int))]
summed, sent = ring_allreduce(shares[4], states)
print("four workers' float64 gradients, ring against a plain sum: largest difference",
      f"{max(np.abs(s - sum(shares[4])).max() for s in summed):.1e}, of values up to "
      f"{np.abs(sum(shares[4])).max():.1f}")
print("every worker holds the same bits:", all(np.array_equal(summed[0], s) for s in summed))
for name, held in states:
    print(f"{name:<17}", " | ".join(" ".join(map(str, row)) for row in held))

# %% [markdown]
# Each line is the four workers' copies of the four chunks (worker 0's first), and each digit
# the number of workers' contributions in it. The reduce-scatter builds one complete chunk
# (4) per worker; the all-gather copies them round. The ring adds in its own order, so its
# sum may differ from a plain sum in the last bits; but each chunk is added up once, by one
# worker, and only copied afterwards, so **every worker ends with the same bits**. That is
# what keeps the replicas identical: they apply the same update to the same weights.
#
# ## Bytes per worker
#
# The tiny model's gradient, in float32 as it trains, for 2, 4 and 8 workers; the naive scheme
# beside it, where worker 0 sends the sum back to each of the others:

# %%
def naive_allreduce(buffers):
    """Everyone sends to worker 0, which sums and sends the sum back to each."""
    N, nbytes = len(buffers), buffers[0].nbytes
    total = sum(buffers)
    sent = np.array([(N - 1) * nbytes] + [nbytes] * (N - 1))
    return [total.copy() for _ in buffers], sent


n_params = sum(p.size for p in params)
B = 4 * n_params
print(f"the tiny model: {n_params:,} parameters, a float32 gradient of B = {B:,} bytes")
print(f"{'N':>3} {'ring, each worker':>19} {'/ B':>6} {'naive, worker 0':>17} {'/ B':>5} "
      f"{'naive, the others':>18}   ring = plain sum (float32)")
table = {}
for N in (2, 4, 8):
    buffers = [rng.standard_normal(n_params).astype(np.float32) for _ in range(N)]
    ring, ring_sent = ring_allreduce(buffers)
    _, naive_sent = naive_allreduce(buffers)
    table[N] = (ring_sent, naive_sent)
    agree = max(np.abs(r - sum(buffers)).max() for r in ring)
    print(f"{N:>3} {ring_sent.max():>19,} {ring_sent.max() / B:>6.3f} {naive_sent[0]:>17,} "
          f"{naive_sent[0] / B:>5.0f} {naive_sent[1]:>18,}   largest difference {agree:.0e}")

# %% [markdown]
# With two workers the schemes cost the same (each sends $B$). From then on the ring's
# worker sends at most $2B$ however many workers there are, while the naive worker 0 sends
# $(N - 1) B$ and receives as much: its link is the bottleneck, and adding workers slows the
# reduction down. (The float32 differences from the plain sum, a few $10^{-6}$ on sums that
# reach about 10, are float32's rounding of additions made in another order.)

# %%
figure, axes = plt.subplot_mosaic([[f"s{i}" for i in range(7)], ["bytes"] * 7],
                                  figsize=(11, 6.2), height_ratios=(1, 1.5))
for i, (name, held) in enumerate(states):
    axis = axes[f"s{i}"]
    axis.imshow(held, cmap="Blues", vmin=0, vmax=4.5)
    for (r, c), count in np.ndenumerate(held):
        axis.text(c, r, count, ha="center", va="center",
                  color="white" if count == 4 else "black", fontsize=10)
    axis.set_title(name.replace(" ", "\n", 1), fontsize=9)
    axis.set_xticks(range(4), labels=range(4), fontsize=8)
    axis.set_yticks(range(4), labels=range(4) if i == 0 else [], fontsize=8)
    axis.set_xlabel("chunk", fontsize=8)
axes["s0"].set_ylabel("worker", fontsize=8)
sizes = np.arange(2, 17)
axis = axes["bytes"]
axis.plot(sizes, 2 * (sizes - 1) / sizes, "o-", label="ring: each worker, 2(N-1)/N")
axis.plot(sizes, sizes - 1, "s--", color="tab:red", label="naive: worker 0, N-1")
for i in (0, 1):                                 # the ring, the naive scheme
    axis.plot(list(table), [table[N][i].max() / B for N in table], "*", color="black",
              markersize=11, label="counted by the simulations above" if i == 0 else None)
axis.axhline(2, color="gray", linewidth=0.8, label="2: the ring's bound, whatever N")
axis.set_xlabel("workers N")
axis.set_ylabel("bytes sent / B")
axis.set_title("Bytes sent per step by the busiest worker, in units of the gradient's size B",
               fontsize=10)
axis.legend(loc="upper left")
figure.suptitle("The ring all-reduce of 4 workers: how many workers' contributions each "
                "copy of each chunk holds, step by step", fontsize=10)
figure.tight_layout()
figure.savefig(FIGURES / "23_ring_allreduce.png", dpi=120)
plt.show()

# %% [markdown]
# ## What network would it need? An estimate from this machine
#
# With data parallelism each worker still computes a whole batch per step; what the workers
# add is the all-reduce. If the links carry $\beta$ bytes per second, the ring costs about
# $2 (N - 1)/N \cdot B / \beta$ seconds, plus a latency for each of its $2(N - 1)$ messages,
# ignored here (the $\alpha$–$\beta$ model of Thakur, Rabenseifner and Gropp, 2005, who write
# $\beta$ for its inverse, the time per byte; latency matters for small buffers like this
# one). Time one training step of the tiny model on a
# batch of 4,000 tokens (the default of `minitransformer train`) on this machine, and ask at
# what bandwidth the reduction would cost 10% of it:

# %%
mt.manual_seed(0)
model32 = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size))
optimizer = Adam(model32.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
batch = next(iter(TokenBatcher(data.train, 4000, shuffle=True, seed=0)))
seconds = []
for _ in range(2 if FAST else 7):                 # the first also allocates: left out
    start = time.perf_counter()
    optimizer.zero_grad()
    loss = F.cross_entropy(model32(batch.src, batch.tgt_in), batch.tgt_out, 0.1, ignore_index=0)
    loss.backward()
    optimizer.step()
    seconds.append(time.perf_counter() - start)
step = min(seconds[1:])                   # the run least disturbed by anything else
print(f"one step on {len(batch)} pairs ({batch.n_tgt_tokens} target tokens), the fastest "
      f"of {len(seconds) - 1}: {1000 * step:.0f} ms on this machine, {mt.get_num_threads()} "
      "threads")
for N in (2, 4, 8):
    moved = 2 * (N - 1) / N * B
    print(f"N = {N}: each worker sends {moved / 1e3:,.0f} kB per step; 10% of the step at "
          f"{moved / (0.1 * step) / 1e6:,.0f} MB/s or more")

# %% [markdown]
# An estimate from a step timed on this machine, no more: a step of some tens of milliseconds on
# two cores asks for some tens of MB/s, up to about a hundred for 8 workers, to keep the tiny
# model's reduction under a tenth of it, which a gigabit Ethernet (125 MB/s) provides. A faster
# machine shortens the step and raises the bandwidth needed in proportion; and for a buffer this
# small the latency of the $2(N - 1)$ messages matters before their bandwidth does (exercise 3).
# The same arithmetic for the paper's base model, from the paper's own numbers: 8 GPUs, a step
# of 0.4 s, and the library's count of its parameters with a shared vocabulary of 37,000
# (chapter 10):

# %%
base = Transformer(TransformerConfig.named("base", 37000)).num_parameters()
moved = 2 * 7 / 8 * 4 * base
print(f"base model: {base:,} parameters, {4 * base / 1e6:.0f} MB of float32 gradient; "
      f"the ring sends {moved / 1e6:.0f} MB per worker per step; 10% of 0.4 s needs "
      f"{moved / 0.04 / 1e9:.1f} GB/s")

# %% [markdown]
# About 11 GB/s in each direction: the order of a PCIe 3.0 ×16 link (about 16 GB/s), the
# links between GPUs of one machine, and nine times a 10-gigabit Ethernet (1.25 GB/s). Across
# machines, models of this size need fast interconnects, or reductions that overlap with the
# backward (a layer's gradients travel while earlier layers' are still being computed), which
# this library does not do: it reduces once, after the whole backward.
#
# ## The real thing: `mpiexec -n N minitransformer train`
#
# The library's data parallelism (`minitransformer.distributed`) runs one process per
# worker, started by MPI (the Message Passing Interface, the standard library of
# communication between processes on one machine or many; each process has a number, its
# *rank*, 0 to $N - 1$):
#
# ```bash
# pip install -e ".[distributed]"       # mpi4py, and MPICH's wheel with its mpiexec
# mpiexec -n 2 minitransformer train --max-steps 20 --accumulate 1 --out runs/two
# minitransformer train --max-steps 20 --accumulate 2 --out runs/one    # the same arithmetic
# ```
#
# A step with $N$ processes takes `accumulate` × $N$ batches; process $r$ computes batches
# $r, r + N, \ldots$, each batch's loss the sum of its token losses (as above) divided by the
# step's total target tokens, known before the step begins (`cross_entropy`'s `normalizer`:
# the division is then part of the loss's own gradient, not a pass over every gradient
# afterwards); `allreduce_gradients` sums the gradients of all parameters across the processes
# in one flat buffer (one reduction per step, not one per parameter: each message pays a
# latency) into the step's mean gradient, and every process applies the same Adam update.
# So `mpiexec -n 2 ... --accumulate 1` computes what `--accumulate 2` computes in one process;
# run on a 2-core machine, the two runs' losses over 20 steps agreed to within $5 \times
# 10^{-7}$ (losses near 7), float32's rounding of sums taken in another order.
#
# - **Rank 0** (the first process) alone writes the log, the checkpoints and the progress
#   bar, and translates the test set at the end; every process holds the same weights anyway.
# - **Validation** is sharded the same way: each process computes the losses of every $N$-th
#   validation batch and translates every $N$-th sentence for BLEU, and the sums (and the
#   translations) are gathered.
# - **Dropout** is seeded per batch from (seed, step, index of the batch in the step), so
#   process $r$ draws for batch $r$ the very masks one process would draw for it.
# - Each process takes its share of the cores (or, with `--device cuda`, its own GPU, and the
#   gradients are reduced between the GPUs by NCCL, NVIDIA's library of collective
#   communication, without a copy to the host).
#
# MPI's all-reduce picks its algorithm by message size and number of processes (for long
# messages MPICH's is a reduce-scatter followed by an all-gather, the ring's two phases with
# other partners: Thakur, Rabenseifner and Gropp, 2005); NCCL uses rings and trees. The
# library hides the communication behind a small interface,
# `minitransformer.distributed.Communicator`, whose `allreduce_sum(array)` every process calls
# with its own array, and which leaves in each the sum over all. That interface lets this
# chapter run the library's `allreduce_gradients` on in-process workers: one thread per
# worker, meeting at a barrier (a point where each thread waits until all have arrived), with
# the ring above doing the sum.

# %%
class InProcess(Communicator):
    """Worker ``rank`` of ``shared.size`` workers running as threads of this process."""

    def __init__(self, rank, shared):
        self.rank, self.size, self.shared = rank, shared.size, shared

    def allreduce_sum(self, array):
        shared = self.shared
        shared.arrays[self.rank] = array
        if shared.barrier.wait() == 0:            # once everyone has arrived, one thread
            shared.sums, _ = ring_allreduce(shared.arrays)    # runs the ring for all
        shared.barrier.wait()
        array[...] = shared.sums[self.rank]
        shared.barrier.wait()                     # before anyone starts the next reduction


def in_process(N):
    shared = types.SimpleNamespace(size=N, arrays=[None] * N, sums=None,
                                   barrier=threading.Barrier(N))
    return [InProcess(rank, shared) for rank in range(N)]


def reduce_together(models, communicators):
    threads = [threading.Thread(target=allreduce_gradients, args=(m.parameters(), c))
               for m, c in zip(models, communicators, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

# %% [markdown]
# Now train: two workers, each with `accumulate` 2, against one process with `accumulate` 4,
# the tiny model in float32 with dropout 0.1, on batches of 500 tokens (250 in the fast mode,
# which takes 2 steps instead of 8). Each worker computes its batches with the dropout seed
# of (step, batch index), as the library does; the reduction sums; every replica divides by
# the step's tokens and steps its own Adam.

# %%
def local_share(model, group, rank, N, step):
    """Worker ``rank``'s batches of the step: its summed token loss (gradients left in the
    parameters)."""
    model.train()
    total = 0.0
    for i in range(rank, len(group), N):
        mt.manual_seed(step * 64 + i)             # the seed of (step, batch), whoever runs it
        batch = group[i]
        loss = F.cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1,
                               ignore_index=0)
        (loss * batch.n_tgt_tokens).backward()
        total += loss.item() * batch.n_tgt_tokens
    return total


def update(model, optimizer, n_tokens, step):
    for p in model.parameters():
        if p.grad is not None:
            p.grad *= 1.0 / n_tokens              # the step's mean over every worker's tokens
    optimizer.lr = noam_rate(step + 1, model.config.d_model, 100)
    optimizer.step()


N, per_step = 2, 4
steps, tokens = (2, 250) if FAST else (8, 500)
mt.manual_seed(0)
single = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size))
replicas = [Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size)) for _ in range(N)]
for replica in replicas:
    replica.load_state_dict(single.state_dict())   # the library broadcasts rank 0's weights
optimizers = [Adam(m.parameters(), lr=0.0, eps=1e-9) for m in [single, *replicas]]
communicators = in_process(N)
train_batches = list(TokenBatcher(data.train, tokens, shuffle=True, seed=0))
for step in range(steps):
    group = train_batches[step * per_step:(step + 1) * per_step]
    n_tokens = sum(b.n_tgt_tokens for b in group)
    for optimizer in optimizers:
        optimizer.zero_grad()
    one = local_share(single, group, 0, 1, step) / n_tokens     # one process, accumulate 4
    update(single, optimizers[0], n_tokens, step)
    many = sum(local_share(replicas[r], group, r, N, step) for r in range(N)) / n_tokens
    reduce_together(replicas, communicators)                    # the library's reduction
    for replica, optimizer in zip(replicas, optimizers[1:], strict=True):
        update(replica, optimizer, n_tokens, step)
    drift = max(np.abs(a.data - b.data).max()
                for a, b in zip(replicas[0].parameters(), replicas[1].parameters(),
                                strict=True))
    apart = max(np.abs(a.data - b.data).max()
                for a, b in zip(single.parameters(), replicas[0].parameters(), strict=True))
    print(f"step {step + 1}: loss one process {one:.7f}, two workers {many:.7f} (apart "
          f"{abs(one - many):.0e}); weights: the replicas apart {drift:.0e}, replica and "
          f"single process {apart:.0e}")

# %% [markdown]
# The losses agree to five digits or more, and the two replicas hold identical weights after
# every step (difference 0: the ring gives both the same bits). The single process's weights
# are not quite the replicas', though: they drift apart, a little more at every step, by up to
# about $10^{-3}$ in the full mode's 8 steps, far more than float32's rounding. Which weights?

# %%
difference = np.concatenate([np.abs(a.data - b.data).ravel() for a, b in
                             zip(single.parameters(), replicas[0].parameters(), strict=True)])
gradient = np.concatenate([np.abs(p.grad).ravel() for p in single.parameters()])
moved = difference > 1e-6
print(f"{moved.sum()} of {moved.size:,} weights differ by more than 1e-6; the median "
      f"|gradient| of the last step is {np.median(gradient[moved]):.0e} at those, "
      f"{np.median(gradient[~moved]):.0e} at the others")
print(f"{(difference > 0).sum():,} differ at all, {(difference > 1e-7).sum()} by more than "
      f"1e-7; those above 1e-6, by parameter:")
where = {}
for (name, a), b in zip(single.named_parameters(), replicas[0].parameters(), strict=True):
    n = int((np.abs(a.data - b.data) > 1e-6).sum())
    if n:
        kind = ".".join(part for part in name.split(".") if not part.isdigit())
        where[kind] = where.get(kind, 0) + n
for kind, n in where.items():
    print(f"  {kind}: {n}")

# %% [markdown]
# In the full mode about two hundred of the 74,752 differ by more than $10^{-6}$, almost all of
# them the biases of the attention keys, and the gradients there are millions of times smaller
# than the others'. (The gap starts at $10^{-6}$ after step 1.) The two runs add the same four
# batch gradients in another order, $(g_0 + g_2) + (g_1 + g_3)$ against
# $((g_0 + g_1) + g_2) + g_3$, so their sums differ in float32's last bits. Where the true
# gradient is zero those bits are all there is, and a key bias's is: it shifts all of a query's
# scores by the same amount, which the softmax ignores (chapter 4). Adam divides each gradient
# by its own running size (chapter 13), so a gradient of $10^{-10}$ made of rounding still moves
# its weight by a sizeable fraction of a step ($\epsilon = 10^{-9}$ is not much larger), in a
# direction the rounding chose, another in each run. Thousands of other weights differ too, the
# rounding of the sums carried into the next step, but nearly all by less than $10^{-7}$ after
# these 8 steps, and the losses agree. Neither run is more right than the other: both add the
# same numbers, in different orders.
#
# ## Exercises
#
# 1. Two workers hold $n_0$ and $n_1$ target tokens. In the naive scheme (each worker averages
#    over its own tokens, then the workers' gradients are averaged), how much does a token of
#    worker 1 weigh relative to a token of worker 0? For what ratio $n_0 / n_1$ does it weigh
#    twice as much, and what does the chapter's "last step of an epoch" case give?
# 2. Run `ring_allreduce` on three workers whose buffers have 10 numbers each (the chunks
#    cannot all be the same size). Is the result still the plain sum on every worker? How
#    many bytes does each worker send, and how does it compare with $2(N-1)/N \cdot B$?
# 3. The chapter's estimate ignores latency. With $\alpha = 50\ \mu s$ per message and
#    $\beta = 1.25$ GB/s (10-gigabit Ethernet), the ring's time is
#    $2(N - 1)\alpha + 2(N - 1)/N \cdot B/\beta$. For $N = 8$, which term is larger for the
#    tiny model's float32 gradient, and which for the base model's?
# 4. The last step of an epoch can have fewer batches than workers. Give one of two simulated
#    workers no batch in a step (its gradients stay `None`) and run `reduce_together` with the
#    chapter's `InProcess` communicators: what does that worker contribute, and is the update
#    still the one a single process makes from the batches that were computed?
