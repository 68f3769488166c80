"""Module basics: registration order, sharing, saving and loading, modes, devices and dtypes."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import minitransformer as mt
from minitransformer.nn import (
    Dropout,
    Linear,
    Module,
    ModuleList,
    Parameter,
    Transformer,
    TransformerConfig,
)

V = 20
SRC = np.array([[5, 3, 7, 2, 9], [4, 8, 1, 6, 0]])
TGT = np.array([[1, 4, 6, 2], [1, 9, 5, 11]])


def tiny(seed=0, **overrides):
    mt.manual_seed(seed)
    return Transformer(TransformerConfig.named("tiny", V, **overrides))


# ----------------------------------------------------------------------------- registration

def test_named_parameters_follow_assignment_order():
    names = [n for n, _ in tiny().named_parameters()]
    assert names == [n for n, _ in tiny(seed=1).named_parameters()]  # deterministic
    assert names[0] == "src_embed.weight"
    prefix = "encoder.layers.0.self_attn."
    assert names[1:9] == [prefix + f"w_{w}.{p}" for w in "qkvo" for p in ("weight", "bias")]
    assert names.index("encoder.layers.1.self_attn.w_q.weight") > names.index(
        "encoder.layers.0.ff_residual.norm.bias")
    assert names.index("decoder.layers.0.self_attn.w_q.weight") > names.index(
        "encoder.layers.1.ff_residual.norm.bias")
    assert names.index("decoder.layers.0.cross_attn.w_q.weight") > names.index(
        "decoder.layers.0.self_attn.w_o.bias")
    assert len(names) == len(set(names))


def test_a_module_lists_parameters_in_the_order_they_were_assigned():
    class Net(Module):
        def __init__(self):
            super().__init__()
            self.z = Parameter(np.zeros(1))
            self.a = Linear(2, 3)
            self.m = Parameter(np.zeros(2))

    assert [n for n, _ in Net().named_parameters()] == ["z", "m", "a.weight", "a.bias"]


def test_a_shared_parameter_is_listed_once():
    class Net(Module):
        def __init__(self):
            super().__init__()
            self.first = Linear(3, 3)
            self.second = Linear(3, 3)
            self.second.weight = self.first.weight

    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["first.weight", "first.bias", "second.bias"]
    assert net.num_parameters() == 9 + 3 + 3
    model = tiny()
    tables = [p for p in model.parameters() if p is model.src_embed.weight]
    assert len(tables) == 1 and model.tgt_embed.weight is model.src_embed.weight


def test_num_parameters_sums_the_sizes():
    model = tiny()
    assert model.num_parameters() == sum(p.size for p in model.parameters()) == 43392
    assert Linear(4, 5).num_parameters() == 25
    assert Linear(4, 5, bias=False).num_parameters() == 20


# ----------------------------------------------------------------------------- saving

def test_state_dict_returns_host_numpy_copies(device):
    model = tiny()
    state = model.state_dict()
    assert list(state) == [n for n, _ in model.named_parameters()]
    assert all(type(a) is np.ndarray for a in state.values())
    before = model.src_embed.weight.numpy().copy()
    state["src_embed.weight"][:] = 7.0
    assert_array_equal(model.src_embed.weight.numpy(), before)


def test_round_trip_into_a_model_with_another_seed_gives_identical_logits(device):
    source, target = tiny(seed=0).eval(), tiny(seed=1).eval()
    assert not np.array_equal(source(SRC, TGT).numpy(), target(SRC, TGT).numpy())
    target.load_state_dict(source.state_dict())
    assert_array_equal(target(SRC, TGT).numpy(), source(SRC, TGT).numpy())


def test_load_state_dict_copies_the_arrays():
    # the model must own its weights: mutating the state afterwards (or training a second
    # model loaded from it, Adam updates in place) must not reach into this model
    source, target = tiny(seed=0), tiny(seed=1)
    state = source.state_dict()
    target.load_state_dict(state)
    loaded = target.src_embed.weight.numpy().copy()
    state["src_embed.weight"] += 1.0
    assert_array_equal(target.src_embed.weight.numpy(), loaded)


def test_load_state_dict_refuses_entries_that_are_not_arrays():
    """A list once failed with "'list' object has no attribute 'shape'"."""
    target = tiny(seed=1)
    state = target.state_dict()
    state["src_embed.weight"] = state["src_embed.weight"].tolist()
    before = target.src_embed.weight.numpy().copy()
    with pytest.raises(TypeError, match=r"every entry must be an array, as state_dict\(\) gives "
                                        r"them, got src_embed.weight \(a list\)"):
        target.load_state_dict(state)
    assert_array_equal(target.src_embed.weight.numpy(), before)


def test_strict_false_loads_a_subset():
    source, target = tiny(seed=0), tiny(seed=1)
    untouched = target.decoder.layers[0].self_attn.w_q.weight.numpy().copy()
    subset = {n: a for n, a in source.state_dict().items() if n.startswith("encoder.")}
    with pytest.raises(ValueError, match="missing src_embed.weight"):
        target.load_state_dict(subset)
    target.load_state_dict(subset, strict=False)
    assert_array_equal(target.encoder.layers[1].ff_residual.norm.gain.numpy(),
                       source.encoder.layers[1].ff_residual.norm.gain.numpy())
    assert_array_equal(target.encoder.layers[0].self_attn.w_q.weight.numpy(),
                       source.encoder.layers[0].self_attn.w_q.weight.numpy())
    assert_array_equal(target.decoder.layers[0].self_attn.w_q.weight.numpy(), untouched)
    # strict=False forgives missing and unexpected names, never a shape that differs
    bad = {"encoder.layers.0.self_attn.w_q.weight": np.zeros((3, 3)), "extra": np.zeros(1)}
    with pytest.raises(ValueError, match=r"saved \(3, 3\), model \(32, 32\)"):
        target.load_state_dict(bad, strict=False)


def test_load_state_dict_casts_and_moves_to_each_parameter():
    mt.manual_seed(0)
    source = tiny().eval()
    state = {n: a.astype(np.float64) for n, a in source.state_dict().items()}
    with mt.device("strict"):
        target = tiny(seed=1).eval()
    target.load_state_dict(state)
    for _, p in target.named_parameters():
        assert p.device == "strict" and p.dtype == np.float32
    assert_allclose(target(SRC, TGT).numpy(), source(SRC, TGT).numpy(), atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- modes

def test_train_and_eval_reach_every_submodule():
    model = tiny()
    assert all(m.training for m in model.modules())
    assert model.eval() is model
    assert len(model.modules()) > 40 and not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    model.train(False)
    assert not model.decoder.layers[1].ff_residual.dropout.training


def test_dropout_is_the_identity_in_eval_and_random_in_train(device):
    model = tiny().eval()
    assert_array_equal(model(SRC, TGT).numpy(), model(SRC, TGT).numpy())
    model.train()
    first, second = model(SRC, TGT).numpy(), model(SRC, TGT).numpy()
    assert not np.allclose(first, second)
    x = mt.randn(4, 8)
    drop = Dropout(0.5).eval()
    assert_array_equal(drop(x).numpy(), x.numpy())


def test_zero_grad_clears_every_gradient():
    model = tiny().eval()
    model(SRC, TGT).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


# ----------------------------------------------------------------------------- devices, dtypes

def test_to_moves_every_parameter_in_place_and_the_model_runs_there():
    model = tiny().eval()
    expected = model(SRC, TGT).numpy()
    params = model.parameters()
    assert model.to("strict") is model
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(p.device == "strict" for p in params)
    # the current device is still "cpu": the model works from where its weights are
    logits = model(SRC, TGT)
    assert logits.device == "strict"
    assert_allclose(logits.numpy(), expected, atol=1e-6, rtol=0)
    model.to("cpu")
    assert all(p.device == "cpu" for p in params)


def test_to_dtype_casts_every_parameter():
    model = tiny().eval()
    expected = model(SRC, TGT).numpy()
    params = model.parameters()
    model.to(dtype="float64")
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(p.dtype == np.float64 for p in params)
    logits = model(SRC, TGT)
    assert logits.dtype == np.float64
    assert_allclose(logits.numpy(), expected, atol=1e-5, rtol=0)


def test_to_an_integer_dtype_is_refused_and_changes_nothing():
    """It cast every weight to an integer, silently."""
    layer = Linear(3, 2)
    weight = layer.weight.numpy().copy()
    with pytest.raises(TypeError, match=r"to\(dtype='int32'\): parameters must stay floating "
                                        r"point"):
        layer.to(dtype="int32")
    assert_array_equal(layer.weight.numpy(), weight)


# ----------------------------------------------------------------------------- printing, lists

def test_repr_of_a_transformer_shows_its_layers():
    text = repr(tiny())
    assert text.startswith("Transformer(parameters=43,392")
    for part in ("(encoder): Encoder(", "(decoder): Decoder(", "(0): EncoderLayer(",
                 "(1): DecoderLayer(", "(self_attn): MultiHeadAttention(d_model=32, n_heads=4",
                 "(w_q): Linear(32, 32, bias=True)", "(norm): LayerNorm(32", "post-LN"):
        assert part in text


def test_forgetting_super_init_gives_a_clear_error():
    class Broken(Module):
        def __init__(self):
            self.layer = Linear(2, 2)

    with pytest.raises(RuntimeError, match=r"Broken.__init__ must call super\(\).__init__\(\)"):
        Broken()


def test_a_parameter_or_submodule_is_not_silently_replaced_by_another_kind():
    """`layer.weight = layer.weight.detach()` would drop the weight from parameters() and
    state_dict() without a word: refused, as PyTorch does."""
    layer = Linear(3, 2)
    with pytest.raises(TypeError, match=r"cannot assign a value of type Tensor to Linear.weight, "
                                        r"which is a Parameter: .*weight.data\[...\] = \.\.\."):
        layer.weight = layer.weight.detach()
    model = tiny()
    with pytest.raises(TypeError, match="cannot assign a value of type int to Transformer.encoder, "
                                        "which is a Module"):
        model.encoder = 3
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    layer.weight = Parameter(np.zeros((2, 3), dtype=np.float32))   # its own kind: replaced
    assert not layer.weight.numpy().any() and len(layer.parameters()) == 2
    layer.bias = None                                               # None: no bias
    assert [n for n, _ in layer.named_parameters()] == ["weight"]


def test_deleting_a_parameter_or_submodule_unregisters_it():
    layer, model = Linear(3, 2), tiny()
    del layer.bias
    del model.embed_dropout
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    assert "bias" not in layer.state_dict()
    assert all(m is not model.__dict__.get("embed_dropout") for m in model.modules())
    assert not any(name == "embed_dropout" for name, _ in model.named_modules())


def test_module_list_indexes_counts_and_iterates():
    layers = [Linear(2, 2), Linear(2, 3), Linear(3, 1)]
    stack = ModuleList(layers)
    assert len(stack) == 3
    assert stack[0] is layers[0] and stack[-1] is layers[2]
    assert list(stack) == layers
    stack.append(Linear(1, 1))
    assert len(stack) == 4
    assert [n for n, _ in stack.named_parameters()][:3] == ["0.weight", "0.bias", "1.weight"]
    assert len(ModuleList()) == 0
