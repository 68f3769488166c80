"""A small training task shared by test_train.py and the processes it kills."""

import random

import minitransformer as mt
from minitransformer.data.parallel import encode_pairs
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.training import TrainConfig, Trainer, TranslationData


def make_task():
    rng = random.Random(0)
    words = ["ka", "lo", "mi", "nu", "pe", "ro", "si", "tu", "va", "ze"]
    pairs = []
    for _ in range(120):
        sentence = [rng.choice(words) for _ in range(rng.randint(2, 6))]
        pairs.append((" ".join(sentence), " ".join(reversed(sentence)).upper()))
    tokenizer = Tokenizer.train([s for p in pairs for s in p], vocab_size=40)
    train, _ = encode_pairs(pairs[:100], tokenizer, None)
    valid, _ = encode_pairs(pairs[100:], tokenizer, None)
    data = TranslationData(train, valid, [s for s, _ in pairs[100:]],
                           [t for _, t in pairs[100:]])
    return tokenizer, data

def make_trainer(run_dir, seed=0, **settings):
    tokenizer, data = make_task()
    mt.manual_seed(seed)
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    settings = {"max_tokens": 120, "warmup_steps": 10, "eval_every": 2,
                "bleu_sentences": 0, "progress": False, **settings}
    return Trainer(Transformer(config), tokenizer, data, TrainConfig(**settings), run_dir)
