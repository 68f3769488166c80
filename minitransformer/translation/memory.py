"""Memory estimated before it is spent: decoding, training and averaging checkpoints.

Every large array of these three jobs has a shape known before the first one is allocated,
so their peak memory is arithmetic on the configuration and the batch shapes. The commands
compare it with what is available (``available_memory``): decoding lowers its batch to fit
and says so (``translator.py``), training and averaging refuse at once with the numbers and
the option to change, instead of being killed after minutes or hours.

What is available: ``MINITRANSFORMER_MEMORY_LIMIT`` when set (bytes, or with a suffix K, M,
G or T, powers of 1024: ``200M``, ``1.5G``), which every check takes as the free memory in
place of what the machine reports (each job's estimate is compared with it alone: it is not
a budget of the whole process, whose model and libraries it does not count); else, for a
model on the GPU, the device's free memory plus the free blocks of CuPy's pool; else the
host's ``MemAvailable`` (``/proc/meminfo``; free pages from ``os.sysconf`` elsewhere),
lowered to the room left under a cgroup's memory limit (a container's). Where none of these
can be read, nothing is refused. With several processes on one machine (``mpiexec``) each
compares its own estimate with the whole machine's free memory.

Each estimate counts the arrays the code allocates (float32: f = 4 bytes, int64: 8), with

    B sentences   S source length   T target length   L output limit (S + 50)   K beam
    N layers   C d_model   H heads   F d_ff   V target vocabulary   P parameters

**Decoding** one batch (``decode.py``, with the cache), beyond the model, at its last step
t = L, where the caches are longest: the encoder's memory (B, S, C) and every layer's
cross-attention keys and values, 2·N·B·S·C; the self-attention caches, 2·N·B·K·L·C; the
hypotheses (B, K, L), twice while they are concatenated; then, in turn, beside the logits
(B·K, V) of the step before: one layer's activations, with (beam search) its keys and
values again while they are reordered (greedy writes into its caches' buffers in place);
choosing the tokens (``_best_continuations``' groups and candidates, or greedy's
exp(z - max)); the finished hypotheses as Python lists (about 70 bytes a token). Besides:
the positional tables, made at the first use, the stacked self-attention weights of every
share of the batch (one per core), on the CPU the copies of Wᵀ that small products read
(``functional/_layout.py``: N·(4·C² + 4·C·F) + V·C), and the block the CPU's workspace
keeps after a product of 32 MiB or more. The encoder's own pass comes first and is counted
when larger. ``translate_n_best`` with alignments adds a teacher-forced pass over the B·n
hypotheses, whose logits (B·n, L, V) often dominate.

**Training** (``training.py``): parameters, gradients and Adam's two moments, 4·P·f, with the
scratch buffer of the largest parameter; for the largest batch of the run, the arrays the
forward keeps for the backward (per encoder layer 8·B·S·C + B·S·F + H·B·S² floats and two
dropout masks; per decoder layer 12·B·T·C + 2·B·S·C + B·T·F + H·B·T·(T + S), three masks;
the embeddings), and the logits and the loss's gradient, 2·B·T·V; then, on the host,
averaging the last checkpoints (one step checkpoint read whole, 3·P·f, beside float64 sums,
2·P·f), which is more than writing one (3·P·f of copies). All gradients are counted as if
they existed at the start of the backward, when the activations are all still there.

**Averaging** (``checkpoint.average_checkpoints``) reads the checkpoints one at a time into
float64 sums: the largest file's arrays and its largest array again (reading, checking),
plus 2 bytes for each byte of the model's.

Measured with ``tracemalloc`` (NumPy reports its arrays to it) by ``bench/memory_estimates.py``,
each case in a fresh process with one thread, peak against estimate (MiB), on the 2-core Zen 5
EPYC at 22d5e8d (``bench/results/memory_estimates.epyc-22d5e8d.md``). Decoding runs random
weights whose hypotheses never end (the longest search), each search its model's first (its
positional table made inside it, as in a translator's first batch); training is the trainer's
step (its loss over the step's tokens, the logits held through the backward):

    decoding, tiny model (V 1,000), 256 sentences of 25 tokens, beam 4    67.0   69.4
        the same, greedy                                                  16.2   17.8
    small model (V 8,000), 128 sentences of 30 tokens, beam 4            385    397
        256 sentences, greedy                                            210    224
        32 sentences, beam 16                                            365    377
    base model (V 8,000), 16 sentences of 30 tokens, beam 4              313    314
    aligning 128 hypotheses of 80 tokens, small model                    498    521
    training step beyond the parameters, tiny (V 1,000), B 160 S 22 T 25  67.9   68.1
        small, B 100 S 40 T 40 (4,000 tokens)                            746    763
        small, B 40 S 100 T 100                                          779    796
        base, B 50 S 40 T 40                                            1380   1552
    averaging 5 step checkpoints of the small model                      147    153
        2 of the base model                                              925    936

The estimates are 0.3 to 12 % above the measured peaks (the most for the base model's step,
whose gradients are counted whole from the start of the backward; the least for the tiny
model's step, 0.3 %, and the base model's beam search, 0.4 %), none below. With more than one
core a batch is decoded in shares on worker processes, whose arrays one process's tracemalloc
does not see, so the script measures with one. A training step's first peak includes Adam's
moments and the workspace's blocks for the (B·T, V) arrays, which the process then holds and
later steps reuse: the small model's first step allocates 746 MiB, its second, with the same
optimizer, 442 MiB anew. The interpreter and the libraries (a few hundred MiB) are not
counted: they are spent before any estimate is made.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import backend
from ..functional import _blocks
from ..functional._workspace import MIN_BYTES as WORKSPACE_MIN_BYTES
from .decode import MIN_SHARE

ENVIRONMENT_VARIABLE = "MINITRANSFORMER_MEMORY_LIMIT"
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
PYTHON_TOKEN = 70  # bytes of a token in a Python list of ids and one of log-probabilities
BLOCK_SCRATCH = 2**18  # small arrays and Python objects besides those counted
METADATA = 2**16  # a checkpoint's meta.json: configuration, state, a checksum per array


class MemoryLimitError(ValueError):
    """A job would need more memory than is available (or the limit given cannot be read);
    the message has both numbers and the option that lowers the need."""


# ----------------------------------------------------------------------------- what there is

def parse_size(text: str) -> int:
    """Bytes from ``"200M"``, ``"1.5G"``, ``"64KiB"`` or ``"1048576"`` (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*", text, re.I)
    if match is None:
        raise MemoryLimitError(f"{ENVIRONMENT_VARIABLE} must be a number of bytes, optionally "
                               f"with a suffix K, M, G or T (e.g. 200M or 1.5G), got {text!r}.")
    return int(float(match[1]) * UNITS[match[2].upper()])


def available_memory(device: str | None = None) -> int | None:
    """Bytes that may still be allocated on ``device`` (default: the current one): the
    environment's limit, the GPU's free memory, or the host's; None when unknown."""
    text = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if text.strip():
        return parse_size(text)
    device = device or backend.current_device()
    if device == "cuda":
        xp = backend.get_backend("cuda").xp
        free, _ = xp.cuda.runtime.memGetInfo()
        return int(free) + int(xp.get_default_memory_pool().free_bytes())
    return host_available()


def host_available() -> int | None:
    """The host's available memory, at most what a cgroup limit leaves; None when unknown."""
    found = None
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    room = _cgroup_room()
    return found if room is None else min(found, room)


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """limit - (usage - inactive file cache) of this process's cgroup (v2, else v1), as a
    container sees its own at ``root``; None without a limit."""
    for limit, usage, stat, cache in (
            ("memory.max", "memory.current", "memory.stat", "inactive_file"),
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes",
             "memory/memory.stat", "total_inactive_file")):
        try:
            cap = (root / limit).read_text().strip()
            if cap == "max" or int(cap) >= 2**60:  # no limit
                return None
            used = int((root / usage).read_text())
            for line in (root / stat).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == cache:
                    used -= int(value)
            return max(int(cap) - used, 0)
        except (OSError, ValueError):
            continue
    return None


def format_bytes(n: float) -> str:
    """``"1.23 GiB"``, ``"380 MiB"``, ``"512 bytes"``: three significant digits."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


# ----------------------------------------------------------------------------- the model

def parameter_count(config: Any) -> int:
    """The parameters of ``Transformer(config)``, from the configuration alone."""
    c = config
    C, F = c.d_model, c.d_ff
    ffn = 2 * C * F + F + C
    encoder = c.n_layers * (4 * (C * C + C) + ffn + 2 * 2 * C) + 2 * C * c.pre_norm
    decoder = c.n_layers * (8 * (C * C + C) + ffn + 3 * 2 * C) + 2 * C * c.pre_norm
    tables = c.src_vocab_size * C + (0 if c.share_embeddings else c.tgt_vocab_size * C)
    positions = 2 * c.max_len * C if c.learned_positions else 0
    output = 0 if c.tie_output else c.tgt_vocab_size * C
    return tables + positions + encoder + decoder + output


def _largest_parameter(config: Any) -> int:
    """The elements of the model's largest parameter (a table, or a feed-forward matrix)."""
    rows = [config.src_vocab_size, config.tgt_vocab_size, config.d_ff]
    return max(rows + [config.max_len] * config.learned_positions) * config.d_model


# ----------------------------------------------------------------------------- decoding

def decoding_bytes(config: Any, batch: int, source_len: int, output_len: int,
                   beam_size: int = 1, alignments: int = 0, itemsize: int = 4,
                   gpu: bool = False) -> int:
    """Peak bytes of decoding ``batch`` sentences padded to ``source_len`` tokens, up to
    ``output_len`` tokens each, with ``beam_size`` (1: greedy), beyond the model itself; with
    ``alignments`` hypotheses also the teacher-forced pass that aligns them. On the CPU a
    batch is decoded in shares, one per core, each with its own copy of the stacked
    self-attention weights (``decode._on_cores``): bytes summed over the processes that
    decode them (the caller and its worker processes, ``_processes.py``, each of which also
    holds some 240 MB of its own)."""
    B, S, L, K, f = batch, max(source_len, 1), max(output_len, 1), beam_size, itemsize
    shares = 1 if gpu else max(1, min(_blocks.WORKERS, B // MIN_SHARE))
    N, C, H, F, V = (config.n_layers, config.d_model, config.n_heads, config.d_ff,
                     config.tgt_vocab_size)
    rows = B * K
    model = 2 * config.max_len * C * f + shares * N * 3 * (C + 1) * C * f  # tables, weights
    if not gpu:  # the copies of Wᵀ that small products read (functional/_layout.py): W^O and
        # the feed-forward layers' of every layer, the decoder's W^Q of cross-attention, and
        # the output projection (stacked projections are the cache's, counted above)
        model += (N * (4 * C * C + 4 * C * F) + V * C) * f
    # the encoder's pass, or making a positional table (in float64) at the first use
    encoder = max(_encoder_pass(config, B, S, f), 3 * config.max_len * C * 8)
    # kept through the search: memory, cross-attention keys and values, self-attention
    # caches, hypotheses (twice while concatenated)
    kept = (B * S * C * f + 2 * N * B * S * C * f + 2 * N * rows * L * C * f
            + 2 * rows * L * (8 + f))
    # one step, in turn, beside the logits (the last step's until the new ones replace
    # them): a layer (one layer's keys and values copied, its activations), choosing
    # tokens, the hypotheses as Python lists
    # (greedy writes each position into its caches' buffers in place; beam search's reorder
    # gathers a layer's keys and values, to which its next step concatenates)
    copied = 2 * rows * L * C * f if K > 1 else 0
    layer = copied + rows * (F + H * L + 8 * C) * f + B * H * K * S * f
    logits = rows * V * f
    if K == 1:  # greedy: exp(z - max) and its sum; out, log-probabilities and prefix (B, L)
        choose = 2 * B * V * f + B * L * (2 * 8 + f)
        final = 0
    else:
        n_cand = min(2 * K, K * V)
        groups = min(V, max(n_cand, V // 64))
        width = -(-V // groups)
        choose = B * (K * groups * (2 * f + 8) + n_cand * width * (3 * 8 + 1 + 3 * f))
        # its first pass runs on blocks of about 2 MiB of logits, two temporaries each
        choose += 2 * min(logits, 2 * 2**20 * (1 if gpu else _blocks.WORKERS))
        final = rows * L * PYTHON_TOKEN
    workspace = _kept(B * S * F * f, B * S * 3 * C * f, rows * F * f)
    peak = model + workspace + max(encoder, kept + logits + max(layer, choose, final))
    if alignments:  # after the search, its hypotheses as Python lists beside one pass
        A, T = alignments, L
        teacher = (A * S * C * f + N * (3 * T + 2 * S) * A * C * f  # memory, caches (q too)
                   + A * H * T * S * f + 2 * A * T * C * f          # weights, input, output
                   + max(A * T * (H * max(T, S) + 2 * C) * f,       # a layer's attention,
                         A * T * (F + 2 * C) * f, A * T * V * f)    # its FFN, the logits
                   + _kept(A * T * F * f) + A * (S + T) * 8)
        peak = max(peak, model + teacher + rows * L * PYTHON_TOKEN)
    return peak + BLOCK_SCRATCH


def _encoder_pass(config: Any, B: int, S: int, f: int) -> int:
    """The encoder's largest layer without gradients (each array freed as soon as nothing
    needs it): input, projections, attention weights and output; or input, hidden, output."""
    C, H, F = config.d_model, config.n_heads, config.d_ff
    return B * S * f * (2 * C + max(3 * C + H * S + C, F + C))


def _kept(*sizes: int) -> int:
    """The block the CPU's workspace keeps after the largest of these arrays is freed: arrays
    of 32 MiB or more come from blocks that stay allocated, for the next step's arrays
    (``functional/_workspace.py``)."""
    return max((n for n in sizes if n >= WORKSPACE_MIN_BYTES), default=0)


def largest_beam(config: Any, source_len: int, output_len: int, available: int,
                 itemsize: int = 4, gpu: bool = False) -> int:
    """The widest beam that decodes one such sentence in ``available`` bytes (0: none), found
    by bisection: it fits, and the next one up does not. The estimate grows with the beam up
    to half the vocabulary; beyond, where each group of candidates becomes a single token, it
    can fall a little (test_memory_properties.py), so there the beam named may not be the
    widest that fits."""
    low, high = 0, config.tgt_vocab_size
    while low < high:  # high + 1 never fits (V + 1 beams are refused anyway)
        mid = (low + high + 1) // 2
        if decoding_bytes(config, 1, source_len, output_len, mid, 0, itemsize,
                          gpu) <= available:
            low = mid
        else:
            high = mid - 1
    return low


# ----------------------------------------------------------------------------- training

@dataclass(frozen=True)
class TrainingPeak:
    """Bytes of a training run: ``state`` (parameters, gradients, Adam's moments) and the
    largest ``step`` on the training device; ``host``, saving or averaging checkpoints."""

    state: int
    step: int
    host: int

    def on(self, gpu: bool) -> tuple[int, int]:
        """(device bytes, host bytes): one sum on the CPU, where both are the same memory."""
        if gpu:
            return self.state + self.step, self.host
        return self.state + max(self.step, self.host), 0


def step_bytes(config: Any, batch: int, source_len: int, target_len: int,
               itemsize: int = 4) -> int:
    """Bytes of one forward and backward of a batch (B, S) -> (B, T): what the forward keeps
    for the backward, and the logits and the loss's gradient (B·T, V), then
    the output projection's gradients (B·T, C) and (V, C). (The parameters' gradients are
    counted whole by ``training_peak``, as if all existed at the start of the backward.)"""
    B, S, T, f = batch, source_len, target_len, itemsize
    N, C, H, F, V = (config.n_layers, config.d_model, config.n_heads, config.d_ff,
                     config.tgt_vocab_size)
    Ns, Nt = B * S, B * T
    embeddings = 2 * (Ns + Nt) * C * f + (Ns + Nt) * C       # scaled and dropped out, mask
    encoder = N * ((8 * Ns * C + Ns * F + H * B * S * S + 2 * Ns) * f + 2 * Ns * C
                   + 3 * (C + 1) * C * f)
    decoder = N * ((12 * Nt * C + 2 * Ns * C + Nt * F + H * B * T * (T + S) + 3 * Nt) * f
                   + 3 * Nt * C + 5 * (C + 1) * C * f)
    masks = B * T * T + B * S
    loss = 2 * Nt * V * f + 4 * Nt * 8 + (Nt + V) * C * f
    return embeddings + encoder + decoder + masks + loss + BLOCK_SCRATCH


def validation_bytes(config: Any, batch: int, source_len: int, target_len: int,
                     itemsize: int = 4) -> int:
    """Bytes of one forward without gradients and its two losses (the validation loss)."""
    B, S, T, f = batch, source_len, target_len, itemsize
    C, H, F = config.d_model, config.n_heads, config.d_ff
    memory = B * S * C * f
    layer = B * T * f * (2 * C + max(3 * C + H * max(T, S) + C, F + C)) + 2 * B * S * C * f
    logits = 2 * B * T * config.tgt_vocab_size * f
    return memory + max(_encoder_pass(config, B, S, f), layer, logits) + BLOCK_SCRATCH


def training_peak(config: Any, shapes: list[tuple[int, int, int]], itemsize: int = 4,
                  tokenizer_bytes: int = 0,
                  valid_shapes: list[tuple[int, int, int]] = ()) -> TrainingPeak:
    """The peak of training on batches of ``shapes`` (B, S, T), validating on
    ``valid_shapes``, with checkpoints that hold the tokenizer's bytes too."""
    P = parameter_count(config) * itemsize
    state = 4 * P + _largest_parameter(config) * itemsize
    step = max([step_bytes(config, *shape, itemsize) for shape in shapes]
               + [validation_bytes(config, *shape, itemsize) for shape in valid_shapes]
               + [0])
    # averaging as averaging_bytes counts it: a step checkpoint (the model's and Adam's
    # arrays, the tokenizer, the metadata) read beside float64 sums, its largest array again
    checkpoint = 3 * P + tokenizer_bytes + METADATA
    host = checkpoint + 2 * P + _largest_parameter(config) * itemsize + BLOCK_SCRATCH
    return TrainingPeak(state, step, host)


# ----------------------------------------------------------------------------- averaging

def averaging_bytes(paths: list[str | Path]) -> int:
    """Peak bytes of ``average_checkpoints(paths)``, from the archives' directories (nothing
    is read): the largest checkpoint's arrays beside the float64 sums of a model's, and the
    temporaries of reading and checking its largest array."""
    largest = model = array = 0
    for path in paths:
        try:
            with zipfile.ZipFile(path) as archive:
                sizes = [(info.filename, info.file_size) for info in archive.infolist()]
        except (OSError, zipfile.BadZipFile):
            continue  # loading it names the problem
        largest = max(largest, sum(size for _, size in sizes))
        model = max(model, sum(size for name, size in sizes if name.startswith("model/")))
        array = max([array] + [size for _, size in sizes])
    return largest + 2 * model + array + BLOCK_SCRATCH


def check(need: int, available: int | None, what: str, fix: str,
          device: str | None = None) -> None:
    """Refuse ``what`` when it ``need``s more than is ``available`` (unknown: allow), in one
    sentence that ends with the ``fix``."""
    if available is not None and need > available:
        raise MemoryLimitError(f"{what} needs about {format_bytes(need)} of memory, more than "
                               f"the {format_bytes(available)} available "
                               f"({describe_available(device)}); {fix}.")


def free_some() -> str:
    """The fix when nothing smaller can be asked for: more memory."""
    if os.environ.get(ENVIRONMENT_VARIABLE, "").strip():
        return f"raise {ENVIRONMENT_VARIABLE}, or free some memory"
    return "free some memory"


def describe_available(device: str | None = None) -> str:
    """Where the available figure came from, for messages."""
    text = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if text:
        return f"{ENVIRONMENT_VARIABLE}={text}"
    return "free on the GPU" if (device or backend.current_device()) == "cuda" else \
        "free on this machine"


__all__ = ["ENVIRONMENT_VARIABLE", "MemoryLimitError", "TrainingPeak", "available_memory",
           "averaging_bytes", "check", "decoding_bytes", "describe_available", "format_bytes",
           "free_some", "host_available", "largest_beam", "parameter_count", "parse_size",
           "step_bytes", "training_peak", "validation_bytes"]
