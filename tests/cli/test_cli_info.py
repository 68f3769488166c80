"""`minitransformer info`: the layer table and parameter count of a named configuration."""

import json

import pytest

from minitransformer import cli
from minitransformer.nn import Transformer, TransformerConfig


def test_json_count_matches_the_model_and_rows_add_up(capsys):
    assert cli.main(["info", "--config", "tiny", "--vocab-size", "100", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    model = Transformer(TransformerConfig.named("tiny", 100))
    assert info["num_parameters"] == model.num_parameters()
    assert sum(row["num_parameters"] for row in info["layers"]) == info["num_parameters"]
    assert info["settings"]["d_model"] == 32
    shared = next(row for row in info["layers"] if row["name"] == "tgt_embed")
    assert shared["num_parameters"] == 0 and shared["shared_with"] == ["src_embed"]


def test_table_lists_every_layer_and_the_paper_figure(capsys):
    assert cli.main(["info", "--config", "base"]) == 0
    out = capsys.readouterr().out
    assert "encoder.layers.5" in out and "decoder.layers.5" in out
    assert "63,082,496" in out and "reports 65M" in out


def test_bad_arguments_are_explained(capsys):
    assert cli.main(["info", "--config", "huge"]) == 2
    assert "unknown configuration 'huge'" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["2", "5", "1e10", "10000000000", "1000001"])
def test_impossible_vocabulary_sizes_stop_the_command_while_parsing(size, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["info", "--config", "tiny", "--vocab-size", size])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --vocab-size: must be a whole number" in err and "Traceback" not in err


def test_a_model_too_large_for_memory_is_explained(monkeypatch, capsys):
    def out_of_memory(config):
        raise MemoryError
    monkeypatch.setattr("minitransformer.nn.Transformer", out_of_memory)
    assert cli.main(["info", "--config", "big", "--vocab-size", "1000000"]) == 2
    assert "does not fit in this machine's memory" in capsys.readouterr().err


def test_the_smallest_vocabulary_is_the_smallest_sentencepiece_builds():
    from minitransformer.cli.values import SMALLEST_VOCABULARY
    from minitransformer.data import DataError, Tokenizer
    assert Tokenizer.train(["a"], SMALLEST_VOCABULARY).vocab_size == SMALLEST_VOCABULARY
    with pytest.raises(DataError):
        Tokenizer.train(["a"], SMALLEST_VOCABULARY - 1)
