"""The recorded forward pass (viz/trace.py): names, nesting and shapes are the model's own,
and the model is left as it was."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.viz.trace import record, record_transformer

SRC = np.array([[11, 12, 13, 14, 15], [16, 17, 18, 0, 0]])          # (B, S) = (2, 5)
TGT = np.array([[2, 21, 22, 23], [2, 24, 25, 0]])                   # (B, T) = (2, 4)


@pytest.fixture
def model():
    return Transformer(TransformerConfig.named("tiny", 50))


def test_the_call_tree_follows_the_code(model):
    call, logits = record(model, SRC, TGT)
    assert call.name == "" and call.output == (2, 4, 50) == logits.shape
    assert [c.name for c in call.children] == [
        "src_embed", "src_positions", "embed_dropout", "encoder",
        "src_embed", "tgt_positions", "embed_dropout", "decoder"]  # one shared table
    layer = call.find("decoder.layers.1")
    assert [r.name for r in layer.children] == [
        "decoder.layers.1.self_residual", "decoder.layers.1.cross_residual",
        "decoder.layers.1.ff_residual"]
    # each residual calls its sub-layer, then the dropout, then the norm (post-LN)
    assert [c.name.rsplit(".", 1)[-1] for c in layer.children[1].children] == [
        "cross_attn", "dropout", "norm"]


def test_shapes_masks_and_weights_are_those_of_the_batch(model):
    call, _ = record(model, SRC, TGT)
    self_attn = call.find("decoder.layers.0.self_attn")
    cross_attn = call.find("decoder.layers.0.cross_attn")
    encoder_attn = call.find("encoder.layers.1.self_attn")
    assert self_attn.same_inputs and not cross_attn.same_inputs
    assert cross_attn.inputs[:3] == [(2, 4, 32), (2, 5, 32), (2, 5, 32)]
    assert (self_attn.weights, cross_attn.weights, encoder_attn.weights) == (
        (2, 4, 4, 4), (2, 4, 4, 5), (2, 4, 5, 5))
    (causal,), (padding,) = self_attn.masks, cross_attn.masks
    assert causal.shape == (2, 1, 4, 4) and causal.causal
    assert np.array_equal(causal.first, np.tril(np.ones((4, 4), bool)))
    assert padding.shape == (2, 1, 1, 5) and not padding.causal
    assert call.find("encoder.layers.0.feed_forward").feed_forward_width() == (2, 5, 64)


def test_the_model_is_left_as_it_was(model):
    attention = model.decoder.layers[0].self_attn
    model.train()
    record(model, SRC, TGT)
    assert all(m.training for m in model.modules())
    assert not any("forward" in vars(m) for m in model.modules())
    assert attention.record_weights is False and attention.weights is None
    with mt.no_grad():
        before = model.eval()(SRC, TGT).numpy()
    record(model, SRC, TGT)
    with mt.no_grad():
        assert np.array_equal(model(SRC, TGT).numpy(), before)


def test_a_configuration_and_batch_sizes_make_the_model_and_the_ids():
    model, call = record_transformer(TransformerConfig.named("tiny", 50, pad_id=3), (3, 6, 2))
    assert isinstance(model, Transformer)
    assert call.inputs == [(3, 6), (3, 2)] and call.output == (3, 2, 50)
    padding = call.find("encoder.layers.0.self_attn").masks[0]
    assert padding.first.all()  # random ids leave out the padding id


@pytest.mark.parametrize("batch", [(2, 0, 3), (2, 5), (2.0, 5, 3), (True, 4, 4)])
def test_batch_sizes_that_cannot_be_used_are_refused(batch):
    with pytest.raises(ValueError, match=r"batch must be the sizes \(B, S, T\)"):
        record_transformer(TransformerConfig.named("tiny", 50), batch)
