"""How often a search reads the device on the host: on a GPU every read (a count, a flag, a
token list) waits for all the kernels queued before it, so a step that reads three flags one
by one stalls three times. The strict backend logs every such read (``host_reads``), and these
tests bound the reads each further decoding step adds.

An EOS id the model cannot emit (-1) keeps every hypothesis going to the length limit, so
every step is a plain one: no hypothesis finishes, no sentence leaves early.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strict_backend import host_reads

import minitransformer
from minitransformer import backend
from minitransformer.nn.config import TransformerConfig
from minitransformer.nn.transformer import Transformer
from minitransformer.translation.decode import _rows_where, beam_search, greedy_decode

BOS, NEVER = 1, -1
SOURCES = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0], [5, 5, 5, 5, 0]])  # padded batch


def reads_of(search, max_len: int) -> list[str]:
    backend.use("strict")
    minitransformer.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", 11, p_dropout=0.0))
    with host_reads() as reads:
        search(model, SOURCES, BOS, NEVER, max_len=max_len)
    return reads


@pytest.mark.parametrize("search", [greedy_decode, beam_search],
                         ids=["greedy", "beam"])
def test_a_plain_step_reads_the_device_at_most_twice(search):
    """Each step: the embedding's check of the new ids (one flag) and the search's own
    answers (greedy: how many go on; beam: whether any finished, any reached the limit, how
    many are settled, in one transfer)."""
    short, long = reads_of(search, 4), reads_of(search, 12)
    assert len(long) - len(short) <= 2 * (12 - 4), long


def test_the_reads_are_what_the_log_says():
    """The log itself: a flag read by bool() and a count sized by nonzero are each one entry,
    a boolean index on the device one more; arithmetic reads nothing."""
    backend.use("strict")
    xp = backend.get_backend("strict").xp
    x = xp.asarray(np.array([1.0, -2.0, 3.0]))
    with host_reads() as reads:
        y = x * 2 + 1
        bool((y > 0).any())
        xp.nonzero(y > 0)
        x[x > 0]
    assert [r.split(":")[0] for r in reads] == ["bool(x)", "nonzero", "boolean indexing"]


@given(st.lists(st.booleans(), max_size=40))
def test_rows_where_is_nonzero_without_a_read(mask):
    """``_rows_where`` finds the True rows on the device from their count, which the caller
    knows: the same rows as nonzero, and no read on the host."""
    backend.use("strict")
    xp = backend.get_backend("strict").xp
    device_mask = xp.asarray(np.array(mask, dtype=bool))
    with host_reads() as reads:
        rows = _rows_where(device_mask, sum(mask), xp)
    assert reads == []
    assert rows.get().tolist() == np.nonzero(mask)[0].tolist()
