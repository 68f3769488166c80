"""`minitransformer plot`: every picture is written, bad input is explained."""

import json

import pytest

import minitransformer as mt
from minitransformer import cli
from minitransformer.checkpoint import save_checkpoint
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    text = ["the dog sees the cat", "der hund sieht die katze", "a cat runs", "eine katze rennt"]
    tokenizer = Tokenizer.train(text * 20, vocab_size=40)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, max_len=64))
    return save_checkpoint(tmp_path_factory.mktemp("plot") / "c.npz", model, None,
                           tokenizer.to_bytes())


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_attention_of_a_sentence(checkpoint, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    assert cli.main(["plot", "attention", "the dog runs", "--checkpoint", str(checkpoint),
                     "--kind", kind, "--out", str(out)]) == 0
    assert out.stat().st_size > 0


def test_a_sentence_longer_than_the_model_takes_is_cut_with_a_warning(checkpoint, tmp_path,
                                                                       capsys):
    out = tmp_path / "long.png"
    assert cli.main(["plot", "attention", "the dog sees the cat " * 30, "--checkpoint",
                     str(checkpoint), "--out", str(out)]) == 0
    assert "were cut to 63, the model's longest input" in capsys.readouterr().err
    assert out.stat().st_size > 0


def test_a_layer_that_does_not_exist_is_explained(checkpoint, capsys):
    assert cli.main(["plot", "attention", "the dog", "--checkpoint", str(checkpoint),
                     "--layer", "7"]) == 2
    assert "--layer 7 does not exist; the model has 2 layers" in capsys.readouterr().err


def test_positions_schedule_curves_and_gradcheck(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"step": 1, "loss": 3.0}) + "\n"
                   + json.dumps({"validation": {"step": 1, "valid_loss": 2.5}}) + "\n")
    for args in (["positions"], ["schedule", "--steps", "500"], ["curves", str(log)],
                 ["gradcheck", "--filter", "tanh"]):
        out = tmp_path / f"{args[0]}.png"
        assert cli.main(["plot", *args, "--out", str(out)]) == 0, args
        assert out.stat().st_size > 0
    assert cli.main(["plot", "curves", str(tmp_path / "missing.jsonl")]) == 2
    assert "no log at" in capsys.readouterr().err
