"""Chapter 16's exercises, measured: label smoothing off, bigger batches for fewer steps, and
an interrupted run resumed.

Runs 1-4 train chapter 16's translator (the built-in English-Velish task, a joint BPE of
1,000 pieces, the tiny model, the paper's schedule with 400 warmup steps, seed 0) and report
the validation loss (label-smoothed, as trained), perplexity (unsmoothed) and greedy BLEU on
200 validation sentences, as the chapter prints them:

    1. the chapter's run: label smoothing 0.1, batches of 4,000 tokens, 500 steps
    2. label smoothing 0.0
    3. batches of 8,000 tokens, 250 steps (the same tokens seen)
    4. as 3, with the warmup halved to 200 steps

Run 5 trains with `minitransformer train` for 60 steps (checkpoints every 20), interrupts a
second such run with Ctrl-C (SIGINT) once it has logged step 30, resumes it with --resume,
and compares the two logs' losses step by step.

    python lessons/answers/measure_translator.py      # about 6 minutes on 2 cores
    python lessons/answers/measure_translator.py --resume-only      # run 5 alone
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import minitransformer as mt
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.corpus import load_corpus, prepare
from minitransformer.translation.training import TrainConfig, Trainer

RUNS = {
    "1. smoothing 0.1, 4,000 tokens, 500 steps": dict(),
    "2. smoothing 0.0": dict(label_smoothing=0.0),
    "3. 8,000 tokens, 250 steps": dict(max_tokens=8000, max_steps=250),
    "4. 8,000 tokens, 250 steps, warmup 200": dict(max_tokens=8000, max_steps=250,
                                                   warmup_steps=200),
}


def train(folder: Path, **changes) -> dict:
    """Chapter 16's training with ``changes`` to its TrainConfig; the trainer's summary."""
    corpus = load_corpus("builtin")
    tokenizer, data, _ = prepare(corpus, vocab_size=1000, max_len=100)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size))
    settings = dict(max_steps=500, warmup_steps=400, eval_every=250, bleu_sentences=200,
                    progress=False)
    config = TrainConfig(**{**settings, **changes})
    config.eval_every = config.max_steps // 2
    return Trainer(model, tokenizer, data, config, folder).fit()


def losses(log: Path) -> dict[int, float]:
    steps = {}
    for line in log.read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            steps[record["step"]] = record["loss"]
    return steps


def interrupted_and_resumed(folder: Path) -> dict[str, float]:
    """Two runs of `minitransformer train`, one interrupted at step 30 and resumed."""
    command = [sys.executable, "-m", "minitransformer", "train", "--max-steps", "60",
               "--eval-every", "20", "--no-progress", "--bleu-sentences", "20"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*command, "--out", str(folder / "whole")], env=env, check=True,
                   capture_output=True)
    log = folder / "cut" / "log.jsonl"
    # Ctrl-C's signal as a terminal sends it; a process started in the background inherits
    # SIGINT ignored, so the child is given the default (Python's KeyboardInterrupt) back
    process = subprocess.Popen([*command, "--out", str(folder / "cut")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not (log.is_file() and len(losses_or_empty(log)) >= 30):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    message = process.communicate()[1].strip().splitlines()[-1]
    logged_when_cut = max(losses_or_empty(log))
    subprocess.run([*command, "--out", str(folder / "cut"), "--resume"], env=env, check=True,
                   capture_output=True)
    whole, cut = losses(folder / "whole" / "log.jsonl"), losses(log)
    return {"interrupted at step": logged_when_cut, "message": message,
            "steps logged": len(cut), "steps in both logs": len(set(whole) & set(cut)),
            "largest loss difference": max(abs(whole[s] - cut[s]) for s in whole)}


def losses_or_empty(log: Path) -> dict[int, float]:
    try:
        return losses(log)
    except (ValueError, KeyError):  # a line being written
        return {}


def main() -> None:
    mt.set_num_threads(1)  # tiny model: one thread is fast enough, and fair to a shared machine
    only_resume = sys.argv[1:] == ["--resume-only"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, changes) in enumerate({} if only_resume else RUNS.items()):
            summary = train(Path(tmp) / f"run{i}", **changes)
            print(f"{name}: valid loss {summary['valid_loss']:.3f}, perplexity "
                  f"{summary['valid_ppl']:.2f}, BLEU {summary['valid_bleu']:.1f}", flush=True)
        for key, value in interrupted_and_resumed(Path(tmp)).items():
            print(f"5. {key}: {value}", flush=True)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
