"""A float32 training step stays float32: no float64 array is ever created, not even a
temporary inside a forward or backward. A single float64 upcast (a Python float times a
bool array, a float64 constant table) would double that array's memory traffic.

The strict backend sees every array it creates (operators, ufuncs, reductions, matmuls,
``xp`` functions), so the step runs there once with a recorder on.
"""

import numpy as np
import strict_backend

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam, clip_grad_norm


def test_a_float32_training_step_creates_no_float64_array():
    with mt.device("strict"):
        mt.manual_seed(0)
        config = TransformerConfig.named("tiny", 40, p_dropout=0.1)
        model = Transformer(config)
        optimizer = Adam(model.parameters(), lr=1e-3)
        rng = np.random.default_rng(0)
        src = rng.integers(4, 40, size=(3, 7))
        src[1, 5:] = 0                                   # padding in the source
        tgt = rng.integers(4, 40, size=(3, 6))
        tgt[2, 4:] = 0                                   # and in the target

        def step():
            optimizer.zero_grad()
            logits = model(src, tgt[:, :-1])
            loss = F.cross_entropy(logits, tgt[:, 1:], label_smoothing=0.1, ignore_index=0)
            loss.backward()
            clip_grad_norm(model.parameters(), 1.0)
            optimizer.step()

        # The first step builds the positional table once, from float64 sinusoids cast to
        # float32 (deliberately: the table is exact to float32's last bit); not recorded.
        step()
        with strict_backend.created_dtypes() as dtypes:
            step()
            step()
    floats = {dtype for dtype in dtypes if dtype.kind == "f"}
    assert floats == {np.dtype("float32")}, f"float dtypes created in the step: {floats}"
    assert all(p.data.dtype == np.float32 and p.grad.dtype == np.float32
               for p in model.parameters())
