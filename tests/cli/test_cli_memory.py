"""The commands under a memory limit (MINITRANSFORMER_MEMORY_LIMIT): translate and evaluate
decode in smaller batches and say so, or refuse with status 2 in one sentence with the numbers
and the option to change; train refuses before it builds the model, naming the --max-tokens
that fits, and trains with it; a beam wider than the vocabulary is refused by all three.

The limits are set, derived from the estimates, never read from this machine."""

import os
import re
import subprocess
import sys

import pytest

from minitransformer import cli, manual_seed
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation import memory
from minitransformer.translation.checkpoint import save_checkpoint

LIMIT = memory.ENVIRONMENT_VARIABLE
WORDS = ["ka", "lo", "mi", "nu", "pe", "ro", "si", "tu"]
SENTENCES = [" ".join(WORDS[(i * 3 + j) % 8] for j in range(2 + i % 5)) for i in range(24)]


@pytest.fixture(autouse=True)
def no_limit(monkeypatch):
    monkeypatch.delenv(LIMIT, raising=False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """An untrained translator of a made-up language with its tokenizer: its hypotheses run
    to their length limit, the longest search there is."""
    root = tmp_path_factory.mktemp("memory")
    tokenizer = Tokenizer.train(SENTENCES + [s.upper() for s in SENTENCES], vocab_size=40)
    manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16,
                                                d_ff=32))
    (root / "in.txt").write_text("".join(s + "\n" for s in SENTENCES))
    (root / "ref.txt").write_text("".join(s.upper() + "\n" for s in SENTENCES))
    return save_checkpoint(root / "model.npz", model, None, tokenizer.to_bytes())


def run(capsys, *args):
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def one_sentence(err):
    """The stderr of a refusal: one line, one sentence, naming the command."""
    assert err.count("\n") == 1 and err.startswith("minitransformer ")
    assert not re.search(r"\.\s+[A-Z]", err)
    return err


def longest_need(checkpoint, beam, batch):
    from minitransformer.translation.translator import load_translator

    model, tokenizer = load_translator(checkpoint)
    S = max(len(tokenizer.encode(s)) for s in SENTENCES)
    return memory.decoding_bytes(model.config, batch, S, S + 50, beam)


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_beam_wider_than_the_vocabulary_is_refused(capsys, checkpoint, command):
    files = (["--input", str(checkpoint.parent / "in.txt")] if command == "translate" else
             ["--src", str(checkpoint.parent / "in.txt"), "--ref",
              str(checkpoint.parent / "ref.txt")])
    output = checkpoint.parent / f"{command}.out"
    status, out, err = run(capsys, command, "--checkpoint", str(checkpoint), "--beam",
                           "100000", "--output", str(output), *files)
    assert status == 2 and out == ""
    assert one_sentence(err) == (
        f"minitransformer {command}: a beam of 100000 is wider than the model's target "
        "vocabulary of 40 pieces, more places than its first step can fill; give a beam of "
        "at most 40 (--beam).\n")
    assert not output.exists()


def test_translate_decodes_smaller_batches_under_a_limit_and_says_so(capsys, monkeypatch,
                                                                    checkpoint):
    args = ["translate", "--checkpoint", str(checkpoint), "--input",
            str(checkpoint.parent / "in.txt"), "--beam", "3", "--batch-size", "24"]
    status, unlimited, err = run(capsys, *args)
    assert status == 0 and err == ""
    need = lambda b: longest_need(checkpoint, 3, b)  # noqa: E731
    fitting = next(b for b in range(4, 24) if need(b) < need(b + 1))
    monkeypatch.setenv(LIMIT, str(need(fitting)))
    status, limited, err = run(capsys, *args)
    assert status == 0 and limited == unlimited
    assert re.fullmatch(rf"warning: decoding 24 sentences at a time with beam 3 would need "
                        rf"about .+ of memory, more than the .+ available \({LIMIT}=\d+\), so "
                        rf"they are decoded {fitting} at a time \(--batch-size sets it\)\.\n",
                        err)


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_sentence_that_does_not_fit_alone_is_refused_with_status_2(capsys, monkeypatch,
                                                                     checkpoint, command):
    monkeypatch.setenv(LIMIT, "64K")
    files = (["--input", str(checkpoint.parent / "in.txt")] if command == "translate" else
             ["--src", str(checkpoint.parent / "in.txt"), "--ref",
              str(checkpoint.parent / "ref.txt")])
    output = checkpoint.parent / f"refused.{command}"
    status, out, err = run(capsys, command, "--checkpoint", str(checkpoint), "--beam", "4",
                           "--output", str(output), *files)
    assert status == 2 and out == ""
    assert re.fullmatch(rf"minitransformer {command}: decoding a sentence of \d+ tokens with "
                        rf"beam 4 needs about .+ of memory, more than the 64 KiB available "
                        rf"\({LIMIT}=64K\); raise {LIMIT}, or free some memory\.\n",
                        one_sentence(err))
    assert not output.exists()


def test_standard_input_read_as_it_comes_is_refused_the_same(checkpoint):
    env = {**os.environ, LIMIT: "64K", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "minitransformer", "translate",
                           "--checkpoint", str(checkpoint)], input=b"ka lo mi\n",
                          capture_output=True, env=env, timeout=120)
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode().startswith("minitransformer translate: decoding a sentence of ")


def test_a_limit_that_is_no_size_is_refused(capsys, monkeypatch, checkpoint):
    monkeypatch.setenv(LIMIT, "lots")
    status, out, err = run(capsys, "translate", "--checkpoint", str(checkpoint), "ka lo")
    assert status == 2 and out == ""
    assert one_sentence(err) == (f"minitransformer translate: {LIMIT} must be a number of "
                                 "bytes, optionally with a suffix K, M, G or T (e.g. 200M or "
                                 "1.5G), got 'lots'.\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for split, sentences in (("train", SENTENCES * 10), ("valid", SENTENCES[:4]),
                             ("test", SENTENCES[4:8])):
        (root / f"{split}.xx").write_text("".join(s + "\n" for s in sentences))
        (root / f"{split}.yy").write_text("".join(s.upper() + "\n" for s in sentences))
    return root


def train_args(corpus, out, *more):
    return ["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy", "--out",
            str(out), "--config", "tiny", "--vocab-size", "40", "--max-steps", "2",
            "--eval-every", "2", "--bleu-sentences", "4", "--keep-last", "1", "--beam", "2",
            "--warmup", "2", "--no-progress", *more]


def run_need(corpus, max_tokens):
    """The memory train's check finds for the run of ``train_args`` with ``max_tokens``."""
    from minitransformer.translation.corpus import load_corpus, prepare_corpus
    from minitransformer.translation.training import TrainConfig, training_memory

    prepared = prepare_corpus(load_corpus(str(corpus), "xx", "yy"), 40, 100)
    tokenizer = prepared.tokenizer
    config = TransformerConfig.named("tiny", tokenizer.vocab_size)
    longest = max(len(tokenizer.encode(s)) for s in SENTENCES[4:8])
    settings = TrainConfig(max_tokens=max_tokens, max_steps=2, bleu_sentences=4)
    return training_memory(config, settings, prepared.data, len(tokenizer.to_bytes()), "cpu",
                           2, longest)[0]


def test_train_refuses_before_building_the_model_and_trains_with_the_max_tokens_it_names(
        capsys, monkeypatch, corpus, tmp_path):
    monkeypatch.setenv(LIMIT, str(run_need(corpus, 100)))
    assert run_need(corpus, 20000) > run_need(corpus, 100)
    status, out, err = run(capsys, *train_args(corpus, tmp_path / "run", "--max-tokens",
                                               "20000"))
    assert status == 2 and out == ""
    found = re.fullmatch(r"minitransformer train: training a model of [\d,]+ parameters on "
                         r"batches of 20,000 tokens needs about .+ of memory, more than the .+ "
                         rf"available \({LIMIT}=\d+\); give --max-tokens (\d+) \(with "
                         r"--accumulate (\d+) for about as many tokens a step\), or a smaller "
                         r"--config\.\n", one_sentence(err))
    assert found, err
    assert 100 <= int(found[1]) < 20000 and int(found[2]) == -(-20000 // int(found[1]))
    assert not (tmp_path / "run").exists()  # refused before the run folder was made
    status, out, err = run(capsys, *train_args(corpus, tmp_path / "run", "--max-tokens",
                                               found[1], "--accumulate", found[2]))
    assert status == 0, err
    assert (tmp_path / "run" / "results.json").is_file()


def test_train_refuses_a_beam_wider_than_the_vocabulary_before_training(capsys, corpus,
                                                                       tmp_path):
    status, out, err = run(capsys, *train_args(corpus, tmp_path / "run", "--beam", "41"))
    assert status == 2 and out == ""
    assert one_sentence(err) == (
        "minitransformer train: a beam of 41 is wider than the model's target vocabulary of "
        "40 pieces, more places than its first step can fill; give a beam of at most 40 "
        "(--beam).\n")
    assert not (tmp_path / "run").exists()
