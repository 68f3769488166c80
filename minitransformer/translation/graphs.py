"""The training step and the decoding step in CUDA graphs (``autograd/graphs.py``).

A training step on the GPU is three graphs and two reads on the host:

1. per batch, keyed by its shape (B, S, T): forward, label-smoothed loss, backward. The
   gradients add into one flat buffer of static gradients (``p.grad`` are views of it), so
   the steps' graphs share them and ``accumulate`` batches sum as the eager step does; the
   batch's token loss is a static 0-d output, which the host reads (``loss.item()`` in the
   eager step): the finiteness check of the loss stays outside the graph;
2. one graph for every shape: the gradients divided by the step's target tokens (a 0-d
   device array, since the count varies), and each parameter's squared norm into a static
   vector, which the host reads and sums as ``clip_grad_norm`` does: the check of the norm,
   and the choice to clip, stay outside too, so a non-finite step is refused before any
   update, as in the eager step;
3. one graph: the clipping factor (1 when not clipping; ×1 changes no bit) and Adam, whose
   step size and ε̂ (they change every step) come from 0-d device arrays.

What stays outside the graphs: the host-side checks (token ids in range, checked on the
host batch before its copy in; the loss and the norm, read after their graphs), Adam's step
count and learning rate (computed on the host, written to device scalars), the parameters'
version counts, and dropout's random numbers, drawn before each replay from the generator
the Trainer seeds per batch: a step replayed computes what the eager step computes, bit for
bit (tests/translation/test_cuda_graphs.py proves it on the strict device).

Decoding: one step of greedy or beam search with the key/value cache, after the first
(which fills the cross-attention cache), keyed by the shapes of its ids, memory, mask and
cache. Its inputs (the cache included) are copied into the graph's static buffers, and the
new keys and values it returns are that graph's static outputs, which the next decoding of
the same shapes overwrites. The stacked projection weights a cache keeps live in buffers of
``DecodingGraphs``, refilled in place when the weights change, so graphs never read a freed
cache's arrays.

Shapes must repeat for graphs to pay. A training run's batches are the same every epoch, so
their shapes come back, and the batch graphs of the first ``max_graphs`` shapes are kept for
the whole run; with ``TrainConfig(shape_multiple=m)`` (``train --shape-multiple``) the
batches have one shape per width, a multiple of m, so that every step replays (Multi30k at
4,000 tokens: 119 shapes otherwise). Decoding's graphs are kept by recent use: its shapes
move on as the outputs grow.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from .. import functional as F
from ..autograd.graphs import GraphCache
from ..autograd.tensor import Tensor


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
        self.tails = GraphCache(self.device, 2)  # the scaling and the update
        # every gradient is a view of one flat buffer: zeroed with one kernel
        self.flat_grad = xp.zeros(sum(p.data.size for p in params), dtype=dtype)
        self.grads, offset = [], 0
        for p in params:
            self.grads.append(self.flat_grad[offset:offset + p.data.size].reshape(p.shape))
            offset += p.data.size
        self.squares = xp.zeros(len(params), dtype=dtype)   # each parameter's |g|², (P,)
        # 0-d device scalars of what changes from step to step
        self.inv_tokens, self.clip_scale, self.step_size, self.eps_hat = (
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

    def forward_backward(self, batch: Any) -> float:
        """Forward, loss and backward of ``batch`` (a host Batch), its gradients added to the
        static ones: its summed token loss, read on the host."""
        config = self.model.config
        _check_ids(batch.src, config.src_vocab_size, "source")
        _check_ids(batch.tgt_in, config.tgt_vocab_size, "target")
        _check_ids(batch.tgt_out, config.tgt_vocab_size, "target", config.pad_id)
        inputs = tuple(backend.to_device(a, self.device)
                       for a in (batch.src, batch.tgt_in, batch.tgt_out))
        dtype = self.flat_grad.dtype
        n_tokens = backend.get_backend(self.device).xp.asarray(batch.n_tgt_tokens, dtype=dtype)
        key = ("batch", tuple(a.shape for a in inputs), str(dtype))
        token_loss = self.batches(key, self._forward_backward, (*inputs, n_tokens))
        return float(token_loss)

    def _forward_backward(self, src: Any, tgt_in: Any, tgt_out: Any, n_tokens: Any) -> Any:
        logits = self.model(src, tgt_in)                                  # (B, T, V)
        loss = F.cross_entropy(logits, tgt_out, self.label_smoothing,
                               ignore_index=self.model.config.pad_id)
        token_loss = loss * Tensor(n_tokens)                              # a sum over tokens
        token_loss.backward()
        return token_loss.data

    def gradient_norm(self, n_tokens: int) -> float:
        """Divide the summed gradients by the step's ``n_tokens``; their global L2 norm, as
        ``clip_grad_norm`` sums it (parameter by parameter, in Python floats)."""
        self.inv_tokens.fill(1.0 / n_tokens)
        squares = self.tails(("scale", str(self.flat_grad.dtype)), self._scale, ())
        return math.sqrt(sum(float(s) for s in backend.to_numpy(squares).tolist()))

    def _scale(self) -> Any:
        self.flat_grad *= self.inv_tokens
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
        return {"batches": self.batches.summary(), "scaling and update": self.tails.summary()}


def _check_ids(ids: Any, vocab_size: int, side: str, ignore: int | None = None) -> None:
    """What the embedding and the loss check on the device, on the host batch instead."""
    real = ids if ignore is None else ids[ids != ignore]
    if real.size and not (0 <= int(real.min()) and int(real.max()) < vocab_size):
        raise ValueError(f"{side} token ids must lie in 0..{vocab_size - 1} (the model's "
                         f"vocabulary), got ids from {int(real.min())} to {int(real.max())}; "
                         "encode the data with the model's tokenizer.")


class DecodingGraphs:
    """Decoding steps of ``model`` in graphs, by shape (module docstring); give one to
    ``greedy_decode`` or ``beam_search`` as ``graphs=`` and keep it for the next batches."""

    def __init__(self, model: Any, max_graphs: int = 64):
        self.model = model
        self.device = model.src_embed.weight.device
        self.cache = GraphCache(self.device, max_graphs)
        self._stacked: list[tuple[Tensor, Tensor]] | None = None
        self._versions: tuple[int, ...] = ()

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

    def decode(self, ids: Any, memory: Tensor, src_mask: Any, cache: Any) -> Tensor:
        """``model.decode(ids, memory, src_mask, cache)`` for a cache that holds at least one
        position: logits (N, 1, V) by a graph of these shapes; the cache takes the new keys
        and values."""
        stacked = self.stacked_weights()
        kv = [t.data for pair in cache.layers for kv in pair for t in (kv.k, kv.v)]
        inputs = (backend.as_array(ids, device=self.device), memory.data, src_mask, *kv)
        key = ("decode", cache.length, tuple((a.shape, str(a.dtype)) for a in inputs))

        def step(ids: Any, memory: Any, src_mask: Any, *kv: Any) -> tuple[Any, ...]:
            scratch = self.model.new_cache()  # the caller's cache is left as it is
            scratch.length = cache.length
            for i, (self_kv, cross_kv) in enumerate(scratch.layers):
                self_kv.k, self_kv.v, cross_kv.k, cross_kv.v = map(Tensor, kv[4 * i:4 * i + 4])
                self_kv.stacked = stacked[i]
            logits = self.model.decode(ids, Tensor(memory), src_mask, scratch)  # (N, 1, V)
            return (logits.data, *[t.data for self_kv, _ in scratch.layers
                                    for t in (self_kv.k, self_kv.v)])

        logits, *new_kv = self.cache(key, step, inputs)
        for i, (self_kv, _) in enumerate(cache.layers):
            self_kv.k, self_kv.v = Tensor(new_kv[2 * i]), Tensor(new_kv[2 * i + 1])
        cache.length += 1
        return Tensor(logits)

    def summary(self) -> dict[str, Any]:
        return self.cache.summary()
