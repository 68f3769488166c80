"""Learning tests: the assembled model, its gradients and Adam must actually learn.

Two classic sanity checks (The Annotated Transformer uses the copy task the same way): a tiny
model memorises a handful of random sentence pairs, and solves reversal, a task where every
output position must attend to a different input position.
"""

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation.decode import greedy_decode

PAD, BOS, EOS = 0, 1, 2


def teacher_forcing(targets):
    """Decoder input (BOS + target) and output (target + EOS), padded to one length."""
    T = max(len(t) for t in targets) + 1
    tgt_in = np.full((len(targets), T), PAD)
    tgt_out = np.full((len(targets), T), PAD)
    for row, t in enumerate(targets):
        tgt_in[row, : len(t) + 1] = [BOS, *t]
        tgt_out[row, : len(t) + 1] = [*t, EOS]
    return tgt_in, tgt_out


def pad_batch(sequences):
    batch = np.full((len(sequences), max(len(s) for s in sequences)), PAD)
    for row, s in enumerate(sequences):
        batch[row, : len(s)] = s
    return batch


def train_step(model, optimizer, src, tgt_in, tgt_out, label_smoothing=0.0):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(src, tgt_in), tgt_out, label_smoothing, ignore_index=PAD)
    loss.backward()
    optimizer.step()
    return loss.item()


def test_tiny_transformer_memorises_random_sentence_pairs():
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    vocab = 20
    sources = [list(rng.integers(3, vocab, size=rng.integers(3, 8))) for _ in range(6)]
    targets = [list(rng.integers(3, vocab, size=rng.integers(3, 8))) for _ in range(6)]
    src = pad_batch(sources)
    tgt_in, tgt_out = teacher_forcing(targets)

    model = Transformer(TransformerConfig.named("tiny", vocab, p_dropout=0.0))
    optimizer = Adam(model.parameters(), lr=3e-3)
    losses = [train_step(model, optimizer, src, tgt_in, tgt_out) for _ in range(300)]

    assert losses[-1] < 0.05 < losses[0]
    assert greedy_decode(model, src, BOS, EOS) == targets


def test_tiny_transformer_learns_to_reverse_unseen_sequences():
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    vocab = 13

    def reversal_batch(generator, n):
        length = int(generator.integers(4, 9))
        src = generator.integers(3, vocab, size=(n, length))
        tgt_in, tgt_out = teacher_forcing(list(src[:, ::-1]))
        return src, tgt_in, tgt_out

    config = TransformerConfig.named("tiny", vocab, d_model=32, d_ff=64, p_dropout=0.0)
    model = Transformer(config)
    optimizer = Adam(model.parameters(), lr=1e-3)
    for step in range(1, 2001):
        optimizer.lr = 1e-3 * min(1.0, step / 100)  # a short linear warmup
        train_step(model, optimizer, *reversal_batch(rng, 32))

    held_out = np.random.default_rng(12345)
    correct = total = 0
    for _ in range(4):
        src, _, _ = reversal_batch(held_out, 50)
        outputs = greedy_decode(model, src, BOS, EOS)
        correct += sum(out == list(s[::-1]) for out, s in zip(outputs, src, strict=True))
        total += len(src)
    assert correct / total >= 0.85, f"reversed {correct} of {total} unseen sequences exactly"
