"""The recipe of bench/multi30k.py in PyTorch eager, for the same-machine reference BLEU.

    pip install torch==2.13.0                   # for bench/ only
    python bench/multi30k_torch.py      # 45 minutes; bench/results/multi30k_torch.<machine>/
    python bench/multi30k_torch.py --minutes 2 --out /tmp/smoke

Everything but the training arithmetic is minitransformer's, so that the two runs differ in
nothing else: the same joint BPE tokenizer (trained the same way), the same token batches in
the same shuffled order (TokenBatcher, seed 0), the same initial weights (a minitransformer
model built with the seed, copied into bench/torch_model.py's TorchTransformer), the same
schedule (noam_rate at factor 0.7, 800 warmup steps), the same validation after every epoch
inside the budget (label-smoothed loss, and BLEU of greedy translations of the 1,014
validation sentences, decoded by torch_model.greedy_decode in the batches of
translation/translator.py). Torch draws its own dropout masks. After the budget, the last
weights and the average of the last five epochs' are copied back into a minitransformer model
and test_2016_flickr is translated and scored by bench/multi30k.py's score_test_set
(translation/decode.py's search gives the same outputs as torch_model.py's port of it;
compare_torch.py checks that).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import minitransformer as mt  # first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads

# isort: split
import torch
from machine import commit, kind, machine
from multi30k import score_test_set
from sacrebleu.metrics import BLEU
from torch_model import TorchTransformer, copy_weights
from torch_model import greedy_decode as torch_greedy_decode

from minitransformer.data.batching import TokenBatcher, batches_in_order
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import noam_rate
from minitransformer.translation.corpus import load_corpus, prepare

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
MAX_TOKENS, WARMUP, LR_SCALE, SMOOTHING, KEEP_LAST = 4000, 800, 0.7, 0.1, 5


def loss_of(model: TorchTransformer, batch, smoothing: float) -> torch.Tensor:
    """Label-smoothed cross-entropy per target token of a Batch (padding ignored)."""
    logits = model(torch.from_numpy(batch.src), torch.from_numpy(batch.tgt_in))   # (B, T, V)
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.from_numpy(batch.tgt_out).reshape(-1),
        ignore_index=model.config.pad_id, label_smoothing=smoothing)


def translate_greedy(model: TorchTransformer, tokenizer, sentences: list[str],
                     batch_size: int = 64) -> list[str]:
    """translator.translate with beam 1, decoding with torch_model.greedy_decode."""
    encoded = [tokenizer.encode(s.strip()) for s in sentences]
    outputs = [""] * len(sentences)
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
    pad = model.config.pad_id
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in rows)
        src = torch.tensor([[*encoded[i], *[pad] * (width - len(encoded[i]))] for i in rows])
        ids = torch_greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id, width + 50)
        for i, out in zip(rows, ids, strict=True):
            outputs[i] = tokenizer.decode(out)
    return outputs


def validate(model: TorchTransformer, tokenizer, data) -> dict:
    """Label-smoothed loss, perplexity and greedy BLEU on the validation set, as Trainer."""
    model.eval()
    smoothed = nll = 0.0
    n_tokens = 0
    with torch.inference_mode():
        for batch in batches_in_order(data.valid, MAX_TOKENS):
            smoothed += loss_of(model, batch, SMOOTHING).item() * batch.n_tgt_tokens
            nll += loss_of(model, batch, 0.0).item() * batch.n_tgt_tokens
            n_tokens += batch.n_tgt_tokens
    hypotheses = translate_greedy(model, tokenizer, data.valid_sources)
    bleu = BLEU().corpus_score(hypotheses, [data.valid_references])
    model.train()
    return {"valid_loss": smoothed / n_tokens, "valid_ppl": math.exp(min(nll / n_tokens, 50)),
            "valid_bleu": bleu.score, "sample": [data.valid_sources[0], hypotheses[0]]}


def into_minitransformer(state: dict, config: TransformerConfig) -> Transformer:
    """A minitransformer model holding the weights of a TorchTransformer state dict."""
    model = Transformer(config)
    for name, p in model.named_parameters():
        p.data[...] = state[name.replace(".gain", ".weight")].numpy()
    return model


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED), help="a Multi30k folder")
    parser.add_argument("--minutes", type=float, default=45.0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"
                                             / f"multi30k_torch.{kind()}"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if not Path(args.data).is_dir():
        sys.exit(f"no Multi30k folder at {args.data}: get one with "
                 "`minitransformer data multi30k --dest DIR` and pass --data DIR.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    corpus = load_corpus(args.data, "de", "en")
    tokenizer, data, n_dropped = prepare(corpus, vocab_size=8000, max_len=100)
    mt.manual_seed(args.seed)
    config = TransformerConfig.named("small", tokenizer.vocab_size)
    model = TorchTransformer(config)
    copy_weights(model, Transformer(config))              # minitransformer's initial weights
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    batcher = TokenBatcher(data.train, MAX_TOKENS, shuffle=True, seed=args.seed)
    steps_per_epoch = len(batcher)
    print(f"torch {torch.__version__}, {args.threads} threads; {len(data.train):,} training "
          f"pairs ({n_dropped} dropped), {steps_per_epoch} steps per epoch", flush=True)

    log = open(out / "log.jsonl", "w", encoding="utf-8")
    step, epoch, tokens, kept, validations = 0, 0, 0, [], []
    started = time.perf_counter()
    model.train()
    while time.perf_counter() - started < args.minutes * 60:
        batcher.set_epoch(epoch)
        for batch in batcher:
            if time.perf_counter() - started >= args.minutes * 60:
                break
            t0 = time.perf_counter()
            optimizer.zero_grad()
            loss = loss_of(model, batch, SMOOTHING)
            loss.backward()
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = noam_rate(step, config.d_model, WARMUP, LR_SCALE)
            optimizer.step()
            n = batch.n_src_tokens + batch.n_tgt_tokens
            tokens += n
            log.write(json.dumps({"step": step, "loss": loss.item(), "tokens": n,
                                  "tokens_per_s": n / (time.perf_counter() - t0)}) + "\n")
            if step % steps_per_epoch == 0:
                validations.append(_validate(model, tokenizer, data, step, epoch, kept, log))
        else:
            epoch += 1
    elapsed = time.perf_counter() - started
    if step % steps_per_epoch:
        validations.append(_validate(model, tokenizer, data, step, epoch, kept, log))
    log.close()

    last = kept[-1]
    averaged = {name: sum(state[name] for state in kept) / len(kept) for name in last}
    results = {
        "benchmark": "Multi30k de->en, small Transformer, fixed wall-clock budget, PyTorch "
                     "eager (bench/multi30k_torch.py)", "budget_minutes": args.minutes,
        "seed": args.seed, "torch": torch.__version__, "threads": args.threads,
        "config": config.to_dict(), "steps": step,
        "epochs": step / steps_per_epoch, "train_seconds": round(elapsed, 1),
        "tokens_per_s": tokens / elapsed, "machine": machine(), "commit": commit(),
        "validations": validations,
        "averaged_epochs": len(kept), "test": {}}
    for name, state in (("last", last), ("averaged", averaged)):
        results["test"].update(score_test_set(name, into_minitransformer(state, config),
                                              tokenizer, corpus.test, out))
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def _validate(model, tokenizer, data, step: int, epoch: int, kept: list, log) -> dict:
    """Validate, log, and keep a copy of the weights (the last KEEP_LAST are averaged)."""
    result = {**validate(model, tokenizer, data), "step": step, "epoch": epoch}
    log.write(json.dumps({"validation": result}) + "\n")
    log.flush()
    kept.append({name: t.detach().clone() for name, t in model.state_dict().items()})
    del kept[:-KEEP_LAST]
    print(f"step {step}: valid loss {result['valid_loss']:.3f}, BLEU {result['valid_bleu']:.2f}",
          flush=True)
    return result


if __name__ == "__main__":
    main()
