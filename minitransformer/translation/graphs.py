"""The training step and the decoding step in CUDA graphs (``autograd/graphs.py``).

A training step on the GPU is three graphs and two reads on the host:

1. per batch, keyed by its shape (B, S, T): forward, label-smoothed loss, backward. As in the
   eager step, the loss is the batch's summed token loss over the step's target tokens
   (``cross_entropy``'s ``normalizer``, here a 0-d device array, since the count varies);
   the gradients add into one flat buffer of static gradients (``p.grad`` are views of it),
   so the steps' graphs share them and ``accumulate`` batches sum to the step's mean as the
   eager step's do; the batch's loss is a static 0-d output, which the host reads
   (``loss.item()`` in the eager step): the finiteness check of the loss stays outside the
   graph;
2. one graph for every shape: each parameter's squared norm into a static vector, which the
   host reads and sums as ``clip_grad_norm`` does: the check of the norm, and the choice to
   clip, stay outside too, so a non-finite step is refused before any update, as in the
   eager step;
3. one graph: the clipping factor (1 when not clipping; ×1 changes no bit) and Adam, whose
   step size and ε̂ (they change every step) come from 0-d device arrays.

What stays outside the graphs: the host-side checks (token ids in range, checked on the
host batch before its copy in; the loss and the norm, read after their graphs), Adam's step
count and learning rate (computed on the host, written to device scalars), the parameters'
version counts, and dropout's random numbers, drawn before each replay from the generator
the Trainer seeds per batch: a step replayed computes what the eager step computes, bit for
bit (tests/translation/test_cuda_graphs.py proves it on the strict device).

Decoding: every step of greedy or beam search with the key/value cache after the first is
one graph per batch shape. The eager cache grows by a position a step, so each step would be
a new shape; ``DecodingGraphs.new_cache`` gives a cache of fixed shapes instead, whose
buffers the graph reads and writes: each layer's self-attention keys and values (N, H, P, D)
for P positions, written at the step's position (a device array the host sets before each
launch) and read whole, the positions not yet written masked; the cross-attention keys and
values, computed from the memory by the first step, which runs eagerly; the newest ids and
the source mask, copied in by the host. When sentences leave the batch (greedy decoding drops
finished ones, beam search settled ones) their rows stay in the buffers and the search reads
the first rows, so the shape holds. The batch's sentences B and its source width are rounded
up to a multiple of 8 (rows past B have no source, and are never read), and so is P, the
batch's limit (at most the positional table's size); N = B × beams (with graphs, beam search
decodes all K rows of a sentence from the first step). For a shape's first batch, step 1
runs eagerly, step 2 eagerly as a warm-up, step 3 is captured and the later steps replay; a
later batch of that shape replays from its step 2. ``DecodingGraphs`` keeps, by default
(``max_shapes=2``), the two most recently used shapes. The stacked projection weights live
in buffers of ``DecodingGraphs``, refilled in place when the weights change; parameters
replaced (``load_state_dict``) drop every graph and buffer. Attending over all P positions,
the unwritten ones masked, a step's sums run over more (zero) terms than the eager step's:
the scores agree to rounding, and so do the tokens, except where two candidates' scores are
equal to within rounding.

Shapes must repeat for graphs to pay. A training run's batches are the same every epoch, so
their shapes come back, and the batch graphs of the first ``max_graphs`` shapes are kept for
the whole run; with ``TrainConfig(shape_multiple=m)`` (``train --shape-multiple``) the
batches have one shape per width, a multiple of m, so that every step replays (Multi30k at
4,000 tokens: 119 shapes otherwise).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from .. import backend
from .. import functional as F
from ..autograd.graphs import GraphCache
from ..autograd.tensor import Tensor
from ..functional._host_index import check_rows
from ..nn.decoder import SAME


class GraphedTraining:
    """The three graphs of a training step (module docstring) for ``model`` and its Adam."""

    def __init__(self, model: Any, optimizer: Any, label_smoothing: float,
                 max_graphs: int = 16):
        params = optimizer.params
        self.model, self.optimizer, self.label_smoothing = model, optimizer, label_smoothing
        self.device = params[0].device
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise ValueError(f"CUDA graphs train parameters of one dtype, got "
                             f"{sorted(map(str, dtypes))}; cast the model to one dtype.")
        xp, dtype = params[0].xp, params[0].dtype
        self.batches = GraphCache(self.device, max_graphs, evict=False)
        self.tails = GraphCache(self.device, 2)  # the norm and the update
        # every gradient is a view of one flat buffer: zeroed with one kernel
        self.flat_grad = xp.zeros(sum(p.data.size for p in params), dtype=dtype)
        self.grads, offset = [], 0
        for p in params:
            self.grads.append(self.flat_grad[offset:offset + p.data.size].reshape(p.shape))
            offset += p.data.size
        self.squares = xp.zeros(len(params), dtype=dtype)   # each parameter's |g|², (P,)
        # 0-d device scalars of what changes from step to step
        self.step_tokens, self.clip_scale, self.step_size, self.eps_hat = (
            xp.zeros((), dtype=dtype) for _ in range(4))
        self._arrays = self._identities()

    def _identities(self) -> tuple[int, ...]:
        """The arrays the graphs update in place: replaced ones (load_state_dict) mean the
        graphs update arrays nobody uses any more."""
        o = self.optimizer
        return tuple(id(a) for a in [p.data for p in o.params] + o.m + o.v)

    def zero_grad(self) -> None:
        """Zero the static gradients and make them the parameters' ``.grad``."""
        if self._identities() != self._arrays:
            self.batches.clear()
            self.tails.clear()
            self._arrays = self._identities()
        self.flat_grad.fill(0)
        for p, g in zip(self.optimizer.params, self.grads, strict=True):
            p.grad = g

    def forward_backward(self, batch: Any, step_tokens: int) -> float:
        """Forward, loss and backward of ``batch`` (a host Batch), its gradients added to the
        static ones: its summed token loss over ``step_tokens`` (the target tokens of the
        whole step), read on the host."""
        config = self.model.config
        _check_ids(batch.src, config.src_vocab_size, "source")
        _check_ids(batch.tgt_in, config.tgt_vocab_size, "target")
        _check_ids(batch.tgt_out, config.tgt_vocab_size, "target", config.pad_id)
        inputs = tuple(backend.to_device(a, self.device)
                       for a in (batch.src, batch.tgt_in, batch.tgt_out))
        dtype = self.flat_grad.dtype
        self.step_tokens.fill(step_tokens)
        key = ("batch", tuple(a.shape for a in inputs), str(dtype))
        share = self.batches(key, self._forward_backward, (*inputs, self.step_tokens))
        return float(share)

    def _forward_backward(self, src: Any, tgt_in: Any, tgt_out: Any, step_tokens: Any) -> Any:
        logits = self.model(src, tgt_in)                                  # (B, T, V)
        share = F.cross_entropy(logits, tgt_out, self.label_smoothing,
                                ignore_index=self.model.config.pad_id, normalizer=step_tokens)
        share.backward()
        return share.data

    def gradient_norm(self) -> float:
        """The step's gradients' global L2 norm, as ``clip_grad_norm`` sums it (parameter by
        parameter, in Python floats)."""
        squares = self.tails(("norm", str(self.flat_grad.dtype)), self._squares, ())
        return math.sqrt(sum(float(s) for s in backend.to_numpy(squares).tolist()))

    def _squares(self) -> Any:
        for i, g in enumerate(self.grads):
            self.squares[i] = backend.get_array_module(g).vdot(g.ravel(), g.ravel())
        return self.squares

    def update(self, grad_norm: float, clip_norm: float | None) -> None:
        """Clip (as ``clip_grad_norm`` with ``clip_norm``) and apply one Adam update at the
        optimizer's current rate."""
        o = self.optimizer
        clip = (clip_norm / (grad_norm + 1e-6) if clip_norm is not None
                and grad_norm > clip_norm and math.isfinite(grad_norm) else 1.0)
        o.step_count += 1
        step_size, eps_hat = o.step_scalars(o.step_count)
        self.clip_scale.fill(clip)
        self.step_size.fill(step_size)
        self.eps_hat.fill(eps_hat)
        for p in o.params:
            p._bump_version()
        self.tails(("update", str(self.flat_grad.dtype)), self._update, ())

    def _update(self) -> None:
        self.flat_grad *= self.clip_scale
        self.optimizer.update(self.step_size, self.eps_hat)

    def summary(self) -> dict[str, Any]:
        return {"batches": self.batches.summary(), "norm and update": self.tails.summary()}


def _check_ids(ids: Any, vocab_size: int, side: str, ignore: int | None = None) -> None:
    """What the embedding and the loss check on the device, on the host batch instead."""
    real = ids if ignore is None else ids[ids != ignore]
    if real.size and not (0 <= int(real.min()) and int(real.max()) < vocab_size):
        raise ValueError(f"{side} token ids must lie in 0..{vocab_size - 1} (the model's "
                         f"vocabulary), got ids from {int(real.min())} to {int(real.max())}; "
                         "encode the data with the model's tokenizer.")


class DecodingGraphs:
    """Decoding steps of ``model`` in graphs, one per batch shape (module docstring): give one
    to ``greedy_decode`` or ``beam_search`` as ``graphs=`` and keep it for the next batches.
    At most ``max_shapes`` shapes keep their buffers and graph (the least recently used goes
    first): a beam-4 batch of 256 sentences of 20 tokens holds about half a GiB of keys and
    values with the `small` model, 1.8 GiB with `base`. A test set's batches come sorted by
    length, so a shape is met again by the next batches or not at all."""

    def __init__(self, model: Any, max_shapes: int = 2):
        if max_shapes < 1:
            raise ValueError(f"max_shapes must be at least 1, got {max_shapes}.")
        self.model, self.max_shapes = model, max_shapes
        self.device = model.src_embed.weight.device
        self.graphs = GraphCache(self.device, max_shapes)
        self.states: OrderedDict[tuple, _DecodingState] = OrderedDict()
        self._stacked: list[tuple[Tensor, Tensor]] | None = None
        self._versions: tuple[int, ...] = ()
        self._arrays = self._identities()

    def _identities(self) -> tuple[int, ...]:
        """The parameters' arrays, which the graphs read: replaced ones (load_state_dict,
        ``to``) mean the graphs would read arrays nobody uses any more, or freed memory."""
        return tuple(id(p.data) for p in self.model.parameters())

    def stacked_weights(self) -> list[tuple[Tensor, Tensor]]:
        """Each decoder layer's stacked self-attention projection (W, b), in buffers of this
        object that the graphs read, refilled in place when a weight has changed."""
        layers = [layer.self_attn for layer in self.model.decoder.layers]
        versions = tuple(p._version_counter[0] for a in layers for p in a.parameters())
        if self._stacked is not None and versions == self._versions:
            return self._stacked
        fresh = [(F.concat([a.w_q.weight, a.w_k.weight, a.w_v.weight], axis=0).data,
                  F.concat([a.w_q.bias, a.w_k.bias, a.w_v.bias], axis=0).data) for a in layers]
        if self._stacked is None:
            self._stacked = [(Tensor(w), Tensor(b)) for w, b in fresh]
        else:
            for (w, b), (new_w, new_b) in zip(self._stacked, fresh, strict=True):
                w.data[...] = new_w
                b.data[...] = new_b
        self._versions = versions
        return self._stacked

    def new_cache(self, memory: Tensor, src_mask: Any, beams: int, limit: int) -> StaticCache:
        """A cache for decoding the sentences of ``memory`` (B, S, C) with ``src_mask``
        (B, 1, 1, S), ``beams`` query rows a sentence (1 for greedy decoding, K for beam
        search, whose first step then decodes all K rows of each sentence), for at most
        ``limit`` positions: in the buffers of its shape (B, the source width and the limit
        rounded up to a multiple of ``ROUND``), which every batch of that shape shares."""
        if self._identities() != self._arrays:  # the parameters were replaced: start afresh
            self.graphs.clear()
            self.states.clear()
            self._stacked, self._arrays = None, self._identities()
        B, S, C = memory.shape
        positions = self.model.tgt_positions.max_len
        capacity = min(_round_up(max(limit, 1)), positions)
        rows = _round_up(B)  # the rows past B: no source (masked), never read
        key = (rows * beams, rows, _round_up(S), capacity, str(memory.dtype))
        state = self.states.get(key)
        if state is None:
            while len(self.states) >= self.max_shapes:  # room first: at most max_shapes live
                dropped, _ = self.states.popitem(last=False)
                self.graphs.drop(dropped)  # its graph writes the buffers about to be freed
            state = _DecodingState(self.model, *key[:4], memory.dtype)
            self.states[key] = state
        self.states.move_to_end(key)
        state.start(memory.data, src_mask)
        return StaticCache(state, key, self.stacked_weights())

    def decode(self, ids: Any, memory: Tensor, src_mask: Any, cache: StaticCache) -> Tensor:
        """``model.decode(ids, memory, src_mask, cache)`` for the ids (n, 1) of the rows still
        decoding (the first n of the cache's; ``src_mask`` of their sentences): logits
        (n, 1, V). The first step, which fills the cross-attention keys and values, runs
        eagerly; the others by the graph of the cache's shape (``memory`` is read only by the
        first)."""
        if cache.length >= cache.state.capacity:
            raise ValueError(f"decoding step {cache.length + 1} is past the cache's "
                             f"{cache.state.capacity} positions; give new_cache the limit.")
        state, n = cache.state, ids.shape[0]
        if not (backend.is_array(ids) and backend.device_of(ids) == self.device):
            # a replay checks nothing, and the device's gather would wrap an id round
            _check_ids(backend.to_numpy(ids), self.model.config.tgt_vocab_size, "target")
        state.ids[:n] = backend.as_array(ids, device=self.device)
        state.set_mask(src_mask)
        state.position.fill(cache.length)
        length = cache.length
        if length == 0:  # the cross-attention keys and values, from the padded memory
            logits = state.step(cache)
        else:
            logits = self.graphs(cache.key, lambda: state.step(cache), ())
        cache.length = length + 1
        return Tensor(logits[:n])

    def summary(self) -> dict[str, Any]:
        return {**self.graphs.summary(), "shapes": len(self.states)}


ROUND = 8  # source widths and decoding limits are rounded up to a multiple of this


def _round_up(n: int) -> int:
    return -(-n // ROUND) * ROUND


class _DecodingState:
    """The fixed buffers of one decoding shape: N query rows (sentences × beams) on B
    sentences of at most S source tokens, for at most P positions. The graph of its step
    reads and writes only these, so any batch of this shape replays it."""

    def __init__(self, model: Any, N: int, B: int, S: int, P: int, dtype: Any):
        self.model, self.capacity = model, P
        config = model.config
        H, D = config.n_heads, config.d_model // config.n_heads
        xp = backend.get_backend(model.src_embed.weight.device).xp
        self.ids = xp.zeros((N, 1), dtype=xp.int64)                    # (N, 1) newest ids
        self.memory = xp.zeros((B, S, config.d_model), dtype=dtype)    # (B, S, C)
        self.mask = xp.zeros((B, 1, 1, S), dtype=bool)                 # (B, 1, 1, S)
        self.position = xp.zeros(1, dtype=xp.int64)                    # (1,) the newest's
        self.slots = xp.arange(P)                                      # (P,)
        self.self_kv = [(xp.zeros((N, H, P, D), dtype=dtype), xp.zeros((N, H, P, D), dtype=dtype))
                        for _ in range(config.n_layers)]               # (N, H, P, D) each
        self.cross_kv = [(xp.zeros((B, H, S, D), dtype=dtype), xp.zeros((B, H, S, D), dtype=dtype))
                         for _ in range(config.n_layers)]              # (B, H, S, D) each

    def start(self, memory: Any, src_mask: Any) -> None:
        """A new batch: its memory and mask, padded to the state's rows and source width
        (masked); the self-attention keys and values zeroed, so that nothing an earlier
        batch left (an overflow's inf, say) meets a weight of 0 as 0 · inf = nan."""
        B, S = memory.shape[:2]
        self.memory[...] = 0
        self.memory[:B, :S] = memory
        self.mask[...] = False
        self.set_mask(src_mask)
        for k, v in self.self_kv:
            k[...] = 0
            v[...] = 0

    def set_mask(self, src_mask: Any) -> None:
        """The source mask of the sentences still decoding, in the first rows."""
        mask = src_mask.data if isinstance(src_mask, Tensor) else src_mask
        self.mask[:mask.shape[0], ..., :mask.shape[-1]] = mask

    def step(self, cache: StaticCache) -> Any:
        """One step on all N rows: logits (N, 1, V). What a graph captures: everything it
        computes depends on the buffers alone, the position included."""
        cache.write = (self.slots == self.position)[None, None, :, None]  # (1, 1, P, 1)
        cache.seen = (self.slots <= self.position)[None, None, None, :]   # (1, 1, 1, P)
        logits = self.model.decode(Tensor(self.ids), Tensor(self.memory), self.mask, cache)
        return logits.data


class StaticCache:
    """A ``DecoderCache`` of fixed shapes (``DecodingGraphs.new_cache``): each layer's
    self-attention keys and values are written at the position in the device array
    ``position`` and read whole, their unwritten positions masked; the cross-attention keys
    and values are computed once, into buffers. ``reorder`` and ``move_rows`` move rows within
    the buffers."""

    def __init__(self, state: _DecodingState, key: tuple, stacked: list) -> None:
        self.state, self.key = state, key
        self.length = 0
        self.position = state.position
        self.write: Any = None   # (1, 1, P, 1) True at the newest position (set each step)
        self.seen: Any = None    # (1, 1, 1, P) True at the positions written so far
        self.layers = [(_SelfSlots(self, k, v, w), _CrossSlots(k_x, v_x))
                       for (k, v), (k_x, v_x), w in zip(state.self_kv, state.cross_kv,
                                                         stacked, strict=True)]

    def reorder(self, index: Any, cross_index: Any = SAME) -> None:
        """Rows ``index`` of the self-attention buffers (their positions written so far) and
        ``cross_index`` of the cross-attention ones (the same by default, None for none)
        into their first rows."""
        cross_index = index if cross_index is SAME else cross_index
        check_rows("StaticCache.reorder", self.layers[0][0].k_buf, index)
        if cross_index is not None:
            check_rows("StaticCache.reorder (cross_index)", self.layers[0][1].k_buf, cross_index)
        for self_slots, cross_slots in self.layers:
            self_slots.reorder(index, self.length)
            if cross_index is not None:
                cross_slots.reorder(cross_index)

    def move_rows(self, sources: Any, targets: Any, n: int) -> None:
        """Rows ``sources`` of every buffer onto rows ``targets`` (the self-attention ones for
        the positions written so far): the first n rows are then the batch's."""
        check_rows("StaticCache.move_rows", self.layers[0][0].k_buf, sources, targets)
        for self_slots, cross_slots in self.layers:
            for buffer in (self_slots.k_buf, self_slots.v_buf):
                buffer[targets, :, :self.length] = buffer[sources, :, :self.length]
            for buffer in (cross_slots.k_buf, cross_slots.v_buf):
                buffer[targets] = buffer[sources]


class _SelfSlots:
    """One layer's self-attention keys and values (N, H, P, D) with ``KVCache``'s methods."""

    def __init__(self, cache: StaticCache, k: Any, v: Any, stacked: tuple) -> None:
        self.cache, self.k_buf, self.v_buf, self.stacked = cache, k, v, stacked
        self.k = self.v = None  # as KVCache's: the self-attention path reads its own

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Any]:
        """Write k, v (N, H, 1, D) at the position; all P positions, those written so far
        unmasked."""
        xp = backend.get_array_module(self.k_buf)
        xp.copyto(self.k_buf, k.data, where=self.cache.write)             # (N, H, P, D)
        xp.copyto(self.v_buf, v.data, where=self.cache.write)
        return Tensor(self.k_buf), Tensor(self.v_buf), self.cache.seen

    def reorder(self, index: Any, length: int) -> None:
        """Rows ``index`` into the first rows, for the ``length`` positions written (the
        others are masked, and written before they are read)."""
        n = index.shape[0]
        self.k_buf[:n, :, :length] = self.k_buf[index, :, :length]
        self.v_buf[:n, :, :length] = self.v_buf[index, :, :length]


class _CrossSlots:
    """One layer's cross-attention keys and values (B, H, S, D), filled on the first step."""

    stacked = None

    def __init__(self, k: Any, v: Any) -> None:
        self.k_buf, self.v_buf = k, v
        self.filled = False

    @property
    def k(self) -> Tensor | None:
        return Tensor(self.k_buf) if self.filled else None

    @property
    def v(self) -> Tensor | None:
        return Tensor(self.v_buf) if self.filled else None

    @k.setter
    def k(self, value: Tensor) -> None:
        self.k_buf[...] = value.data
        self.filled = True

    @v.setter
    def v(self, value: Tensor) -> None:
        self.v_buf[...] = value.data

    def reorder(self, index: Any) -> None:
        n = index.shape[0]
        self.k_buf[:n] = self.k_buf[index]
        self.v_buf[:n] = self.v_buf[index]
