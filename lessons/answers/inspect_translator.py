"""Chapter 19's exercises, measured on chapter 16's translator.

Trains the translator exactly as chapter 16 does (the built-in task, 1,000 BPE pieces, the
tiny model, 500 steps, seed 0), or loads a checkpoint, then reports

1. for every head of the encoder: the fraction of source positions (over 200 validation
   sentences) whose strongest weight is on the previous token, and on the next;
2. for chapter 19's sentence, whose subordinate clause puts the Velish verb last: the
   translation, and for each output piece the source pieces its cross-attention reads most
   (heads averaged, each decoder layer); then the same for the clause-final verb of six
   validation sentences with a subordinate clause, teacher-forced on their references;
3. the entropy of every head's weights (nats), averaged over query positions and sentences,
   next to the entropy of uniform weights over the same keys.

    python lessons/answers/inspect_translator.py             # about 2 minutes on 2 cores
    python lessons/answers/inspect_translator.py --checkpoint runs/lesson16/checkpoints/last.npz
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import minitransformer as mt
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.checkpoint import load_checkpoint, restore_model
from minitransformer.translation.corpus import load_corpus, prepare
from minitransformer.translation.training import TrainConfig, Trainer
from minitransformer.translation.translator import translate

SENTENCE = "The old farmer saw that the young girls were singing in the garden."


def chapter_16_translator(checkpoint: str | None) -> tuple[Transformer, Tokenizer]:
    if checkpoint:
        saved = load_checkpoint(checkpoint)
        return restore_model(saved).eval(), Tokenizer.from_bytes(saved.tokenizer_bytes)
    mt.manual_seed(0)
    tokenizer, data, _ = prepare(load_corpus("builtin"), vocab_size=1000, max_len=100)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size))
    config = TrainConfig(max_steps=500, warmup_steps=400, eval_every=250, bleu_sentences=200,
                         progress=False)
    with tempfile.TemporaryDirectory() as folder:
        Trainer(model, tokenizer, data, config, Path(folder)).fit()
    return model.eval(), tokenizer


def attentions(model: Transformer) -> dict[str, object]:
    named = {f"encoder {i}": layer.self_attn for i, layer in enumerate(model.encoder.layers)}
    for i, layer in enumerate(model.decoder.layers):
        named[f"decoder self {i}"] = layer.self_attn
        named[f"cross {i}"] = layer.cross_attn
    return named


def record(model: Transformer, src: list[int], out: list[int], bos: int) -> dict[str, np.ndarray]:
    """Every attention's weights (H, T, S) for one sentence, teacher-forced on ``out``."""
    named = attentions(model)
    for attention in named.values():
        attention.record_weights = True
    with mt.no_grad():
        model(np.array([src]), np.array([[bos, *out]]))
    for attention in named.values():
        attention.record_weights = False
    return {name: attention.weights.numpy()[0] for name, attention in named.items()}


def survey(model: Transformer, tokenizer: Tokenizer, n: int = 200) -> dict[str, dict]:
    """Per attention and head: neighbour fractions (encoder) and mean entropy (all)."""
    pairs = load_corpus("builtin").valid[:n]
    stats: dict[str, dict] = {}
    for source, target in pairs:
        src, out = tokenizer.encode(source), tokenizer.encode(target)
        for name, weights in record(model, src, out, tokenizer.bos_id).items():
            H, T, S = weights.shape
            entry = stats.setdefault(name, {"previous": np.zeros(H), "next": np.zeros(H),
                                            "queries": 0, "entropy": np.zeros(H),
                                            "uniform": 0.0})
            p = np.clip(weights, 1e-12, 1.0)
            entropy = -(weights * np.log(p)).sum(axis=-1)                  # (H, T)
            entry["entropy"] += entropy.sum(axis=1)
            if name.startswith("decoder self"):                           # causal: t + 1 keys
                entry["uniform"] += float(np.log(np.arange(1, T + 1)).sum())
            else:
                entry["uniform"] += T * float(np.log(S))
            entry["queries"] += T
            if name.startswith("encoder"):
                strongest = weights.argmax(axis=-1)                        # (H, S)
                positions = np.arange(T)
                entry["previous"] += (strongest == positions - 1).sum(axis=1)
                entry["next"] += (strongest == positions + 1).sum(axis=1)
    for entry in stats.values():
        for key in ("previous", "next", "entropy"):
            entry[key] = entry[key] / entry["queries"]
        entry["uniform"] /= entry["queries"]
    return stats


def clause_final_verb(model: Transformer, tokenizer: Tokenizer) -> tuple[str, list]:
    """The translation of SENTENCE and, per output piece, each decoder layer's three most
    read source pieces (heads averaged)."""
    translation = translate(model, tokenizer, [SENTENCE])[0]
    src, out = tokenizer.encode(SENTENCE), tokenizer.encode(translation)
    return translation, reads(model, tokenizer, src, out)


def reads(model: Transformer, tokenizer: Tokenizer, src: list[int], out: list[int],
          rows: list[int] | None = None) -> list:
    """For output pieces ``rows`` (default all) of ``out``, teacher-forced: the piece and
    each cross-attention layer's three most read source pieces (heads averaged)."""
    weights = record(model, src, out, tokenizer.bos_id)
    source = [tokenizer.id_to_piece(i) for i in src]
    found = []
    for k in range(len(out)) if rows is None else rows:
        top3 = []
        for name in (n for n in weights if n.startswith("cross")):
            mean = weights[name].mean(axis=0)[k]              # row k predicts output piece k
            top = np.argsort(mean)[::-1][:3]
            top3.append((name, [(source[j], round(float(mean[j]), 2)) for j in top]))
        found.append((tokenizer.id_to_piece(out[k]), top3))
    return found


def subordinate_verbs(model: Transformer, tokenizer: Tokenizer, n: int = 6) -> list:
    """Validation pairs whose Velish has a subordinate clause (", ke ... VERB."), teacher-
    forced on the reference: what the clause-final verb's first piece reads in the source."""
    examples = []
    for source, target in load_corpus("builtin").valid:
        if ", ke " not in target or not target.endswith("."):
            continue
        verb = target.rstrip(".").split()[-1]
        out = tokenizer.encode(target)
        prefix = tokenizer.encode(target.rstrip(".").rsplit(" ", 1)[0])
        row = len(prefix)                                    # the verb's first piece
        examples.append((source, target, verb, reads(model, tokenizer,
                                                     tokenizer.encode(source), out, [row])))
        if len(examples) == n:
            break
    return examples


def measure(checkpoint: str | None = None) -> dict:
    """Everything main prints, as data: the survey, the chapter's sentence, the verbs."""
    threads = mt.get_num_threads()
    mt.set_num_threads(1)  # the tiny model: one thread is fast enough, and fair to others
    try:
        model, tokenizer = chapter_16_translator(checkpoint)
        return {"survey": survey(model, tokenizer),
                "sentence": clause_final_verb(model, tokenizer),
                "verbs": subordinate_verbs(model, tokenizer)}
    finally:
        mt.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="a checkpoint of the translator (default: train "
                        "chapter 16's)")
    args = parser.parse_args()
    results = measure(args.checkpoint)
    stats = results["survey"]
    print("1. encoder heads: fraction of positions whose strongest weight is on the "
          "previous / the next token")
    for name, entry in stats.items():
        if name.startswith("encoder"):
            for h, (prev, nxt) in enumerate(zip(entry["previous"], entry["next"], strict=True)):
                print(f"   {name}, head {h}: previous {prev:.2f}, next {nxt:.2f}")
    translation, rows = results["sentence"]
    print(f"2. {SENTENCE}\n   -> {translation}")
    for piece, reads in rows:
        print(f"   {piece:>10} <- " + "; ".join(
            f"{name}: " + ", ".join(f"{s} {w}" for s, w in top) for name, top in reads))
    print("2b. clause-final verbs of validation references (teacher-forced)")
    for source, target, verb, found in results["verbs"]:
        piece, top3 = found[0]
        print(f"   {source}\n   {target}\n   {verb} ({piece}) <- " + "; ".join(
            f"{name}: " + ", ".join(f"{s} {w}" for s, w in top) for name, top in top3))
    print("3. mean entropy of each head (nats), and of uniform weights over the same keys")
    for name, entry in stats.items():
        print(f"   {name:<15} " + "  ".join(f"{e:.2f}" for e in entry["entropy"])
              + f"   (uniform {entry['uniform']:.2f})")


if __name__ == "__main__":
    main()
