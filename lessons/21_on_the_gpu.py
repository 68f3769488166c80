# %% [markdown]
# # Chapter 21 — The same code on the GPU with CuPy
#
# Nothing in the library's layers mentions NumPy by name: every Function asks
# `get_array_module(x)` for the module that owns its input and calls that. CuPy copies NumPy's
# interface for NVIDIA GPUs, so switching the device switches every array, and every
# hand-written backward runs on the GPU unchanged. This chapter runs a gradient check and a
# training step on the GPU where there is one, and says how to get one working where there
# is not.

# %%
import time

import numpy as np

import minitransformer as mt
from minitransformer import backend
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.verify.function_cases import CASES, run_case

try:
    mt.use("cuda")
    GPU = True
except mt.DeviceError as error:
    GPU = False
    print("No GPU here, so this chapter explains instead of running:\n ", error)
finally:
    mt.use("cpu")

# %% [markdown]
# ## One interface, two array modules
#
# The backend decides which module an array belongs to. On the CPU it is NumPy:

# %%
x = mt.randn(2, 3)
print(type(x.data), backend.get_array_module(x.data).__name__)

# %% [markdown]
# ## Gradient checks on the GPU
#
# A gradient check in float64 works on the GPU as on the CPU; it is the best proof that the
# device path computes the same derivatives. (On an NVIDIA H200 every test that runs on the
# GPU passed, the gradient checks among them: `bench/results/cuda_tests.h200-9d1a7fe.log`.)

# %%
if GPU:
    mt.use("cuda")
    for case in CASES[::8]:
        report = run_case(case)
        print(f"{report.name:<28} {report.max_rel_error:.1e} "
              f"{'pass' if report.passed else 'FAIL'}")
    mt.use("cpu")
else:
    print("skipped: `minitransformer gradcheck --device cuda` runs the whole suite on a GPU.")

# %% [markdown]
# ## A training step, CPU against GPU
#
# Parameters are initialised on the host from the seeded generator, then moved: the same seed
# gives the same model on both devices, so their losses can be compared.

# %%
def one_step(device):
    with mt.device(device):
        mt.manual_seed(0)
        model = Transformer(TransformerConfig.named("small", 8000, p_dropout=0.0))
        optimizer = Adam(model.parameters(), lr=1e-4)
        rng = np.random.default_rng(0)
        src, tgt = rng.integers(4, 8000, (32, 30)), rng.integers(4, 8000, (32, 31))
        # A first forward and backward, untimed: on a GPU the first call of each kernel also
        # compiles it (CuPy keeps it on disk afterwards) and sets up cuBLAS.
        F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], 0.1).backward()
        optimizer.zero_grad()
        start = time.perf_counter()
        loss = F.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], 0.1)
        loss.backward()
        optimizer.step()
        value = loss.item()                          # waits for the GPU to finish
        return value, time.perf_counter() - start


if GPU:
    for device in ("cpu", "cuda"):
        loss, seconds = one_step(device)
        print(f"{device}: loss {loss:.5f}, one step {seconds:.3f} s")
else:
    print("skipped: with a GPU, both devices should print the same loss up to float32's "
          "rounding.")

# %% [markdown]
# ## Getting a GPU working
#
# 1. An NVIDIA GPU with a recent driver (`nvidia-smi` lists it).
# 2. `pip install -e ".[gpu]"` installs CuPy built for CUDA 12.
# 3. `export MINITRANSFORMER_DEVICE=cuda`, or `minitransformer.use("cuda")` in code, or
#    `--device cuda` on the command line.
#
# ## Exercises
#
# 1. Why does `loss.item()` make the timing honest on a GPU, while timing `loss.backward()`
#    alone would not be?
# 2. Find the batch size at which the GPU step becomes faster than the CPU step: measure it
#    where you have a GPU, or estimate it from the recorded step times in `bench/results/`
#    (the CPU's time per target token, the GPU's time per step).
# 3. The test suite runs every operation on a "strict" CPU backend whose arrays refuse to
#    turn into NumPy arrays (tests/strict_backend.py). Which mistakes does that catch that
#    NumPy alone would let through?
