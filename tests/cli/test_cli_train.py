"""`minitransformer train`, `translate`, `evaluate` and `data` from the command line."""

import io
import json
import random
import re

import pytest

from minitransformer import blas, cli
from minitransformer.functional import _blocks
from minitransformer.translation.checkpoint import load_checkpoint

TRAIN_ARGS = ["--config", "tiny", "--vocab-size", "40", "--max-steps", "4", "--eval-every",
              "2", "--bleu-sentences", "4", "--max-tokens", "200", "--warmup", "10",
              "--keep-last", "2", "--beam", "2", "--no-progress"]


def write_corpus(folder):
    """A small folder corpus: xx sentences and their reversal in upper case as yy."""
    rng = random.Random(0)
    words = ["ka", "lo", "mi", "nu", "pe", "ro", "si", "tu"]
    folder.mkdir()
    for split, n in (("train", 80), ("valid", 6), ("test", 5)):
        sentences = [[rng.choice(words) for _ in range(rng.randint(2, 5))] for _ in range(n)]
        (folder / f"{split}.xx").write_text("".join(" ".join(s) + "\n" for s in sentences))
        (folder / f"{split}.yy").write_text(
            "".join(" ".join(reversed(s)).upper() + "\n" for s in sentences))
    return folder


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    corpus = write_corpus(root / "corpus")
    run = root / "run"
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(run), *TRAIN_ARGS])
    assert status == 0
    return corpus, run


def test_train_writes_a_complete_run_folder_and_scores_the_test_set(trained_run):
    _, run = trained_run
    for name in ("run.json", "tokenizer.model", "log.jsonl", "results.json",
                 "test.greedy.txt", "test.beam2.txt", "checkpoints/last.npz",
                 "checkpoints/best.npz", "checkpoints/averaged.npz", "checkpoints/final.npz"):
        assert (run / name).is_file(), name
    results = json.loads((run / "results.json").read_text())
    assert {"greedy", "beam2"} <= results.keys()
    assert "tok:13a" in results["beam2"]["bleu_signature"]
    assert len((run / "test.beam2.txt").read_text().splitlines()) == 5


def test_resume_continues_from_the_last_checkpoint(trained_run, capsys):
    corpus, run = trained_run
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(run), "--resume", *TRAIN_ARGS[:4], "--max-steps", "6",
                       *TRAIN_ARGS[6:]])
    assert status == 0
    assert "resumed at step 4" in capsys.readouterr().out
    steps = [json.loads(line).get("step") for line in (run / "log.jsonl").read_text().splitlines()]
    assert 5 in steps and 6 in steps


def test_translate_from_arguments_a_file_and_stdin(trained_run, capsys, monkeypatch, tmp_path):
    _, run = trained_run
    checkpoint = str(run / "checkpoints" / "averaged.npz")
    assert cli.main(["translate", "--checkpoint", checkpoint, "ka lo mi", "nu pe"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2

    source = tmp_path / "in.txt"
    source.write_text("ka lo\n\nmi ✈ nu\n")  # an empty line and a character never seen
    assert cli.main(["translate", "--checkpoint", checkpoint, "--input", str(source),
                     "--beam", "1"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""

    monkeypatch.setattr("sys.stdin", io.StringIO("ka lo\nsi tu\n"))
    assert cli.main(["translate", "--checkpoint", checkpoint]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_an_output_that_may_not_be_written_is_refused_before_translating(
        trained_run, capsys, monkeypatch, tmp_path, command):
    corpus, run = trained_run
    def read_only(target):  # as a read-only folder (root may write anywhere)
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("minitransformer.cli.outputs.temporary_beside", read_only)
    checkpoint = str(run / "checkpoints" / "averaged.npz")
    inputs = (["ka lo"] if command == "translate"
              else ["--src", str(corpus / "test.xx"), "--ref", str(corpus / "test.yy")])
    assert cli.main([command, "--checkpoint", checkpoint, *inputs,
                     "--output", str(tmp_path / "out.txt")]) == 2
    assert "cannot be written there (Permission denied); write elsewhere" in \
        capsys.readouterr().err


def test_translations_do_not_depend_on_the_batch_size(trained_run, monkeypatch):
    from minitransformer.translation.translator import (
        default_batch_size,
        load_translator,
        translate,
    )

    corpus, run = trained_run
    model, tokenizer = load_translator(run / "checkpoints" / "averaged.npz")
    model.to(dtype="float64")  # no last-bit differences between products of other row counts
    sentences = (corpus / "test.xx").read_text().splitlines() * 4          # 20 sentences
    for threads, size in ((1, 128), (2, 256), (8, 256)):  # 128 a thread, at most 256
        monkeypatch.setattr(_blocks, "WORKERS", threads)
        assert default_batch_size(model) == size
    for beam in (1, 3):
        every = [translate(model, tokenizer, sentences, beam, batch_size=size)
                 for size in (1, 7, None)]
        assert every[0] == every[1] == every[2]
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        translate(model, tokenizer, sentences, batch_size=0)


def test_evaluate_prints_bleu_and_chrf_with_signatures(trained_run, capsys):
    corpus, run = trained_run
    checkpoint = str(run / "checkpoints" / "best.npz")
    assert cli.main(["evaluate", "--checkpoint", checkpoint, "--src", str(corpus / "test.xx"),
                     "--ref", str(corpus / "test.yy"), "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("BLEU = ") and "nrefs:1|case:mixed" in out and "chrF = " in out
    assert cli.main(["evaluate", "--checkpoint", checkpoint, "--data", str(corpus),
                     "--src-lang", "xx", "--tgt-lang", "yy", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert 0 <= scores["bleu"] <= 100 and scores["beam"] == 4


def test_evaluate_reads_only_the_split_it_scores(trained_run, tmp_path, capsys):
    corpus, run = trained_run
    only_test = tmp_path / "only-test"
    only_test.mkdir()
    for lang in ("xx", "yy"):  # no train or valid files; the direction comes from these
        (only_test / f"test.{lang}").write_bytes((corpus / f"test.{lang}").read_bytes())
    assert cli.main(["evaluate", "--checkpoint", str(run / "checkpoints" / "best.npz"),
                     "--data", str(only_test), "--src-lang", "xx", "--beam", "1",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 5


@pytest.mark.parametrize("options, message", [
    (["--data", "builtin", "--src", "s.txt", "--ref", "r.txt"],
     "give either --src and --ref or --data, not both (got --data builtin together with "
     "--src s.txt and --ref r.txt)"),
    (["--data", "corpus", "--ref", "r.txt"], "not both (got --data corpus together with "
                                             "--ref r.txt)"),
    (["--src", "s.txt", "--ref", "r.txt", "--split", "valid"],
     "--split chooses what to read from --data, which was not given"),
    (["--src", "s.txt", "--ref", "r.txt", "--src-lang", "de", "--tgt-lang", "en"],
     "--src-lang and --tgt-lang choose what to read from --data, which was not given"),
])
def test_evaluate_refuses_options_it_would_ignore(options, message, tmp_path, capsys):
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "x.npz"), *options]) == 2
    assert message in capsys.readouterr().err


def test_checkpoints_record_the_direction_and_evaluate_reads_it(trained_run, capsys):
    """A folder with xx and yy files and no languages given: evaluate scores xx -> yy, the
    direction the checkpoint was trained on (a reversed direction would score garbage)."""
    corpus, run = trained_run
    checkpoint = run / "checkpoints" / "best.npz"
    assert load_checkpoint(checkpoint).state["languages"] == ["xx", "yy"]
    assert load_checkpoint(run / "checkpoints" / "averaged.npz").state["languages"] == \
        ["xx", "yy"]
    # two languages beside each other and none given: only the checkpoint tells the direction
    assert cli.main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(corpus),
                     "--beam", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 5
    for options, message in (
            (["--data", str(corpus), "--src-lang", "yy"],
             "--src-lang yy does not fit"),
            (["--data", str(corpus), "--tgt-lang", "xx"],
             "which was trained to translate xx to yy"),
            (["--data", "builtin"],
             "translates xx to yy, but the built-in task is en to vel")):
        assert cli.main(["evaluate", "--checkpoint", str(checkpoint), *options]) == 2
        assert message in capsys.readouterr().err


def test_the_builtin_task_takes_only_its_own_languages(tmp_path, capsys):
    status = cli.main(["train", "--data", "builtin", "--tgt-lang", "de", "--out",
                       str(tmp_path / "run"), *TRAIN_ARGS])
    assert status == 2
    assert "--tgt-lang de does not fit the built-in task" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("stopping, max_epochs", [([], 10), (["--time-budget", "0.005"], None)])
def test_a_folder_trains_with_the_multi30k_recipe_and_the_commands_own_stopping_rule(
        tmp_path, stopping, max_epochs):
    """Folders default to the recipe of the Multi30k benchmark (warmup 800, factor 0.7,
    validation every epoch); the 10-epoch default stops a run only when the command gives no
    rule of its own, so `--time-budget 45` trains for 45 minutes, as the benchmark."""
    corpus = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    assert cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                     "--config", "tiny", "--vocab-size", "40", "--max-tokens", "60",
                     "--bleu-sentences", "0", "--beam", "1", "--no-progress", "--out", str(run),
                     *stopping]) == 0
    settings = json.loads((run / "run.json").read_text())["train"]
    from minitransformer.data.batching import TokenBatcher
    from minitransformer.translation.corpus import load_corpus, prepare

    _, data, _ = prepare(load_corpus(str(corpus), "xx", "yy"), 40, 100)
    assert settings["warmup_steps"] == 800 and settings["lr_scale"] == 0.7
    assert settings["eval_every"] == len(TokenBatcher(data.train, 60)) > 1
    assert settings["max_epochs"] == max_epochs and settings["max_steps"] is None
    assert settings["time_budget"] == (None if max_epochs else 0.3)


def test_a_second_run_into_a_run_folder_is_refused_without_resume(trained_run, capsys):
    corpus, run = trained_run
    before = {p.name: p.stat().st_mtime_ns for p in (run / "checkpoints").iterdir()}
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(run), *TRAIN_ARGS])
    assert status == 2
    assert "already holds a run" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (run / "checkpoints").iterdir()} == before


def test_a_refused_resume_leaves_the_run_as_it_was(trained_run, capsys):
    corpus, run = trained_run
    settings = (run / "run.json").read_text()
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(run), "--resume", "--pre-norm", *TRAIN_ARGS])
    assert status == 2
    assert "model configuration differs" in capsys.readouterr().err
    assert (run / "run.json").read_text() == settings


def test_a_blank_validation_file_is_refused_before_training(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    for lang in ("xx", "yy"):
        (corpus / f"valid.{lang}").write_text("\n\n\n")
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(tmp_path / "run"), *TRAIN_ARGS])
    assert status == 2
    assert "there are no validation pairs" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_validation_pair_the_model_cannot_encode_is_dropped_and_counted(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    for lang in ("xx", "yy"):  # 1,100 words: more tokens than the positional table's 1,024
        with open(corpus / f"valid.{lang}", "a") as file:
            file.write(" ".join(["ka lo"] * 550) + "\n")
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(tmp_path / "run"), *TRAIN_ARGS])
    assert status == 0
    assert "6 validation (1 longer than the model's 1023 tokens dropped)" in (
        capsys.readouterr().out)


def test_pairs_with_an_empty_side_are_not_counted_as_too_long(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    for split in ("train", "valid"):
        with open(corpus / f"{split}.xx", "a") as file:
            file.write("\n")  # an empty source
        with open(corpus / f"{split}.yy", "a") as file:
            file.write("KA LO\n")
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(tmp_path / "run"), *TRAIN_ARGS])
    assert status == 0
    out = capsys.readouterr().out
    assert "80 training pairs (0 longer than 100 tokens and 1 with an empty side dropped)" in out
    assert "6 validation (1 with an empty side dropped)" in out


@pytest.mark.parametrize("threads", [1, 3])
def test_the_first_line_says_the_device_and_the_threads(tmp_path, capsys, monkeypatch, threads):
    monkeypatch.setattr(_blocks, "WORKERS", threads)  # as set_num_threads(threads), BLAS aside
    status = cli.main(["train", "--data", str(write_corpus(tmp_path / "corpus")), "--src-lang",
                       "xx", "--tgt-lang", "yy", "--out", str(tmp_path / "run"), *TRAIN_ARGS])
    assert status == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert f"parameters; cpu, {threads} thread{'s' if threads > 1 else ''}; run folder" in first


def test_a_max_len_beyond_the_positional_table_is_refused_before_reading_data(tmp_path, capsys):
    status = cli.main(["train", "--data", str(tmp_path / "no-such-corpus"), "--max-len", "2000",
                       "--out", str(tmp_path / "run"), *TRAIN_ARGS])
    assert status == 2
    err = capsys.readouterr().err
    assert "--max-len 2000 is more than the model can encode" in err
    assert "1024 positions" in err and "--max-len 1023 or less" in err
    assert not (tmp_path / "run").exists()


def test_text_that_was_not_utf8_is_left_untranslated_naming_the_line(trained_run, capsys,
                                                                      monkeypatch):
    _, run = trained_run
    # what Python makes of the byte 0xE9 read with surrogateescape: a lone surrogate
    monkeypatch.setattr("sys.stdin", io.StringIO("ka lo\ncaf\udce9\n"))
    assert cli.main(["translate", "--checkpoint", str(run / "checkpoints" / "final.npz")]) == 1
    out, err = capsys.readouterr()
    assert "line 2 of standard input is not valid UTF-8" in err
    assert len(out.splitlines()) == 2 and out.splitlines()[1] == ""


def test_an_output_that_cannot_be_written_is_refused_before_translating(trained_run, capsys,
                                                                         tmp_path):
    _, run = trained_run
    checkpoint = str(run / "checkpoints" / "final.npz")
    missing = tmp_path / "no-such-folder" / "out.txt"
    assert cli.main(["translate", "--checkpoint", checkpoint, "--output", str(missing),
                     "ka lo"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["translate", "--checkpoint", checkpoint, "--output", str(tmp_path),
                     "ka lo"]) == 2
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["translate", "--checkpoint", "c.npz", "--batch-size", "0", "ka"],
     "argument --batch-size: must be a whole number of at least 1"),
    (["train", "--lr-scale", "-1"], "argument --lr-scale: must be greater than 0"),
    (["train", "--clip-norm", "0"], "argument --clip-norm: must be greater than 0"),
    (["train", "--dropout", "1.5"], "argument --dropout: must satisfy 0 <= value < 1"),
    (["train", "--max-steps", "0"], "argument --max-steps: must be a whole number of at least 1"),
    (["train", "--time-budget", "nan"], "argument --time-budget: must be a finite number"),
    (["train", "--vocab-size", "3"], "argument --vocab-size: must be a whole number from 6 "
                                     "(the 4 special pieces, the word boundary and one "
                                     "character) to 1,000,000, got 3"),
    (["translate", "--checkpoint", "x.npz", "--beam", "0", "hi"],
     "argument --beam: must be a whole number of at least 1, got 0"),
    # nan once gave empty translations (and BLEU 0) with exit status 0
    (["translate", "--checkpoint", "x.npz", "--length-penalty", "nan", "hi"],
     "argument --length-penalty: must be a finite number, got 'nan'"),
    (["evaluate", "--checkpoint", "x.npz", "--length-penalty", "inf"],
     "argument --length-penalty: must be a finite number, got 'inf'"),
    # a negative seed once stopped gradcheck and check-exercise with NumPy's traceback
    (["gradcheck", "--seed", "-1"], "argument --seed: must be a whole number of at least 0"),
    (["check-exercise", "softmax", "--seed", "-1"],
     "argument --seed: must be a whole number of at least 0"),
    (["train", "--seed", "-1"], "argument --seed: must be a whole number of at least 0"),
])
def test_impossible_numbers_stop_the_command_while_parsing(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_translate_refuses_sentences_and_an_input_file_together(tmp_path, capsys):
    """The sentences were translated and --input was ignored without a word."""
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "x.npz"), "--input",
                     str(tmp_path / "in.txt"), "ka lo"]) == 2
    assert (f"give sentences as arguments or --input, not both (got --input "
            f"{tmp_path / 'in.txt'} together with 1 sentence)") in capsys.readouterr().err


def test_bad_input_is_explained(tmp_path, capsys):
    assert cli.main(["train", "--data", str(tmp_path / "missing"), "--no-progress"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    (tmp_path / "bad.npz").write_bytes(b"not a checkpoint")
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "bad.npz"), "hello"]) == 2
    assert "is not a minitransformer checkpoint" in capsys.readouterr().err
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "bad.npz")]) == 2
    assert "give --src and --ref, or --data" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    assert cli.main(["train", "--out", str(tmp_path / "a_file"), "--no-progress"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert cli.main(["data", "builtin", "--dest", str(tmp_path / "a_file")]) == 2
    assert "cannot write into --dest" in capsys.readouterr().err


def test_data_builtin_writes_a_corpus_that_train_reads(tmp_path, capsys):
    assert cli.main(["data", "builtin", "--dest", str(tmp_path / "builtin")]) == 0
    names = sorted(p.name for p in (tmp_path / "builtin").iterdir())
    assert names == ["test.en", "test.vel", "train.en", "train.vel", "valid.en", "valid.vel"]


@pytest.mark.parametrize("command", [["train"], ["evaluate", "--checkpoint", "c.npz"]])
@pytest.mark.parametrize("code", ["a" * 5000, "../de", "de en", "", "-x"])
def test_a_language_that_is_no_code_stops_the_command_while_parsing(command, code, capsys):
    """--src-lang of 5,000 letters (found by the fuzzer) made a file name the system refused:
    OSError's traceback."""
    with pytest.raises(SystemExit) as stop:
        cli.main([*command, f"--src-lang={code}"])
    assert stop.value.code == 2
    assert "argument --src-lang: must be a language code of letters, digits, - and _" in (
        capsys.readouterr().err)


def test_cuda_graphs_on_the_cpu_are_refused_in_one_sentence(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(tmp_path / "run"), "--device", "cpu", "--cuda-graphs",
                       *TRAIN_ARGS])
    assert status == 2
    message = capsys.readouterr().err.strip()
    assert message == ("minitransformer train: CUDA graphs need a GPU (device 'cuda'), not "
                       "'cpu'; leave them out (--cuda-graphs) on the CPU.")


def test_shape_multiple_trains_on_batches_of_fixed_shapes(tmp_path, capsys):
    """`--shape-multiple 4`: recorded in run.json, one batch shape per width, and the epoch
    counted in those batches (the validation interval is one epoch)."""
    corpus = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    assert cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                     "--config", "tiny", "--vocab-size", "40", "--max-tokens", "60",
                     "--shape-multiple", "4", "--max-steps", "3", "--bleu-sentences", "0",
                     "--beam", "1", "--no-progress", "--out", str(run)]) == 0
    settings = json.loads((run / "run.json").read_text())["train"]
    from minitransformer.data.batching import TokenBatcher
    from minitransformer.translation.corpus import load_corpus, prepare

    _, data, _ = prepare(load_corpus(str(corpus), "xx", "yy"), 40, 100)
    fixed = TokenBatcher(data.train, 60, shape_multiple=4)
    assert settings["shape_multiple"] == 4
    assert settings["eval_every"] == len(fixed) != len(TokenBatcher(data.train, 60))
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        cli.main(["train", "--shape-multiple", "-1", "--out", str(tmp_path / "x")])
    assert refused.value.code == 2
    assert "argument --shape-multiple: must be a whole number of at least 0" in \
        capsys.readouterr().err


def test_train_notes_kernels_held_back_with_its_setup(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setattr(blas, "openblas_kernels", lambda: "Haswell")
    monkeypatch.setattr(blas, "processor_flags", lambda: {"avx2", "avx512f"})
    corpus = write_corpus(tmp_path / "corpus")
    args = [*TRAIN_ARGS]
    args[args.index("--max-steps") + 1] = "1"
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(tmp_path / "run"), *args])
    assert status == 0
    out, err = capsys.readouterr()
    assert ("\nnote: OPENBLAS_CORETYPE=Haswell in the environment holds NumPy's matrix "
            "products to OpenBLAS's Haswell kernels") in out
    assert "OPENBLAS_CORETYPE" not in err  # stderr stays for what went wrong


def test_keep_best_keeps_and_averages_the_best_checkpoints_too(tmp_path):
    """--keep-best N: the run's settings record it, the checkpoints of lowest validation loss
    stay and are averaged into averaged-best.npz, and the final model is one of the three."""
    corpus = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    args = list(TRAIN_ARGS)
    args[args.index("--max-steps") + 1], args[args.index("--keep-last") + 1] = "6", "1"
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(run), *args, "--keep-best", "2"])
    assert status == 0
    assert json.loads((run / "run.json").read_text())["train"]["keep_best"] == 2
    averaged_best = load_checkpoint(run / "checkpoints" / "averaged-best.npz")
    assert len(averaged_best.state["averaged_from"]) == 2
    kept = sorted(p.name for p in (run / "checkpoints").glob("step-*.npz"))
    assert len(kept) in (2, 3) and "step-0000006.npz" in kept  # the two best and the last
    final = (run / "checkpoints" / "final.npz").read_bytes()  # a hard link or a copy
    assert final in {(run / "checkpoints" / name).read_bytes()
                     for name in ("averaged.npz", "averaged-best.npz", "best.npz")}


def test_select_by_bleu_is_recorded_and_picks_the_final_model_by_validation_bleu(tmp_path, capsys):
    """--select-by bleu: the run's settings record it, the averages are validated for their
    BLEU (printed beside each loss) and best.npz holds the validation of highest BLEU."""
    corpus = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    status = cli.main(["train", "--data", str(corpus), "--src-lang", "xx", "--tgt-lang", "yy",
                       "--out", str(run), *TRAIN_ARGS, "--keep-best", "1",
                       "--select-by", "bleu"])
    assert status == 0
    assert json.loads((run / "run.json").read_text())["train"]["select_by"] == "bleu"
    out = capsys.readouterr().out
    line = re.search(r"averaged \(2 checkpoints\): valid loss [\d.]+, BLEU ([\d.]+); "
                     r"averaged-best \(1 checkpoints\): valid loss [\d.]+, BLEU ([\d.]+); the "
                     r"best checkpoint: valid loss [\d.]+, BLEU ([\d.]+); final model: (\S+)", out)
    assert line, out
    bleus = dict(zip(("averaged.npz", "averaged-best.npz", "best.npz"),
                     map(float, line.groups()[:3]), strict=True))
    final = max(bleus, key=bleus.get)                      # the first of the highest
    assert line.group(4) == final
    assert (run / "checkpoints" / "final.npz").read_bytes() == \
        (run / "checkpoints" / final).read_bytes()
    validations = [json.loads(line)["validation"] for line in
                   (run / "log.jsonl").read_text().splitlines() if "validation" in line]
    best = load_checkpoint(run / "checkpoints" / "best.npz").state["trainer"]["step"]
    highest = max(validations, key=lambda v: (v["valid_bleu"], -v["step"]))
    assert best == highest["step"]


def test_select_by_bleu_without_validation_bleu_is_refused_in_one_sentence(tmp_path, capsys):
    status = cli.main(["train", "--max-steps", "2", "--select-by", "bleu", "--bleu-sentences",
                       "0", "--out", str(tmp_path / "run"), "--no-progress"])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "--select-by bleu" in err and "--bleu-sentences 0" in err
    assert err.count("\n") == 0 and not (tmp_path / "run" / "checkpoints").exists()
