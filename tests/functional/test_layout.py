"""Weights laid out for decoding (functional/_layout.py): inside ``frozen_weights`` a product of
a few rows reads one kept contiguous copy of Wᵀ, with the same numbers as W.T; outside it, or
for many rows, nothing is copied; the copies go when the outermost context ends; and a search
translates the same with and without them."""

import threading

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.functional import _layout
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.decode import beam_search, greedy_decode

W = np.random.default_rng(0).standard_normal((100, 24)).astype(np.float32)  # (C_out, C_in)
ROWS = _layout.MIN_COPY_ROWS


def test_outside_the_context_a_product_reads_the_view():
    wt = _layout.transposed(W, ROWS)
    assert wt.base is W and not wt.flags.c_contiguous


def test_inside_the_context_one_contiguous_copy_is_kept_and_reused():
    with _layout.frozen_weights([W]):
        wt = _layout.transposed(W, ROWS)
        assert wt.flags.c_contiguous and wt.base is not W
        assert_array_equal(wt, W.T)
        assert _layout.transposed(W, ROWS) is wt
        assert _layout.transposed(W, 2) is wt  # fewer rows read a copy once made
        assert _layout.transposed(W, 1).base is W  # but one row (matrix-vector) the view
        assert _layout.transposed(W, _layout.MAX_ROWS + 1).base is W  # many rows: the view
    assert _layout._kept == {}


def test_few_rows_make_no_copy():
    with _layout.frozen_weights([W]):
        assert _layout.transposed(W, ROWS - 1).base is W
        assert _layout._kept == {}


def test_arrays_not_frozen_are_never_copied():
    """A product's own temporaries (the stacked projections of a layer without a cache) are
    not among the frozen weights: copies of them would pile up until the context ends."""
    temporary = W.copy()
    with _layout.frozen_weights([W]):
        assert _layout.transposed(temporary, ROWS).base is temporary
        assert _layout._kept == {}


def test_copies_live_until_the_outermost_context_ends():
    with _layout.frozen_weights([W]):
        with _layout.frozen_weights([W]):
            wt = _layout.transposed(W, ROWS)
        assert _layout.transposed(W, ROWS) is wt
    assert _layout._kept == {}
    assert _layout.transposed(W, ROWS).base is W


def test_a_weight_thaws_when_its_own_contexts_end_whatever_else_is_open():
    """Two searches on two threads: the first ends, its model trains on, and its next product
    must read its weights as they are now, although the second search is still running."""
    other = W[:50].copy()
    first, second = _layout.frozen_weights([W]), _layout.frozen_weights([other])
    first.__enter__()
    second.__enter__()
    assert _layout.transposed(W, ROWS).base is not W
    first.__exit__(None, None, None)
    assert _layout.transposed(W, ROWS).base is W
    assert _layout.transposed(other, ROWS).base is not other
    second.__exit__(None, None, None)
    assert _layout._kept == {} and _layout._frozen == {}


def test_threads_asking_at_once_share_one_copy():
    copies = []
    barrier = threading.Barrier(4)

    def ask():
        barrier.wait()
        copies.append(_layout.transposed(W, ROWS))
    with _layout.frozen_weights([W]):
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(copies) == 4 and all(c is copies[0] for c in copies)


def test_laid_out_keeps_the_values_with_a_contiguous_transpose():
    w = _layout.laid_out(W)
    assert_array_equal(w, W)
    assert w.T.flags.c_contiguous


@pytest.mark.parametrize("rows", [ROWS, 3 * ROWS])
def test_a_linear_layer_computes_the_same_with_the_kept_copy(rows):
    x = np.random.default_rng(1).standard_normal((rows, 24)).astype(np.float32)
    b = np.linspace(-1, 1, 100, dtype=np.float32)
    weight = mt.tensor(W)
    plain = F.linear(mt.tensor(x), weight, mt.tensor(b)).numpy()
    with _layout.frozen_weights([weight.data]):
        laid = F.linear(mt.tensor(x), weight, mt.tensor(b)).numpy()
        assert len(_layout._kept) == 1
    assert_allclose(laid, plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_search_finds_the_same_tokens_with_and_without_the_copies(monkeypatch, beam):
    """80 sentences: products of at least MIN_COPY_ROWS rows, so the copies are made."""
    mt.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, n_layers=2,
                                          d_model=32, d_ff=64, n_heads=4, max_len=64))
    src = np.random.default_rng(2).integers(4, 40, size=(80, 9))

    def search():
        if beam == 1:
            return greedy_decode(model, src, 1, 2, max_len=12, n_best=1)
        return beam_search(model, src, 1, 2, beam, max_len=12, n_best=2)
    made = []
    copy = _layout._transposed_copy
    monkeypatch.setattr(_layout, "_transposed_copy", lambda w: made.append(w) or copy(w))
    laid = search()
    assert made, "no product made a copy"
    monkeypatch.setattr(_layout, "MAX_ROWS", -1)  # every product reads the view
    plain = search()
    assert [[h.tokens for h in hyps] for hyps in laid] == \
        [[h.tokens for h in hyps] for hyps in plain]
    for hyps_laid, hyps_plain in zip(laid, plain, strict=True):
        assert_allclose([h.score for h in hyps_laid], [h.score for h in hyps_plain],
                        rtol=1e-4)


def test_a_translation_session_copies_for_one_sentence_and_keeps_the_copies():
    """translation_session (a translate session reading line by line) makes the copies at the
    first product of two rows, a beam of one sentence, and every later search reads them."""
    from minitransformer.translation.translator import translation_session

    mt.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, n_layers=2,
                                          d_model=32, d_ff=64, n_heads=4, max_len=64))
    src = np.random.default_rng(3).integers(4, 40, size=(1, 9))
    plain = beam_search(model, src, 1, 2, 4, max_len=12, n_best=4)
    assert _layout._kept == {}  # alone, a 4-row search makes no copy
    with translation_session(model):
        first = beam_search(model, src, 1, 2, 4, max_len=12, n_best=4)
        kept = dict(_layout._kept)
        again = beam_search(model, src, 1, 2, 4, max_len=12, n_best=4)
        assert kept and _layout._kept.keys() == kept.keys()
        assert all(_layout._kept[key] is copy for key, copy in kept.items())
    assert _layout._kept == {} and _layout._frozen == {}
    for hyps in (first, again):
        assert [[h.tokens for h in s] for s in hyps] == [[h.tokens for h in s] for s in plain]
