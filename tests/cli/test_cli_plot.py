"""`minitransformer plot`: every picture is written, bad input is explained."""

import json

import pytest

import minitransformer as mt
from minitransformer import cli
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.checkpoint import save_checkpoint


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


def test_the_rows_of_decoder_attention_are_the_tokens_the_model_generated(checkpoint,
                                                                          tmp_path,
                                                                          monkeypatch):
    """The output is drawn as the model produced it (its greedy ids), not as its text would
    be encoded again, which can split the words otherwise."""
    from minitransformer import viz
    from minitransformer.translation.checkpoint import load_checkpoint, restore_model
    from minitransformer.translation.decode import greedy_decode

    drawn = {}
    monkeypatch.setattr(viz, "attention_heads",
                        lambda weights, queries, keys, **kw: drawn.update(queries=queries))
    for sentence in ("the dog runs", "a cat sees the dog", "der hund"):
        assert cli.main(["plot", "attention", sentence, "--checkpoint", str(checkpoint),
                         "--kind", "decoder", "--out", str(tmp_path / "d.png")]) == 0
        ckpt = load_checkpoint(checkpoint)
        tokenizer = Tokenizer.from_bytes(ckpt.tokenizer_bytes)
        generated = greedy_decode(restore_model(ckpt), [tokenizer.encode(sentence)],
                                  tokenizer.bos_id, tokenizer.eos_id)[0][:40]
        assert drawn["queries"] == ["<s>", *(tokenizer.id_to_piece(i) for i in generated)]


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


def test_model_draws_figure_one_of_a_named_configuration(tmp_path, capsys, monkeypatch):
    from matplotlib import pyplot
    from matplotlib.text import Text

    from minitransformer import viz

    made, draw = [], viz.draw_model  # the figure the command drew, closed once written
    monkeypatch.setattr(viz, "draw_model", lambda *a, **kw: made.append(draw(*a, **kw))
                        or made[-1])
    out = tmp_path / "model.png"
    assert cli.main(["plot", "model", "--config", "tiny", "--vocab-size", "50", "--batch", "3",
                     "--src-len", "5", "--tgt-len", "4", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {out}" in capsys.readouterr().out
    assert not pyplot.fignum_exists(made[0].number)
    drawn = [t.get_text() for t in made[0].findobj(Text)]
    assert {"encoder.layers.0.self_attn", "decoder.layers.0.cross_attn", "decoder.layers.1",
            "logits (3, 4, 50)", "mask (3, 1, 4, 4): causal + padding"} <= set(drawn)
    assert cli.main(["plot", "model", "--config", "tiny", "--vocab-size", "50", "--all-layers",
                     "--out", str(tmp_path / "model.svg")]) == 0
    assert "<svg" in (tmp_path / "model.svg").read_text()


def test_model_passes_its_arguments_to_the_library(monkeypatch, tmp_path):
    from minitransformer import viz

    seen = {}
    monkeypatch.setattr(viz, "draw_model", lambda config, **kw: seen.update(config=config, **kw))
    assert cli.main(["plot", "model", "--out", str(tmp_path / "m.png")]) == 0
    assert seen["config"] == TransformerConfig.named("small", 37000)
    assert (seen["batch"], seen["layers_in_full"]) == ((2, 7, 6), 1)
    assert cli.main(["plot", "model", "--config", "base", "--vocab-size", "1000", "--batch", "1",
                     "--src-len", "9", "--tgt-len", "3", "--all-layers"]) == 0
    assert seen["config"] == TransformerConfig.named("base", 1000)
    assert (seen["batch"], seen["layers_in_full"], seen["path"]) == ((1, 9, 3), None,
                                                                     "model.png")


@pytest.mark.parametrize("argv, message", [
    (["--config", "huge"], "unknown configuration 'huge'; choose one of tiny, small, base, big."),
    (["--src-len", "2000"], "a length of 2000 is longer than the model's positional table "
                            "(1024 positions)"),
    (["--batch", "8", "--src-len", "500", "--tgt-len", "100"],
     "a batch of 8 × (500 + 100) = 4,800 tokens is more than the 4,096 a picture's forward "
     "pass takes (its shapes are labels); give a smaller --batch, --src-len or --tgt-len."),
])
def test_a_model_that_cannot_be_drawn_is_explained(argv, message, capsys, tmp_path):
    assert cli.main(["plot", "model", *argv, "--out", str(tmp_path / "m.png")]) == 2
    err = capsys.readouterr().err
    assert f"minitransformer plot model: {message}" in err and "Traceback" not in err
    assert not (tmp_path / "m.png").exists()


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


@pytest.mark.parametrize("text, message", [
    ("step 1 loss 3.0\n", "line 1 is not JSON, so this is not a run's log"),
    ('{"step": 1, "loss": 3.0}\n[1, 2]\n', "line 2 is not a training or validation record"),
    ('{"loss": 3.0}\n', "line 1 is not a training or validation record"),
    ('{"validation": {"step": 1}}\n', "line 1 is not a training or validation record"),
    ("", "holds no training or validation records"),
    ('{"a": 1}\n', "holds no training or validation records"),
])
def test_a_log_that_is_not_a_runs_log_is_explained(text, message, tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text(text)
    assert cli.main(["plot", "curves", str(log), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "c.png").exists()


def test_blank_lines_of_a_log_are_skipped(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n  \n\n{"step": 2, "loss": 1.5}\n')
    assert cli.main(["plot", "curves", str(log), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0


def test_a_log_that_is_not_text_is_explained(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"PK\x03\x04\xff\xfe binary")
    assert cli.main(["plot", "curves", str(log)]) == 2
    assert "is not a text file" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["positions", "--length", "0"], "argument --length: must be a whole number from 1 to "
                                     "10,000, got 0"),
    (["positions", "--d-model", "-3"], "argument --d-model: must be a whole number from 1 to "
                                       "4,096, got -3"),
    (["schedule", "--warmup", "0"], "argument --warmup: must be a whole number of at least 1"),
    (["schedule", "--d-model", "0"], "argument --d-model: must be a whole number of at least 1"),
    (["schedule", "--steps", "-5"], "argument --steps: must be a whole number from 1 to "
                                    "1,000,000, got -5"),
    (["schedule", "--steps", "10000000"], "argument --steps: must be a whole number from 1 to "
                                          "1,000,000, got 10000000"),
    (["positions", "--length", "10001"], "argument --length: must be a whole number from 1 to "
                                         "10,000, got 10001"),
    (["positions", "--d-model", "5000"], "argument --d-model: must be a whole number from 1 "
                                         "to 4,096, got 5000"),
    (["model", "--batch", "151051"], "argument --batch: must be a whole number from 1 to 64, "
                                     "got 151051"),
    (["schedule", "--scale", "0"], "argument --scale: must be greater than 0"),
    (["model", "--batch", "0"], "argument --batch: must be a whole number from 1 to 64"),
    (["model", "--src-len", "0"], "argument --src-len: must be a whole number of at least 1"),
    (["model", "--vocab-size", "3"], "argument --vocab-size: must be a whole number from 6"),
])
def test_sizes_that_cannot_be_drawn_stop_the_command_while_parsing(argv, message, capsys,
                                                                   tmp_path):
    with pytest.raises(SystemExit) as stop:
        cli.main(["plot", *argv, "--out", str(tmp_path / "never.png")])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("picture", [["positions"], ["schedule"], ["gradcheck"],
                                     ["curves", "log.jsonl"], ["model"]])
@pytest.mark.parametrize("out", ["picture.txt", "picture"])
def test_an_out_that_is_not_a_picture_file_stops_the_command_while_parsing(picture, out, capsys,
                                                                           tmp_path):
    """picture.txt failed with matplotlib's traceback after the work was done; with no suffix,
    matplotlib wrote picture.png while the command said it wrote picture."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["plot", *picture, "--out", str(tmp_path / out)])
    assert stop.value.code == 2
    assert ("argument --out: must be a file name ending in .png (or another picture format: "
            in capsys.readouterr().err)
    assert not list(tmp_path.iterdir())


# every picture, with arguments that would be refused later (a missing checkpoint or log, an
# unknown configuration, no gradient check of that name): --out is checked before them
REFUSED_LATER = [["positions"], ["schedule"], ["gradcheck", "--filter", "no such case"],
                 ["curves", "missing.jsonl"], ["model", "--config", "huge"],
                 ["attention", "the dog", "--checkpoint", "missing.npz"]]


def unwritable_outs(tmp_path, picture):
    """(--out, what the command says about it) for outs no picture can be written to."""
    folder, file = tmp_path / "d.png", tmp_path / "file.txt"
    folder.mkdir()
    file.write_text("not a folder")
    return [
        (str(folder), f"--out {folder} is a folder; give a file name for the picture, such as "
                      f"{folder / f'{picture}.png'}."),
        (f"{tmp_path / 'new.png'}/", f"--out {tmp_path / 'new.png'}/ ends in '/', so it names a "
                                     f"folder; give a file name for the picture, such as "
                                     f"{tmp_path / 'new.png'}."),
        (str(file / "x.png"), f"--out {file / 'x.png'} is under {file}, which is a file, not a "
                              "folder; give an --out in a folder."),
        (str(file / "sub" / "x.png"), f"--out {file / 'sub' / 'x.png'} is under {file}, which "
                                      "is a file, not a folder; give an --out in a folder."),
        ("/proc/x.png", "cannot create --out /proc/x.png ("),
        ("/proc/sub/x.png", "cannot create --out /proc/sub/x.png ("),
    ]


@pytest.mark.parametrize("picture", REFUSED_LATER, ids=lambda picture: picture[0])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(picture, tmp_path, capsys,
                                                                  monkeypatch):
    """Each failed with exit status 1 only after the work (a checkpoint loaded, the picture
    drawn, the gradient checks run), in a traceback or a line naming no option; "new.png/"
    wrote new.png/.png."""
    monkeypatch.chdir(tmp_path)
    for out, message in unwritable_outs(tmp_path, picture[0]):
        before = sorted(tmp_path.rglob("*"))
        assert cli.main(["plot", *picture, "--out", out]) == 2, out
        err = capsys.readouterr().err
        assert f"minitransformer plot {picture[0]}: {message}" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert sorted(tmp_path.rglob("*")) == before  # the check leaves nothing behind
        if out.startswith("/proc/"):
            assert err.rstrip().endswith("; give an --out in a folder you can write to.")


def test_the_check_of_out_leaves_nothing_behind_and_keeps_what_was_there(tmp_path, capsys):
    """It creates the file (or its first missing folder) to see that it can, and removes it;
    a picture already there is left as it is until the new one is written."""
    new, old = tmp_path / "new" / "deeper" / "m.png", tmp_path / "old.png"
    old.write_bytes(b"the old picture")
    for out in (new, old):
        assert cli.main(["plot", "model", "--config", "huge", "--out", str(out)]) == 2
        assert "unknown configuration 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    assert old.read_bytes() == b"the old picture"
    for out in (new, old):  # folders that do not exist yet are made, as before
        assert cli.main(["plot", "positions", "--length", "5", "--out", str(out)]) == 0
        assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("picture", [["positions", "--length", "5"],
                                     ["attention", "the dog", "--kind", "cross"],
                                     ["attention", "the dog", "--kind", "encoder"]],
                         ids=lambda picture: "-".join(picture[::2]))
def test_a_write_that_fails_after_the_work_is_one_sentence(picture, checkpoint, tmp_path,
                                                           capsys, monkeypatch):
    """A full disk failed with PIL's traceback, or said "could not write standard output";
    now one sentence naming the picture, exit status 1, no half-written picture, an earlier
    picture as it was, and no figure left open."""
    from matplotlib import pyplot
    from matplotlib.figure import Figure

    def full_disk(figure, path, **kw):
        with open(path, "wb") as half:
            half.write(b"\x89PN")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    extra = ["--checkpoint", str(checkpoint)] if picture[0] == "attention" else []
    out, old = tmp_path / "p.png", tmp_path / "old.png"
    old.write_bytes(b"the old picture")
    open_before = pyplot.get_fignums()
    for target in (out, old):
        assert cli.main(["plot", *picture, *extra, "--out", str(target)]) == 1
        captured = capsys.readouterr()
        assert captured.err == (f"minitransformer plot {picture[0]}: writing {target} failed "
                                "(No space left on device); free some space or give another "
                                "--out.\n")
        assert "wrote" not in captured.out
    assert not out.exists()  # half written by this run: removed
    assert old.read_bytes() == b"the old picture"  # written beside it, never renamed over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.png"]  # no temporary file left
    assert pyplot.get_fignums() == open_before


def test_a_sentence_that_is_not_utf8_is_explained(checkpoint, tmp_path, capsys):
    """`plot attention "$(printf 'ab\\xffcd')"` reached SentencePiece, which failed with a
    RuntimeError traceback: Python keeps such bytes of the command line as lone surrogates."""
    out = tmp_path / "a.png"
    assert cli.main(["plot", "attention", "ab\udcffcd", "--checkpoint", str(checkpoint),
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ("minitransformer plot attention: sentence 1 of the command line is not valid "
                   "UTF-8; convert the text to UTF-8 (e.g. with iconv) and try again.\n")
    assert not out.exists()
