"""`minitransformer translate` and `evaluate` for the people who use them: n-best lists with
scores, JSON whose log-probabilities are the model's, alignments that agree with
`plot attention`, and standard input translated line by line as it arrives."""

import io
import json
import os
import random
import select
import subprocess
import sys
import threading

import numpy as np
import pytest

from minitransformer import cli, no_grad
from minitransformer.cli.live import lines_as_they_come
from minitransformer.translation.translator import load_translator, translate, translate_n_best

SENTENCES = ["ka lo mi", "", "nu pe ro si", "tu tu ka"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny translator trained for 200 steps (a few seconds) to reverse and upper-case a
    made-up language: good enough that its hypotheses end, at different lengths."""
    root = tmp_path_factory.mktemp("translate")
    rng = random.Random(1)
    words = ["ka", "lo", "mi", "nu", "pe", "ro", "si", "tu"]
    (root / "corpus").mkdir()
    for split, n in (("train", 80), ("valid", 6), ("test", 6)):
        sentences = [[rng.choice(words) for _ in range(rng.randint(2, 5))] for _ in range(n)]
        (root / "corpus" / f"{split}.xx").write_text("".join(" ".join(s) + "\n"
                                                             for s in sentences))
        (root / "corpus" / f"{split}.yy").write_text(
            "".join(" ".join(reversed(s)).upper() + "\n" for s in sentences))
    assert cli.main(["train", "--data", str(root / "corpus"), "--src-lang", "xx", "--tgt-lang",
                     "yy", "--out", str(root / "run"), "--config", "tiny", "--vocab-size", "40",
                     "--max-steps", "200", "--eval-every", "200", "--bleu-sentences", "4",
                     "--max-tokens", "400", "--warmup", "40", "--beam", "2", "--keep-last", "1",
                     "--no-progress"]) == 0
    return root / "run" / "checkpoints" / "last.npz"


def translate_cli(capsys, checkpoint, *args):
    status = cli.main(["translate", "--checkpoint", str(checkpoint), *args])
    out, err = capsys.readouterr()
    return status, out, err


def teacher_forced(model, src_ids, out_ids, bos_id):
    """log P of each of ``out_ids`` given those before it, by the model's forward pass (teacher
    forcing, no cache, evaluation mode), in float64."""
    model.eval()
    with no_grad():
        logits = model([src_ids], [[bos_id, *out_ids[:-1]]]).numpy()[0].astype(np.float64)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    return log_p[np.arange(len(out_ids)), out_ids]


# ---------------------------------------------------------------------------- n-best lists

def test_n_best_lists_are_ranked_and_begin_with_the_translation(checkpoint, capsys):
    status, plain, _ = translate_cli(capsys, checkpoint, "--beam", "4", *SENTENCES)
    assert status == 0
    status, n_best, _ = translate_cli(capsys, checkpoint, "--beam", "4", "--n-best", "3",
                                      *SENTENCES)
    assert status == 0
    rows = [line.split("\t") for line in n_best.splitlines()]
    assert all(len(row) == 4 for row in rows)
    numbers = [int(row[0]) for row in rows]
    assert numbers == sorted(numbers) and set(numbers) == {0, 2, 3}  # the empty line: none
    for number in (0, 2, 3):
        mine = [row for row in rows if int(row[0]) == number]
        assert len(mine) == 3
        scores = [float(row[1]) for row in mine]
        assert scores == sorted(scores, reverse=True)
        assert mine[0][3] == plain.splitlines()[number]
        assert all(float(row[2]) <= float(row[1]) <= 0 for row in mine)  # log P ≤ log P / lp


def test_the_api_returns_the_same_hypotheses_with_their_scores(checkpoint):
    model, tokenizer = load_translator(checkpoint)
    found = translate_n_best(model, tokenizer, SENTENCES, beam_size=4, n_best=4)
    assert [t.source for t in found] == SENTENCES
    assert found[1].hypotheses == [] and found[1].source_pieces == []
    assert [t.hypotheses[0].text if t.hypotheses else "" for t in found] == translate(
        model, tokenizer, SENTENCES, 4)
    for t in found[0], found[2], found[3]:
        assert len(t.hypotheses) == 4
        assert [h.score for h in t.hypotheses] == sorted((h.score for h in t.hypotheses),
                                                         reverse=True)
        assert all(h.finished and h.pieces[-1] == "</s>" for h in t.hypotheses)
    greedy = translate_n_best(model, tokenizer, SENTENCES, beam_size=1)
    assert [t.hypotheses[0].text if t.hypotheses else "" for t in greedy] == translate(
        model, tokenizer, SENTENCES, 1)
    with pytest.raises(ValueError, match="greedy decoding"):
        translate_n_best(model, tokenizer, SENTENCES, beam_size=1, n_best=2)


@pytest.mark.parametrize("beam", ["1", "3"])
def test_json_log_probabilities_are_those_of_a_teacher_forced_pass(checkpoint, capsys, beam):
    status, out, _ = translate_cli(capsys, checkpoint, "--beam", beam, "--n-best", beam,
                                   "--json", *SENTENCES)
    assert status == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["source"] for r in records] == SENTENCES
    model, tokenizer = load_translator(checkpoint)
    piece_id = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    compared = 0
    for record in records:
        src_ids = [piece_id[p] for p in record["source_pieces"]]
        assert src_ids == tokenizer.encode(record["source"])
        assert len(record["hypotheses"]) == (int(beam) if record["source"] else 0)
        for hyp in record["hypotheses"]:
            out_ids = [piece_id[p] for p in hyp["pieces"]]
            assert tokenizer.decode(out_ids) == hyp["text"]
            assert len(hyp["token_log_probs"]) == len(out_ids)
            np.testing.assert_allclose(hyp["token_log_probs"],
                                       teacher_forced(model, src_ids, out_ids, tokenizer.bos_id),
                                       atol=2e-5)
            assert hyp["log_prob"] == pytest.approx(sum(hyp["token_log_probs"]), abs=1e-4)
            assert "alignment" not in hyp
            compared += 1
    assert compared == 3 * int(beam)


# ------------------------------------------------------------------------------ alignments

def test_alignments_over_words_and_pieces(checkpoint, capsys):
    status, out, _ = translate_cli(capsys, checkpoint, "--alignment", *SENTENCES)
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == len(SENTENCES) and lines[1] == "\t"
    for sentence, line in zip(SENTENCES, lines, strict=True):
        text, pairs = line.split("\t")
        for pair in pairs.split():
            i, j = map(int, pair.split("-"))
            assert 0 <= i < len(sentence.split()) and 0 <= j < len(text.split())
        # every output word is aligned to something
        assert {int(p.split("-")[1]) for p in pairs.split()} == set(range(len(text.split())))
    status, out, _ = translate_cli(capsys, checkpoint, "--alignment", "--json", "--n-best",
                                   "2", SENTENCES[0])
    [record] = [json.loads(line) for line in out.splitlines()]
    for hyp in record["hypotheses"]:
        pieces = [tuple(map(int, p.split("-"))) for p in hyp["alignment"]["pieces"].split()]
        assert [j for _, j in pieces] == list(range(len(hyp["pieces"]) - 1))  # all but EOS


@pytest.mark.parametrize("layer", ["-1", "0"])
def test_the_alignment_is_what_plot_attention_shows(checkpoint, capsys, tmp_path, monkeypatch,
                                                    layer):
    """For each generated token, the alignment's source piece is the column of the largest
    head-averaged weight in the row `plot attention` draws for it (it draws at most the first
    40 tokens: a hypothesis that repeats itself to its length limit is cut there)."""
    from minitransformer import viz

    drawn = {}
    monkeypatch.setattr(viz, "attention_heads", lambda weights, queries, keys, **kw:
                        drawn.update(weights=weights, queries=queries, keys=keys, **kw))
    for sentence in (SENTENCES[0], SENTENCES[2]):
        assert cli.main(["plot", "attention", sentence, "--checkpoint", str(checkpoint),
                         "--layer", layer, "--out", str(tmp_path / "a.png")]) == 0
        capsys.readouterr()
        status, out, _ = translate_cli(capsys, checkpoint, "--beam", "1", "--json",
                                       "--alignment", "--alignment-layer", layer, sentence)
        [hyp] = json.loads(out)["hypotheses"]
        rows = len(drawn["queries"])
        assert drawn["queries"] == hyp["pieces"][:rows] and drawn["average"]
        tokens = len(hyp["pieces"]) - hyp["finished"]  # without EOS
        assert rows == min(tokens, 40) + (hyp["finished"] and tokens <= 40)
        assert drawn["keys"] == json.loads(out)["source_pieces"]
        columns = drawn["weights"].mean(axis=0).argmax(axis=1)
        aligned = hyp["alignment"]["pieces"].split()  # a pair for every piece but EOS
        n = min(rows, len(aligned))
        assert aligned[:n] == [f"{i}-{j}" for j, i in enumerate(columns[:n])]


def test_alignment_layers_the_model_does_not_have_are_refused(checkpoint, capsys):
    status, _, err = translate_cli(capsys, checkpoint, "--alignment", "--alignment-layer", "2",
                                   "ka")
    assert status == 2
    assert ("--alignment-layer 2 does not exist; the model has 2 decoder layers (0 to 1, or -1 "
            "for the last).") in err


@pytest.mark.parametrize("args, message", [
    (["--n-best", "5"], "--n-best 5 is more than --beam 4, and the search keeps only 4 "
                        "hypotheses; give --beam 5 or more, or a smaller --n-best."),
    (["--n-best", "2", "--beam", "1"], "--n-best 2 needs beam search, but --beam 1 is greedy "
                                       "decoding, which keeps one hypothesis; give --beam 2"),
    (["--alignment-layer", "0"], "--alignment-layer chooses the layer of --alignment, which "
                                 "was not given"),
])
def test_options_that_cannot_work_together_are_refused(checkpoint, capsys, args, message):
    status, out, err = translate_cli(capsys, checkpoint, *args, "ka lo")
    assert status == 2 and out == ""
    assert message in err


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_cuda_graphs_on_the_cpu_are_refused_in_one_sentence(checkpoint, capsys, command):
    data = str(checkpoint.parent.parent.parent / "corpus")
    args = ["ka lo"] if command == "translate" else ["--data", data]
    status = cli.main([command, "--checkpoint", str(checkpoint), "--device", "cpu",
                       "--cuda-graphs", *args])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.strip() == (f"minitransformer {command}: CUDA graphs need a GPU (device "
                           "'cuda'), not 'cpu'; leave them out (--cuda-graphs) on the CPU.")


def test_an_empty_input_file_is_nothing_to_translate(checkpoint, capsys, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    status, out, err = translate_cli(capsys, checkpoint, "--input", str(tmp_path / "empty.txt"))
    assert (status, out, err) == (0, "", "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_translations_that_cannot_be_written_go_to_standard_output(checkpoint, capsys):
    """/dev/full: every write fails as on a full disk."""
    status, out, err = translate_cli(capsys, checkpoint, "ka lo", "nu pe", "--output",
                                     "/dev/full")
    assert status == 1
    assert "could not write --output /dev/full (No space left on device)" in err
    assert len(out.splitlines()) == 2


def test_an_output_that_is_an_input_is_refused_before_translating(checkpoint, capsys,
                                                                   tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("ka lo\n")
    status, out, err = translate_cli(capsys, checkpoint, "--input", str(source), "--output",
                                     str(source))
    assert (status, out) == (2, "") and source.read_text() == "ka lo\n"
    assert f"--output {source} is the --input file" in err
    before = checkpoint.read_bytes()
    status, _, err = translate_cli(capsys, checkpoint, "ka", "--output", str(checkpoint))
    assert status == 2 and "is the --checkpoint file" in err
    assert checkpoint.read_bytes() == before


def test_an_output_is_complete_or_absent(checkpoint, capsys, tmp_path, monkeypatch):
    """Written beside it and renamed at the end: when the rename fails (as a full disk would
    fail a write), the file there is untouched, no temporary file is left, and every
    translation still reaches standard output."""
    target = tmp_path / "out.txt"
    target.write_text("an earlier translation\n")
    status, out, err = translate_cli(capsys, checkpoint, "ka lo", "nu pe", "--output",
                                     str(target))
    assert (status, out, err) == (0, "", "") and len(target.read_text().splitlines()) == 2
    target.write_text("an earlier translation\n")

    def full(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", full)
    status, out, err = translate_cli(capsys, checkpoint, "ka lo", "nu pe", "--output",
                                     str(target))
    assert status == 1 and len(out.splitlines()) == 2
    assert f"could not write --output {target} (No space left on device)" in err
    assert target.read_text() == "an earlier translation\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_translation_that_stops_leaves_no_half_output(checkpoint, capsys, tmp_path,
                                                        monkeypatch):
    from minitransformer.cli import translate as command

    target = tmp_path / "out.txt"
    target.write_text("an earlier translation\n")

    def broken(*args):
        raise RuntimeError("a bug")
    monkeypatch.setattr(command, "_translations", broken)
    with pytest.raises(RuntimeError):
        cli.main(["translate", "--checkpoint", str(checkpoint), "ka lo", "--output",
                  str(target)])
    assert target.read_text() == "an earlier translation\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_an_error_of_the_system_is_one_line(monkeypatch, capsys):
    """Not every OSError is standard output's: one without a file is named as it is."""
    import errno

    from minitransformer.cli import info

    def no_files_left(args):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
    monkeypatch.setattr(info, "run", no_files_left)
    assert cli.main(["info"]) == 1
    assert capsys.readouterr().err == \
        f"minitransformer info: failed ({os.strerror(errno.EMFILE)}).\n"


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_dev_stdout_as_output_is_standard_output_whatever_it_goes_to(checkpoint, tmp_path):
    """Standard output sent by the shell to a file: /dev/stdout leads to that file, which must
    be neither replaced (its earlier lines were lost) nor written at another offset (the
    translations and the scores overwrote each other)."""
    log = tmp_path / "log.txt"
    log.write_text("earlier\n")
    command = [sys.executable, "-m", "minitransformer"]
    with open(log, "a") as out:
        subprocess.run([*command, "translate", "--checkpoint", str(checkpoint), "ka lo",
                        "--output", "/dev/stdout"], stdout=out, check=True, timeout=300)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == "earlier" and lines[1]
    data = checkpoint.parent.parent.parent / "corpus"
    with open(log, "w") as out:
        subprocess.run([*command, "evaluate", "--checkpoint", str(checkpoint), "--data",
                        str(data), "--output", "/dev/stdout"], stdout=out, check=True,
                       timeout=300)
    lines = log.read_text().splitlines()
    assert len(lines) == 6 + 2 and lines[6].startswith("BLEU = ") and lines[7].startswith("chrF")


def test_the_file_given_as_standard_input_cannot_be_the_output(checkpoint, tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("ka lo\n")
    with open(source) as stdin:
        done = subprocess.run([sys.executable, "-m", "minitransformer", "translate",
                               "--checkpoint", str(checkpoint), "--output", str(source)],
                              stdin=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "is the standard input's file" in done.stderr
    assert source.read_text() == "ka lo\n"


def test_an_empty_stream_leaves_an_empty_output_as_an_empty_file_does(checkpoint, tmp_path):
    """Lines read from a pipe as they arrive go to --output directly; none came, and the
    earlier file stayed as it was, where an empty input file gives an empty output."""
    target = tmp_path / "out.txt"
    target.write_text("an earlier translation\n")
    done = subprocess.run([sys.executable, "-m", "minitransformer", "translate",
                           "--checkpoint", str(checkpoint), "--output", str(target)],
                          input=b"", capture_output=True, timeout=300)
    assert done.returncode == 0 and target.read_text() == ""


def test_a_linked_output_keeps_its_link(checkpoint, capsys, tmp_path):
    (tmp_path / "real.txt").write_text("")
    (tmp_path / "link.txt").symlink_to("real.txt")
    status, _, _ = translate_cli(capsys, checkpoint, "ka lo", "--output",
                                 str(tmp_path / "link.txt"))
    assert status == 0 and (tmp_path / "link.txt").is_symlink()
    assert len((tmp_path / "real.txt").read_text().splitlines()) == 1


def test_a_reader_that_leaves_in_the_middle_of_a_write_is_noticed(monkeypatch):
    """A large write to a pipe whose reader goes away after the first bytes: Python's buffered
    file can return without an error, the rest dropped; the CLI's write raises, and the
    command then ends with status 1 (the reader of the output went away)."""
    from minitransformer.cli.outputs import to_standard_output

    read_end, write_end = os.pipe()
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    reader = threading.Thread(target=lambda: (os.read(read_end, 1), os.close(read_end)))
    reader.start()
    try:
        with pytest.raises(BrokenPipeError):
            to_standard_output(b"x" * 4_000_000)
    finally:
        reader.join()
        os.close(write_end)


def test_a_tokenizer_that_does_not_fit_the_model_is_refused_at_load(checkpoint, capsys,
                                                                    tmp_path):
    from minitransformer.nn import Transformer, TransformerConfig
    from minitransformer.translation.checkpoint import load_checkpoint, save_checkpoint

    tokenizer_bytes = load_checkpoint(checkpoint).tokenizer_bytes
    mixed = save_checkpoint(tmp_path / "mixed.npz",
                            Transformer(TransformerConfig.named("tiny", 23)), None,
                            tokenizer_bytes)
    status, out, err = translate_cli(capsys, mixed, "ka lo")
    assert (status, out) == (2, "")
    assert "holds a tokenizer of 40 pieces for a model of 23" in err


def test_ctrl_c_outside_a_command_s_own_handler_ends_with_130(monkeypatch, capsys):
    from minitransformer.cli import info

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(info, "run", interrupted)
    assert cli.main(["info"]) == 130
    assert capsys.readouterr().err.strip() == "minitransformer info: interrupted."


# ------------------------------------------------------------------------------- evaluate

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_evaluate_prints_its_scores_when_its_output_cannot_be_written(checkpoint, capsys):
    data = str(checkpoint.parent.parent.parent / "corpus")
    status = cli.main(["evaluate", "--checkpoint", str(checkpoint), "--data", data,
                       "--output", "/dev/full"])
    out, err = capsys.readouterr()
    assert status == 1 and out.startswith("BLEU = ")
    assert "could not write --output /dev/full (No space left on device)" in err


def test_evaluate_refuses_an_output_that_is_a_file_of_its_data(checkpoint, capsys):
    data = checkpoint.parent.parent.parent / "corpus"
    before = (data / "test.yy").read_text()
    status = cli.main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(data),
                       "--output", str(data / "test.yy")])
    assert status == 2 and "is the --data's test.yy file" in capsys.readouterr().err
    assert (data / "test.yy").read_text() == before


def test_evaluate_refuses_an_output_that_is_its_reference(checkpoint, capsys, tmp_path):
    (tmp_path / "src.xx").write_text("ka lo\n")
    (tmp_path / "ref.yy").write_text("LO KA\n")
    status = cli.main(["evaluate", "--checkpoint", str(checkpoint), "--src",
                       str(tmp_path / "src.xx"), "--ref", str(tmp_path / "ref.yy"), "--output",
                       str(tmp_path / "ref.yy")])
    assert status == 2 and "is the --ref file" in capsys.readouterr().err
    assert (tmp_path / "ref.yy").read_text() == "LO KA\n"


def test_evaluate_with_n_best_reports_the_oracle_bleu(checkpoint, capsys):
    data = str(checkpoint.parent.parent.parent / "corpus")
    common = ["evaluate", "--checkpoint", str(checkpoint), "--data", data, "--json"]
    assert cli.main(common) == 0
    alone = json.loads(capsys.readouterr().out)
    assert cli.main([*common, "--n-best", "4"]) == 0
    with_n_best = json.loads(capsys.readouterr().out)
    assert with_n_best["bleu"] == alone["bleu"] and with_n_best["n_best"] == 4
    assert 0 <= with_n_best["oracle_bleu"] <= 100
    assert cli.main(["evaluate", "--checkpoint", str(checkpoint), "--data", data,
                     "--n-best", "2"]) == 0
    assert "oracle BLEU of the 2 best = " in capsys.readouterr().out
    assert cli.main([*common, "--n-best", "5"]) == 2
    assert "--n-best 5 is more than --beam 4" in capsys.readouterr().err


def test_oracle_bleu_picks_the_hypothesis_closest_to_the_reference():
    from minitransformer.translation.scoring import corpus_bleu, oracle_bleu

    lists = [["a dog runs in the park", "the cat sleeps on the mat"], [], ["one two"]]
    references = ["the cat sleeps on the mat", "nothing", "one two"]
    assert oracle_bleu(lists, references).score == corpus_bleu(
        ["the cat sleeps on the mat", "", "one two"], references).score


# ------------------------------------------------------------------------------- live mode

def read_line(stream, seconds=60):
    """One line from a subprocess's stdout, failing (not hanging) when none comes."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no translation within {seconds} s"
    return stream.readline()


def read_bytes(stream, n, seconds=60):
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"nothing within {seconds} s"
    return stream.read(n)


def translator_process(checkpoint, *args):
    return subprocess.Popen([sys.executable, "-m", "minitransformer", "translate",
                             "--checkpoint", str(checkpoint), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_each_line_is_translated_as_soon_as_it_arrives(checkpoint):
    """A program writes a sentence, waits for its translation, then writes the next: the
    input never ends in between, so a translator that read to the end would hang."""
    model, tokenizer = load_translator(checkpoint)
    expected = translate(model, tokenizer, SENTENCES, 4)
    process = translator_process(checkpoint)
    try:
        for sentence, translation in zip(SENTENCES, expected, strict=True):
            process.stdin.write(sentence.encode() + b"\n")
            process.stdin.flush()
            assert read_line(process.stdout).decode() == translation + "\n"
        process.stdin.close()
        assert process.wait(timeout=60) == 0
        assert process.stderr.read() == b""  # no prompt: the input is not a terminal
    finally:
        process.kill()


def test_live_json_and_a_line_that_is_not_utf8(checkpoint):
    process = translator_process(checkpoint, "--json", "--n-best", "2")
    try:
        process.stdin.write(b"ka lo\n")
        process.stdin.flush()
        first = json.loads(read_line(process.stdout))
        assert first["source"] == "ka lo" and len(first["hypotheses"]) == 2
        process.stdin.write(b"caf\xe9\nmi nu\n")
        process.stdin.close()
        second, third = (json.loads(read_line(process.stdout)) for _ in range(2))
        assert (second["source"], second["hypotheses"]) == ("", [])
        assert third["source"] == "mi nu"
        assert process.wait(timeout=60) == 1
        assert b"line 2 of standard input is not valid UTF-8" in process.stderr.read()
    finally:
        process.kill()


def test_a_terminal_gets_a_prompt_and_ctrl_c_ends_with_130(checkpoint):
    """A pseudo-terminal as standard input: "> " on standard error before each line is read,
    and SIGINT (Ctrl-C) at the prompt ends the command with status 130."""
    import pty
    import signal

    controller, terminal = pty.openpty()
    # SIGINT as a terminal's command gets it: a test run started in the background (`&` in a
    # script) ignores SIGINT, and a child would inherit that and never see Ctrl-C
    process = subprocess.Popen([sys.executable, "-m", "minitransformer", "translate",
                                "--checkpoint", str(checkpoint)], stdin=terminal,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "OMP_NUM_THREADS": "1"},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(terminal)
    try:
        assert read_bytes(process.stderr, 2) == b"> "
        os.write(controller, b"ka lo\n")
        assert read_line(process.stdout).strip()
        assert read_bytes(process.stderr, 2) == b"> "  # the next prompt: waiting for a line
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        process.kill()
        os.close(controller)


def test_a_whole_file_piped_in_gives_what_input_gives(checkpoint, tmp_path, capsys):
    lines = [" ".join(random.Random(i).choices(["ka", "lo", "mi", "nu", "pe"], k=1 + i % 5))
             for i in range(300)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    status, expected, _ = translate_cli(capsys, checkpoint, "--input", str(tmp_path / "in.txt"))
    assert status == 0
    piped = subprocess.run([sys.executable, "-m", "minitransformer", "translate",
                            "--checkpoint", str(checkpoint)],
                           input=(tmp_path / "in.txt").read_bytes(), capture_output=True,
                           timeout=120)
    assert piped.returncode == 0
    assert piped.stdout.decode() == expected


def test_lines_are_handed_on_when_the_input_pauses():
    """The writer waits until the lines it wrote were handed on before writing more: each
    pause gives a batch of what had come, a line without its newline waits for the rest."""
    read_end, write_end = os.pipe()
    handed_on = threading.Event()

    def writer():
        for chunk in (b"one\n", b"two\nthr"):
            os.write(write_end, chunk)
            assert handed_on.wait(60)
            handed_on.clear()
        os.write(write_end, b"ee\nfour")
        os.close(write_end)

    thread = threading.Thread(target=writer)
    thread.start()
    batches = []
    with os.fdopen(read_end, "rb") as stream:
        for batch in lines_as_they_come(stream):
            batches.append(batch)
            handed_on.set()
    thread.join()
    assert batches[:2] == [[b"one"], [b"two"]]
    # "four" comes without a newline: it ends the input, with "three" or after it
    assert batches[2:] in ([[b"three", b"four"]], [[b"three"], [b"four"]])


def test_a_signal_before_the_wait_wakes_it_through_the_wake_up_pipe(monkeypatch):
    """Ctrl-C at the prompt must end the command even when it comes after the last check for
    signals and before select starts waiting (a window of microseconds, too narrow to aim a
    real signal at): while the reader waits, a signal's byte in Python's wake-up pipe makes
    select return. Here the byte is written just before select, as the signal's C handler would
    write it, with no input on the way: the reader wakes, looks again, then hands on the line
    that comes, and the process's wake-up fd is as before once the reader ends."""
    import select as select_module
    import signal

    read_end, write_end = os.pipe()
    calls = []
    real_select = select_module.select

    def select_spy(rlist, wlist, xlist, timeout=None):
        wake_fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wake_fd)
        if not calls:  # the first wait: a signal's byte arrives before select waits
            os.write(wake_fd, bytes([signal.SIGINT]))
        ready = real_select(rlist, wlist, xlist, timeout)
        calls.append((list(rlist), ready[0]))
        if len(calls) == 1:
            os.write(write_end, b"one\n")
            os.close(write_end)
        return ready

    monkeypatch.setattr("minitransformer.cli.live.select.select", select_spy)
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with os.fdopen(read_end, "rb") as stream:
        batches = list(lines_as_they_come(stream, prompt=None))
    assert batches == [[b"one"]]
    (first_fds, first_ready), *_ = calls
    assert len(first_fds) == 2 and first_ready == [first_fds[1]]  # woken by the pipe alone
    assert signal.set_wakeup_fd(before) == before


def test_a_stream_that_keeps_coming_is_handed_on_in_bounded_pieces():
    """A long stream that never pauses is handed on about ``max_lines`` at a time (at most
    one read's worth more), not held until its end: memory stays bounded."""
    read_end, write_end = os.pipe()
    lines = [b"%099d" % i for i in range(5000)]                          # 100 bytes a line

    def writer():
        with os.fdopen(write_end, "wb") as stream:
            stream.write(b"\n".join(lines) + b"\n")

    thread = threading.Thread(target=writer)
    thread.start()
    with os.fdopen(read_end, "rb") as stream:
        batches = list(lines_as_they_come(stream, max_lines=1000))
    thread.join()
    assert [line for batch in batches for line in batch] == lines
    assert len(batches) >= 4
    assert max(map(len, batches)) <= 1000 + (1 << 16) // 100 + 1


def test_a_regular_file_as_standard_input_is_read_whole(checkpoint, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ka lo\n\nmi\n")))
    status, out, _ = translate_cli(capsys, checkpoint)
    assert status == 0 and len(out.splitlines()) == 3


def test_a_line_of_a_file_as_standard_input_that_is_not_utf8_is_left_empty(checkpoint, capsys,
                                                                            monkeypatch):
    """As from a pipe: the line is reported and left untranslated, the rest translated."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ka lo\n\xff mi\r\nmi\n")))
    status, out, err = translate_cli(capsys, checkpoint, "--beam", "1")
    lines = out.split("\n")
    assert status == 1 and len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]
    assert "line 2 of standard input is not valid UTF-8" in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ka lo\n\xff")))
    status, out, err = translate_cli(capsys, checkpoint, "--beam", "1")
    assert status == 1 and out.split("\n")[1:] == ["", ""]  # the last line too, unended
