"""Chapter 22's exercises 2, 3 and 5, measured: a higher dropout rate, forgetting
`model.eval()`, and label smoothing where the model overfits.

Every run is chapter 22's: the tiny model on the first 1,000 pairs of the built-in task, 500
steps of about 1,000 tokens, Adam with the paper's schedule and a 100-step warmup, the same
initial weights and batches; it varies P_drop and ε_ls. Each run reports the negative
log-likelihood per token (the unsmoothed loss; its exponential is the perplexity) on 500 of
its training pairs and on the 500 validation pairs every 100 steps, and at the end the
validation NLL with the model left in training mode (dropout on; the mean of 5 passes), and
the validation token accuracy.

    python lessons/answers/measure_dropout.py      # about 3 minutes on 2 cores
"""

from __future__ import annotations

import time

import numpy as np

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.data.batching import TokenBatcher, batches_in_order
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam, noam_rate
from minitransformer.translation.corpus import load_corpus, prepare

RUNS = ((0.0, 0.1), (0.1, 0.1), (0.3, 0.1), (0.1, 0.0), (0.0, 0.0))   # (P_drop, ε_ls)


def evaluate(model, pairs, training=False, passes=1):
    """(NLL per token, token accuracy) on pairs, in evaluation mode or, with ``training``,
    in training mode (dropout drawn afresh; the mean over ``passes``)."""
    model.train() if training else model.eval()
    nll = correct = tokens = 0
    with mt.no_grad():
        for _ in range(passes):
            for batch in batches_in_order(pairs, 4000):
                logits = model(batch.src, batch.tgt_in)                      # (B, T, V)
                nll += F.cross_entropy(logits, batch.tgt_out, ignore_index=0).item() \
                    * batch.n_tgt_tokens
                real = batch.tgt_out != 0
                correct += int((logits.numpy().argmax(-1) == batch.tgt_out)[real].sum())
                tokens += batch.n_tgt_tokens
    model.train()
    return nll / tokens, correct / tokens


def train(tokenizer, pairs, valid, p_dropout, label_smoothing, steps=500, max_tokens=1000,
          warmup=100, every=100):
    """Chapter 22's `train`, and the two NLLs every ``every`` steps."""
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size,
                                                p_dropout=p_dropout)).train()
    optimizer = Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    batcher = TokenBatcher(pairs, max_tokens, shuffle=True, seed=0)
    history, step, epoch = [], 0, 0
    while step < steps:
        batcher.set_epoch(epoch)
        for batch in batcher:
            if step == steps:
                break
            optimizer.zero_grad()
            F.cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out, label_smoothing,
                            ignore_index=0).backward()
            step += 1
            optimizer.lr = noam_rate(step, model.config.d_model, warmup)
            optimizer.step()
            if step % every == 0:
                history.append((step, evaluate(model, pairs[:500])[0],
                                evaluate(model, valid)[0]))
        epoch += 1
    return model.eval(), history


def measure() -> dict[tuple[float, float], dict]:
    """(P_drop, ε_ls) -> its curves and final measurements."""
    threads = mt.get_num_threads()
    mt.set_num_threads(1)  # the tiny model: one thread is fast enough, and fair to others
    try:
        tokenizer, data, _ = prepare(load_corpus("builtin"), vocab_size=1000, max_len=100)
        results = {}
        for p_dropout, eps in RUNS:
            model, history = train(tokenizer, data.train[:1000], data.valid, p_dropout, eps)
            nll, accuracy = evaluate(model, data.valid)
            mt.manual_seed(1)
            training_nll, _ = evaluate(model, data.valid, training=True, passes=5)
            results[p_dropout, eps] = {"history": history, "valid_nll": nll,
                                       "valid_accuracy": accuracy,
                                       "valid_nll_training_mode": training_nll,
                                       "best_valid_nll": min(b for _, _, b in history)}
        return results
    finally:
        mt.set_num_threads(threads)


def main() -> None:
    start = time.perf_counter()
    for (p_dropout, eps), result in measure().items():
        print(f"P_drop = {p_dropout}, ε_ls = {eps}:")
        print("  " + "  ".join(f"step {s}: train {a:.2f} valid {b:.2f}"
                               for s, a, b in result["history"]))
        print(f"  at the end: valid NLL {result['valid_nll']:.3f} (perplexity "
              f"{np.exp(result['valid_nll']):.2f}), best {result['best_valid_nll']:.3f}, "
              f"token accuracy {result['valid_accuracy']:.3f}; in training mode: valid NLL "
              f"{result['valid_nll_training_mode']:.3f}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
