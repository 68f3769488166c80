"""The captured training and decoding steps (translation/graphs.py), on the strict device
and, where there is a GPU, on CUDA itself.

``strict_graphs.py`` stands in for CUDA stream capture: it records the strict device's
operations, leaves memory as CUDA would after a capture (nothing computed), replays them on the
same buffers, and refuses what CUDA refuses while capturing. A step replayed must compute what
the eager step computes, in float64: bit for bit on the stand-in, and to rounding on a GPU,
where a captured product calls cuBLAS directly and an eager one through ``cupy.matmul``.
"""

import numpy as np
import pytest
import strict_graphs
from conftest import CUDA
from strict_backend import host_reads, strict_xp
from strict_graphs import CaptureRefused, StrictCapture
from train_task import make_task

import minitransformer.translation.graphs as graphs_module
from minitransformer import backend
from minitransformer import functional as F
from minitransformer.autograd.graphs import GraphCache, GraphsUnavailable
from minitransformer.autograd.tensor import Tensor
from minitransformer.data.batching import make_batch
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.decode import beam_search, greedy_decode
from minitransformer.translation.graphs import DecodingGraphs
from minitransformer.translation.scoring import score
from minitransformer.translation.training import TrainConfig, Trainer
from minitransformer.translation.translator import translate, translate_n_best

strict_graphs.install()


GRAPH_DEVICES = [
    "strict",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="needs CuPy and a GPU")),
]


@pytest.fixture(params=GRAPH_DEVICES)
def graph_device(request):
    """The test on each device that captures graphs, in float64."""
    backend.use(request.param)
    backend.set_default_dtype("float64")
    return request.param


def same(a, b, device, rtol=1e-10, atol=0.0):
    """Equal bit for bit on the stand-in; on a GPU to ``rtol`` and ``atol`` (eager and replayed
    products take different cuBLAS entry points, so they agree to rounding)."""
    a, b = np.asarray(a), np.asarray(b)
    if device == "strict":
        return np.array_equal(a, b)
    return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol)


def trainer(run_dir, cuda_graphs):
    tokenizer, data = make_task()
    backend.manual_seed(0)
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    settings = TrainConfig(max_steps=100, warmup_steps=3, clip_norm=0.5, bleu_sentences=0,
                           progress=False, cuda_graphs=cuda_graphs)
    return Trainer(Transformer(config), tokenizer, data, settings, run_dir)


def batch(seed, B, S, T, V):
    """B random pairs padded to (B, S) and (B, T): one pair of each full length, the others
    shorter, so batches of one shape differ in their data and their token counts."""
    rng = np.random.default_rng(seed)
    pairs = [(rng.integers(4, V, S).tolist(), rng.integers(4, V, T - 1).tolist())]
    for _ in range(B - 1):
        pairs.append((rng.integers(4, V, rng.integers(1, S + 1)).tolist(),
                      rng.integers(4, V, rng.integers(1, T)).tolist()))
    return make_batch(pairs)


SHAPES = [(4, 6, 5), (4, 6, 5), (4, 6, 5), (3, 7, 4), (3, 7, 4), (4, 6, 5)]


def train_both(tmp_path):
    """The eager and the graphed Trainer, step by step over batches of SHAPES: each step's
    (eager, graphed) records and parameters."""
    eager, graphed = trainer(tmp_path / "eager", False), trainer(tmp_path / "graphed", True)
    V = eager.model.config.src_vocab_size
    steps = []
    for i, (B, S, T) in enumerate(SHAPES):
        records = [t._step([batch(i, B, S, T, V)]) for t in (eager, graphed)]
        params = [[backend.to_numpy(p.data) for p in t.optimizer.params]
                  for t in (eager, graphed)]
        steps.append((records, params))
    return steps, graphed


def test_a_replayed_training_step_gives_the_eager_loss_and_parameters(tmp_path, graph_device):
    """Forward, loss, backward, clipping and Adam, with dropout on: every step equal."""
    steps, graphed = train_both(tmp_path)
    for (eager, ours), (eager_params, our_params) in steps:
        assert same(ours["loss"], eager["loss"], graph_device)
        assert same(ours["grad_norm"], eager["grad_norm"], graph_device)
        # parameters to 1e-8: a gradient that is zero but for rounding (the key biases') moves
        # by up to lr·noise/ε under Adam, ~1e-10 here, whichever way its rounding went
        assert all(same(a, b, graph_device, rtol=1e-8, atol=1e-8)
                   for a, b in zip(eager_params, our_params, strict=True))
    assert graphed.graphs.batches.counts["replayed"] == 2  # steps 3 and 6 replay a graph


def test_a_step_of_two_batches_divides_by_the_step_s_tokens_in_the_graph_too(tmp_path,
                                                                            graph_device):
    """Each batch's loss over the step's tokens (not its own): two batches of one shape and
    different token counts a step, the second captured, then both replayed."""
    eager, graphed = trainer(tmp_path / "eager", False), trainer(tmp_path / "graphed", True)
    V = eager.model.config.src_vocab_size
    for step in range(3):
        group = [batch(10 + 2 * step + k, 4, 6, 5, V) for k in range(2)]
        assert group[0].n_tgt_tokens != group[1].n_tgt_tokens or step > 0
        records = [t._step(group) for t in (eager, graphed)]
        assert same(records[1]["loss"], records[0]["loss"], graph_device)
        assert same(records[1]["grad_norm"], records[0]["grad_norm"], graph_device)
    assert graphed.graphs.batches.counts["replayed"] == 4


def test_a_new_shape_runs_eagerly_then_is_captured(tmp_path, graph_device):
    steps, graphed = train_both(tmp_path)
    batches = graphed.graphs.batches
    assert batches.counts == {"eager": 2, "captured": 2, "replayed": 2, "dropped": 0,
                              "not kept": 0}
    assert sorted(key[1][0] for key in batches.graphs) == [(3, 7), (4, 6)]  # src shapes
    assert batches.fallbacks == {}
    # the norm and the update are one graph each, whatever the batch's shape
    assert graphed.graphs.tails.counts == {"eager": 2, "captured": 2, "replayed": 8,
                                           "dropped": 0, "not kept": 0}


def test_a_host_read_inside_the_captured_step_is_caught_and_the_step_runs_eagerly(
        tmp_path, graph_device, monkeypatch):
    """``loss.item()`` inside the graph: the capture is refused, the reason kept, and the
    steps fall back to eager ones with the eager results."""
    captured = graphs_module.GraphedTraining._forward_backward

    def reads_the_loss(self, *inputs):
        token_loss = captured(self, *inputs)
        token_loss.item()
        return token_loss

    monkeypatch.setattr(graphs_module.GraphedTraining, "_forward_backward", reads_the_loss)
    steps, graphed = train_both(tmp_path)
    batches = graphed.graphs.batches
    assert batches.counts["captured"] == 0 and batches.counts["replayed"] == 0
    assert len(batches.fallbacks) == 2
    if graph_device == "strict":  # CUDA names its own error (the capture was invalidated)
        assert all("x.item()" in why for why in batches.fallbacks.values())
    for (eager, ours), _ in steps:
        assert same(ours["loss"], eager["loss"], graph_device)


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_a_batch_padded_to_a_fixed_shape_gives_the_same_loss_and_gradients(device):
    """What fixed shapes rely on: empty rows (every id PAD) and wider padding change no
    token's loss and no gradient (dropout off, float64)."""
    backend.use(device)
    backend.set_default_dtype("float64")
    tokenizer, data = make_task()
    backend.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16,
                                                d_ff=32, p_dropout=0.0))
    pairs = data.train[:5]

    def loss_and_gradients(batch):
        for p in model.parameters():
            p.grad = None
        logits = model(batch.src, batch.tgt_in)
        loss = F.cross_entropy(logits, batch.tgt_out, 0.1, ignore_index=model.config.pad_id)
        token_loss = loss * batch.n_tgt_tokens
        token_loss.backward()
        return token_loss.item(), [backend.to_numpy(p.grad) for p in model.parameters()]

    plain = make_batch(pairs)
    B, S = plain.src.shape
    padded = make_batch(pairs, shape=(B + 3, S + 4, plain.tgt_in.shape[1] + 2))
    (loss, grads), (padded_loss, padded_grads) = map(loss_and_gradients, (plain, padded))
    assert padded.n_tgt_tokens == plain.n_tgt_tokens
    np.testing.assert_allclose(padded_loss, loss, rtol=1e-12)
    for g, h in zip(grads, padded_grads, strict=True):
        np.testing.assert_allclose(h, g, rtol=1e-9, atol=1e-12 * max(1.0, np.abs(g).max()))


def test_a_trainer_takes_batches_of_fixed_shapes_when_asked(tmp_path, graph_device):
    tokenizer, data = make_task()
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16,
                                                d_ff=32))
    settings = TrainConfig(max_steps=2, max_tokens=300, shape_multiple=4, cuda_graphs=True,
                           bleu_sentences=0, progress=False)
    fixed = Trainer(model, tokenizer, data, settings, tmp_path).batcher
    assert fixed.shape_multiple == 4
    shapes = {b.src.shape + b.tgt_in.shape for b in fixed}
    assert all(S == T and S % 4 == 0 for _, S, _, T in shapes)
    assert len(shapes) == len({S for _, S, _, _ in shapes})  # one shape per width


def test_training_graphs_keep_the_first_shapes_and_run_the_others_eagerly(graph_device):
    """Batch shapes come back every epoch: dropping the least recently used graph would drop
    each one just before its shape returned. Without eviction the first max_graphs stay."""
    cache = GraphCache(graph_device, max_graphs=2, evict=False)
    xp = backend.get_backend(graph_device).xp
    for _ in range(3):  # three epochs over three shapes
        for n in (1, 2, 3):
            x = backend.as_array(np.arange(float(n)), device=graph_device)
            out = cache(("shape", n), lambda x: x * 2.0, (x,))
            assert np.array_equal(backend.to_numpy(out), 2.0 * np.arange(n))
    assert sorted(cache.graphs) == [("shape", 1), ("shape", 2)]
    assert cache.counts == {"eager": 5, "captured": 2, "replayed": 2, "dropped": 0,
                            "not kept": 2}
    assert xp is not None


def test_ids_outside_the_vocabulary_are_refused_before_a_replay(tmp_path, graph_device):
    graphed = trainer(tmp_path, True)
    V = graphed.model.config.src_vocab_size
    good = batch(0, 4, 6, 5, V)
    graphed._step([good])
    graphed._step([good])  # captured
    bad = batch(1, 4, 6, 5, V)
    bad.tgt_out[0, 0] = V
    with pytest.raises(ValueError, match=f"target token ids must lie in 0..{V - 1}"):
        graphed._step([bad])


def test_dropout_masks_differ_between_replays_and_are_the_eager_masks(graph_device):
    cache = GraphCache(graph_device)
    x = backend.as_array(np.ones(64), device=graph_device)

    def drop(x):
        return F.dropout(Tensor(x), 0.5).data

    def run(seed, graphed):
        backend.manual_seed(seed)
        out = cache("drop", drop, (x,)) if graphed else drop(x)
        return backend.to_numpy(out).copy()

    run(1, True)  # eager: the warm-up
    replays = [run(seed, True) for seed in (2, 3, 4)]
    assert cache.counts["captured"] == 1 and cache.counts["replayed"] == 2
    assert not np.array_equal(replays[0], replays[1])
    assert not np.array_equal(replays[1], replays[2])
    for seed, replayed in zip((2, 3, 4), replays, strict=True):
        assert np.array_equal(replayed, run(seed, False))


@pytest.fixture
def model_and_sources(graph_device):
    tokenizer, _ = make_task()
    backend.manual_seed(1)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16,
                                                d_ff=32))
    rng = np.random.default_rng(0)
    sources = rng.integers(4, tokenizer.vocab_size, size=(3, 6))
    sources[0, 4:] = model.config.pad_id
    return model, sources, tokenizer


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_replayed_decoding_gives_the_eager_tokens(model_and_sources, search):
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model)

    def decode(graphs):
        if search == "greedy":
            return greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=7,
                                 n_best=1, graphs=graphs)
        return beam_search(model, sources, tokenizer.bos_id, tokenizer.eos_id, beam_size=3,
                           max_len=7, n_best=2, graphs=graphs)

    eager = decode(None)
    for _ in range(3):  # the first decoding captures its shape's graph, the others replay it
        assert_same_hypotheses(decode(decoding), eager)
    counts = decoding.summary()
    assert counts["captured"] > 0 and counts["replayed"] > 0 and not counts["fallbacks"]


def assert_same_hypotheses(got, expected):
    """The same tokens, in the same order, and the same scores to rounding: a graph's step
    attends over all the positions of its fixed-shape cache, the unwritten ones masked, so
    its sums run over more (zero) terms than the eager step's."""
    assert len(got) == len(expected)
    for hyps, eager_hyps in zip(got, expected, strict=True):
        assert [(h.tokens, h.finished) for h in hyps] == \
            [(h.tokens, h.finished) for h in eager_hyps]
        for h, e in zip(hyps, eager_hyps, strict=True):
            np.testing.assert_allclose(h.token_log_probs, e.token_log_probs, rtol=1e-12)
            np.testing.assert_allclose([h.log_prob, h.score], [e.log_prob, e.score],
                                       rtol=1e-12)


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_and_score_with_graphs_give_the_eager_text(model_and_sources, beam):
    """What `translate --cuda-graphs` and `evaluate --cuda-graphs` run: the same
    translations and scores as without graphs, with steps replayed."""
    model, _, tokenizer = model_and_sources
    _, data = make_task()
    sentences, references = data.valid_sources[:6], data.valid_references[:6]
    pairs = list(zip(sentences, references, strict=True))
    decoding = DecodingGraphs(model)
    eager = translate(model, tokenizer, sentences, beam)
    eager_score = score(model, tokenizer, pairs, beam)
    for _ in range(3):
        assert translate(model, tokenizer, sentences, beam, graphs=decoding) == eager
    assert score(model, tokenizer, pairs, beam, graphs=decoding) == eager_score
    n_best = translate_n_best(model, tokenizer, sentences, beam, graphs=decoding)
    assert [t.hypotheses[0].text if t.hypotheses else "" for t in n_best] == eager
    assert decoding.summary()["replayed"] > 0


def greedy_steps(model, tokenizer, sources, graphs, max_len=7):
    """Greedy decoding of ``sources`` with ``graphs``: (hypotheses, the graphs' counts)."""
    out = greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=max_len,
                        n_best=1, graphs=graphs)
    return out, dict(graphs.summary())


def test_one_graph_serves_every_step_of_a_batch_and_every_batch_of_its_shape(
        model_and_sources):
    """The cache has fixed shapes (sentences, source width and limit rounded up to 8), so
    every step after the first (which fills the cross-attention keys and values) is one
    shape: seen once eagerly, captured, then replayed, also by a later batch of other sizes
    that round to the same shape."""
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model)
    _, counts = greedy_steps(model, tokenizer, sources, decoding)  # untrained: all 7 steps
    assert (counts["eager"], counts["captured"], counts["replayed"]) == (1, 1, 4)
    assert counts["shapes"] == 1
    other = sources[:2, :5].copy()  # 2 sentences of width 5: rounded up, the same shape
    eager = greedy_decode(model, other, tokenizer.bos_id, tokenizer.eos_id, max_len=7,
                          n_best=1)
    got, counts = greedy_steps(model, tokenizer, other, decoding)
    assert_same_hypotheses(got, eager)
    assert (counts["eager"], counts["captured"], counts["replayed"]) == (1, 1, 10)
    assert counts["shapes"] == 1


@pytest.mark.parametrize("search", [greedy_decode, beam_search], ids=["greedy", "beam"])
def test_a_replayed_decoding_step_reads_the_device_once(model_and_sources, search):
    """A replayed step is one launch, and then the search's answers (greedy: how many go on;
    beam: whether any finished, any reached the limit, how many are settled) come back in one
    read, the only wait for the GPU a plain step has. EOS -1 is never emitted: every step is
    a plain one, up to the limit."""
    model, sources, tokenizer = model_and_sources
    if backend.get_array_module(model.src_embed.weight.data) is not strict_xp:
        pytest.skip("the strict device logs its reads")
    decoding = DecodingGraphs(model)
    reads = {}
    for limit in (4, 12, 4, 12):  # each shape captured by the first two, replayed after
        with host_reads() as reads[limit]:
            search(model, sources, tokenizer.bos_id, -1, max_len=limit, graphs=decoding)
    assert len(reads[12]) - len(reads[4]) == 12 - 4, reads[12]


def test_sentences_that_finish_keep_the_shape_and_the_others_their_tokens(
        model_and_sources):
    """Rows leave the batch as their sentences end (greedy) or settle (beam search); the
    graph keeps its rows, the search reads the first ones."""
    model, sources, tokenizer = model_and_sources
    # tokens the untrained model likes, as the end of sentence: two of the three sentences
    # end at the first step of greedy decoding, one of beam search's settles at the second
    for search, eos in ((greedy_decode, 35), (beam_search, 7)):
        kwargs = {"beam_size": 2, "n_best": 2} if search is beam_search else {"n_best": 1}
        eager = search(model, sources, tokenizer.bos_id, eos, max_len=7, **kwargs)
        decoding = DecodingGraphs(model)
        for _ in range(2):
            assert_same_hypotheses(search(model, sources, tokenizer.bos_id, eos, max_len=7,
                                          graphs=decoding, **kwargs), eager)
        counts = decoding.summary()
        assert counts["captured"] == 1 and counts["replayed"] > 0 and not counts["fallbacks"]


@pytest.mark.parametrize("variant", [{"learned_positions": True}, {"pre_norm": True}])
def test_the_fixed_shape_cache_serves_every_kind_of_model(graph_device, variant):
    """Learned positions gather their row at the device position; a pre-LN decoder ends in
    its final norm: both decode with graphs as without."""
    tokenizer, _ = make_task()
    backend.manual_seed(2)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16,
                                                d_ff=32, **variant))
    sources = np.random.default_rng(3).integers(4, tokenizer.vocab_size, size=(2, 5))
    eager = greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=6,
                          n_best=1)
    decoding = DecodingGraphs(model)
    for _ in range(2):
        assert_same_hypotheses(greedy_decode(model, sources, tokenizer.bos_id,
                                             tokenizer.eos_id, max_len=6, n_best=1,
                                             graphs=decoding), eager)
    assert decoding.summary()["replayed"] > 0


def test_the_least_recently_used_shape_gives_back_its_buffers_and_graph(model_and_sources):
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model, max_shapes=1)
    greedy_steps(model, tokenizer, sources, decoding)
    _, counts = greedy_steps(model, tokenizer, sources, decoding, max_len=12)  # a new limit
    assert counts["shapes"] == 1 and len(decoding.graphs.graphs) == 1
    assert counts["dropped"] == 1 and counts["captured"] == 2
    with pytest.raises(ValueError, match="max_shapes must be at least 1"):
        DecodingGraphs(model, max_shapes=0)


def test_what_an_earlier_batch_left_in_the_buffers_is_not_read(model_and_sources):
    """Positions not yet written are masked, but a weight of 0 times an earlier batch's inf
    would be nan: a new batch starts from zeroed keys and values."""
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model)
    eager = greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=7,
                          n_best=1)
    greedy_steps(model, tokenizer, sources, decoding)
    for state in decoding.states.values():  # as if the last batch had overflowed
        for k, v in state.self_kv:
            k[...] = np.inf
            v[...] = np.inf
    got, _ = greedy_steps(model, tokenizer, sources, decoding)
    assert_same_hypotheses(got, eager)


def test_parameters_replaced_by_load_state_dict_start_the_graphs_afresh(model_and_sources):
    """The graphs read the parameters' arrays: arrays replaced (not updated in place, as
    load_state_dict does) drop every graph and buffer, and the next decoding reads the new
    weights."""
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model)
    greedy_steps(model, tokenizer, sources, decoding)
    state = {name: backend.to_numpy(p.data) * 1.5 for name, p in model.named_parameters()}
    model.load_state_dict(state)
    eager = greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=7,
                          n_best=1)
    got, counts = greedy_steps(model, tokenizer, sources, decoding)
    assert_same_hypotheses(got, eager)
    assert counts["dropped"] == 1 and counts["captured"] == 2


def test_a_step_past_the_cache_limit_is_refused(model_and_sources):
    model, sources, _ = model_and_sources
    decoding = DecodingGraphs(model)
    src = Tensor(backend.as_array(sources))
    mask = model.source_mask(src)
    memory = model.encode(src, mask)
    cache = decoding.new_cache(memory, mask, 1, 3)              # 3 steps: 8 positions
    ids = backend.as_array(np.full((3, 1), 1))
    for _ in range(8):
        decoding.decode(ids, memory, mask, cache)
    with pytest.raises(ValueError, match="decoding step 9 is past the cache's 8 positions"):
        decoding.decode(ids, memory, mask, cache)


def test_a_cached_decoding_step_replays_after_the_weights_change(model_and_sources):
    """The stacked projection weights the graphs read are refilled in place."""
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model)
    for _ in range(2):
        greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=7,
                      graphs=decoding)
    w = model.decoder.layers[0].self_attn.w_k.weight
    w.data[...] = w.data * 3.0
    w._bump_version()
    eager = greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id, max_len=7,
                          n_best=1)
    assert_same_hypotheses(greedy_decode(model, sources, tokenizer.bos_id, tokenizer.eos_id,
                                         max_len=7, n_best=1, graphs=decoding), eager)
    assert decoding.summary()["replayed"] > 0


def test_a_replayed_decoding_step_refuses_host_ids_out_of_the_vocabulary(model_and_sources):
    """A replay checks nothing and a GPU's gather wraps an id round, so host ids are checked
    before they are copied in; and the fixed-shape cache refuses host rows out of range."""
    model, sources, tokenizer = model_and_sources
    decoding = DecodingGraphs(model)
    src = backend.as_array(sources)
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    cache = decoding.new_cache(memory, src_mask, beams=1, limit=7)
    V = model.config.tgt_vocab_size
    ids = np.full((3, 1), tokenizer.bos_id)
    for _ in range(3):  # the first step runs eagerly, the third is captured, then replayed
        decoding.decode(ids, memory, src_mask, cache)
    with pytest.raises(ValueError, match=f"target token ids must lie in 0..{V - 1}"):
        decoding.decode(np.full((3, 1), V), memory, src_mask, cache)
    rows = cache.layers[0][0].k_buf.shape[0]
    with pytest.raises(IndexError, match=f"StaticCache.reorder: index {rows} is out of bounds"):
        cache.reorder(np.array([0, rows]))
    with pytest.raises(IndexError, match="StaticCache.move_rows: index -9"):
        cache.move_rows(np.array([-9]), np.array([0]), 1)
    with pytest.raises(IndexError, match=f"StaticCache.move_rows: index {rows + 1}"):
        cache.move_rows((0, rows + 1), (1, 2), 3)  # a tuple of rows, as the buffers read it


# ----------------------------------------------------------------------------- the stand-in

@pytest.mark.parametrize("what, read", [
    ("x.get()", lambda x: x.get()),
    ("x.item()", lambda x: x[0].item()),
    ("float(x)", lambda x: float(x[0])),
    ("bool(x)", lambda x: bool(x[0] > 0)),
    ("copying a host array", lambda x: x + backend.get_backend("strict").xp.asarray(
        np.ones(3))),
    ("drawing random numbers", lambda x: backend.rng("strict").random(3)),
    ("nonzero", lambda x: backend.get_array_module(x).nonzero(x)),
])
def test_the_stand_in_refuses_what_cuda_refuses_while_capturing(what, read):
    x = backend.as_array(np.arange(3.0), device="strict")
    with pytest.raises(CaptureRefused, match=what.replace("(", r"\(").replace(")", r"\)")):
        StrictCapture().record(lambda: read(x))


def test_the_stand_in_computes_nothing_until_launched_and_bakes_python_scalars_in():
    x = backend.as_array(np.arange(3.0), device="strict")
    state = backend.as_array(np.zeros(3), device="strict")
    rate = 2.0
    recorder = StrictCapture()

    def step():
        state[...] += x * rate
        return state * 1.0

    out = recorder.record(step)
    assert np.isnan(out.get()).all() and (state.get() == 0).all()  # nothing ran
    rate = 10.0  # a float is baked into the graph, as in a kernel's arguments
    recorder.launch(lambda: None)
    recorder.launch(lambda: None)
    assert (state.get() == [0.0, 4.0, 8.0]).all() and (out.get() == state.get()).all()


def test_graphs_are_refused_on_the_cpu(tmp_path):
    with pytest.raises(GraphsUnavailable, match="CUDA graphs need a GPU"):
        GraphCache("cpu")
    with pytest.raises(GraphsUnavailable, match="CUDA graphs need a GPU"):
        trainer(tmp_path, True)
