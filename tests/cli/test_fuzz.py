"""The command line fuzzed: argument vectors for every subcommand, generated from its parser,
with valid and invalid values (odd strings, huge and negative numbers, nan and inf, missing and
extra arguments) and hostile input files (empty, binary, not UTF-8, NUL bytes, a huge line,
mismatched line counts, truncated and tampered checkpoints).

Every run must keep the contract of docs/cli.md: no traceback, exit status 0, 1 or 2, a
message on standard error that starts with the command's name when it is not 0, no temporary
file left behind, every checkpoint written loadable, and nothing outside the scratch folder
changed. Each example must also end in bounded time (EXAMPLE_SECONDS): a number that asks for
hours of work or terabytes of memory is refused, not attempted.

The suite runs a few examples of each command. The long profile, for a search of its own:

    MINITRANSFORMER_FUZZ_EXAMPLES=300 pytest tests/cli/test_fuzz.py -p no:cacheprovider

runs that many examples of each command (4,200 in all with 300, about 20 minutes on two
cores).
"""

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import minitransformer as mt
from minitransformer import cli
from minitransformer.data.tokenizer import Tokenizer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)

EXAMPLES = int(os.environ.get("MINITRANSFORMER_FUZZ_EXAMPLES", "0"))
EXAMPLE_SECONDS = 60
REPOSITORY = Path(__file__).resolve().parents[2]

# Every subcommand and the examples it gets in the suite: train and evaluate run a model, so
# fewer; `data multi30k` is given only download addresses that fail at once (no network).
COMMANDS = {
    ("train",): 5, ("translate",): 12, ("evaluate",): 6, ("data", "multi30k"): 5,
    ("data", "builtin"): 3, ("gradcheck",): 5, ("check-exercise",): 6, ("info",): 6,
    ("plot", "model"): 5, ("plot", "attention"): 6, ("plot", "positions"): 6,
    ("plot", "schedule"): 6, ("plot", "curves"): 5, ("plot", "gradcheck"): 3,
}


class TookTooLong(BaseException):
    """An example ran past EXAMPLE_SECONDS (BaseException: no `except Exception` hides it)."""


# ------------------------------------------------------------------------------ the world

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Input files, good and hostile, in a folder the commands must never change."""
    root = tmp_path_factory.mktemp("fuzz")
    files = root / "files"
    files.mkdir()
    rng = random.Random(0)
    (files / "empty.txt").write_bytes(b"")
    (files / "binary.bin").write_bytes(bytes(rng.randrange(256) for _ in range(3000)))
    (files / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\nna\xefve\n".encode("latin-1"))
    (files / "nul.txt").write_bytes(b"ka\x00lo\nmi\x00\x00nu\n")
    (files / "huge_line.txt").write_text("ka lo mi nu " * 20_000 + "\n")
    (files / "three.txt").write_text("ka lo mi\nnu pe\nro si tu\n")
    (files / "five.txt").write_text("KA LO\nNU\nPE RO\nSI\nTU\n")
    (files / "three_ref.txt").write_text("MI LO KA\nPE NU\nTU SI RO\n")
    (files / "three.txt.gz").write_bytes(gzip.compress(b"ka lo\nmi\nnu pe\n"))
    (files / "not.gz").write_bytes(b"\x1f\x8b this is no gzip stream")
    (files / "log.jsonl").write_text(
        '{"step": 1, "loss": 3.0, "lr": 0.001}\n{"step": 2, "loss": 2.5, "lr": 0.002}\n'
        '{"validation": {"valid_loss": 2.7, "valid_ppl": 14.9, "valid_bleu": 4.8, "step": 2}}\n')
    (files / "exercise.py").write_text("def forward(x):\n    return x\n")
    (files / "syntax_error.py").write_text("def (:\n")
    corpus = files / "corpus"
    corpus.mkdir()
    words = ["ka", "lo", "mi", "nu", "pe", "ro", "si", "tu"]
    for split, n in (("train", 40), ("valid", 4), ("test", 4)):
        sentences = [[rng.choice(words) for _ in range(rng.randint(2, 5))] for _ in range(n)]
        (corpus / f"{split}.xx").write_text("".join(" ".join(s) + "\n" for s in sentences))
        (corpus / f"{split}.yy").write_text(
            "".join(" ".join(reversed(s)).upper() + "\n" for s in sentences))
    (files / "uneven").mkdir()
    for split in ("train", "valid", "test"):
        (files / "uneven" / f"{split}.xx").write_text("ka lo\nmi\n")
        (files / "uneven" / f"{split}.yy").write_text("KA\n")
    # checkpoints: a real one (a tiny model, trained for no step, with its tokenizer), and
    # that one truncated, with a byte changed, and an .npz that is no checkpoint
    text = [line for p in corpus.glob("train.*") for line in p.read_text().splitlines()]
    tokenizer = Tokenizer.train(text * 3, vocab_size=40)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.named("tiny", tokenizer.vocab_size, max_len=64))
    good = save_checkpoint(files / "good.npz", model, None, tokenizer.to_bytes(),
                           state={"languages": ["xx", "yy"]})
    data = good.read_bytes()
    (files / "truncated.npz").write_bytes(data[: len(data) // 2])
    tampered = bytearray(data)
    tampered[len(data) // 3] ^= 0x10
    (files / "tampered.npz").write_bytes(bytes(tampered))
    np.savez(files / "plain.npz", x=np.zeros(3))
    digest = _digest(files)
    yield files
    assert _digest(files) == digest, "a command changed an input file"


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- the arguments

NUMBERS = ["0", "1", "2", "3", "-1", "-7", "1.5", "0.5", "1e-9", "1e9", "nan", "inf", "-inf",
           "99999999999999999999", "1e999", "0x10", "1_000", "", " ", "abc", "2 3"]
SMALL = ["1", "2", "3"]
ODD_TEXT = st.text(st.characters(blacklist_characters="\x00",
                                 blacklist_categories=("Cs",)), max_size=40)
ODD_STRINGS = st.one_of(ODD_TEXT, st.sampled_from(
    ["", " ", "-", "--", "-x", "\udcff\udcfe", "ünïcödé ✓", "a" * 5000, "..", "/", "~"]))


def input_paths(files):
    """Paths to read: every fixture, folders, missing paths, odd names."""
    names = sorted(p.name for p in files.iterdir())
    return st.one_of(st.sampled_from([str(files / n) for n in names]), st.sampled_from(
        [str(files), str(files / "missing.txt"), "/proc/nope/x", "/dev/null", "", "-"]))


def output_paths(scratch):
    """Paths to write: new and existing places in the scratch folder, and impossible ones."""
    return st.sampled_from([str(scratch / "out" / "a"), str(scratch / "new.txt"),
                            str(scratch), str(scratch / "file.txt"),
                            str(scratch / "file.txt" / "below"), "/proc/nope/run", "/dev/full",
                            "", str(scratch / "x.png"), str(scratch / "x.svg"),
                            str(scratch / "x.notapicture")])


def mostly(valid, invalid):
    """``valid`` seven times in eight: with several options drawn, most examples must still
    get past the parser and the checks of the input to test what lies behind them."""
    return st.integers(0, 7).flatmap(lambda n: invalid if n == 0 else valid)


# what a number option takes when it is meant to work (else SMALL)
GOOD_NUMBERS = {"--vocab-size": ["30", "40", "60"], "--max-tokens": ["200", "400"],
                "--warmup": ["10", "100"], "--d-model": ["8", "64"], "--length": ["10", "100"],
                "--steps": ["100", "2000"], "--layer": ["0", "1", "-1"],
                "--alignment-layer": ["0", "1", "-1"], "--seed": ["0", "1", "7"],
                "--max-len": ["40", "100"], "--src-len": ["3", "7"], "--tgt-len": ["3", "7"],
                "--lr-scale": ["0.5", "1", "2"], "--clip-norm": ["1", "5"],
                "--dropout": ["0", "0.1"], "--label-smoothing": ["0", "0.1"],
                "--length-penalty": ["0", "0.6", "1.5"], "--time-budget": ["0.05"]}

# what a path option reads when it is meant to work
GOOD_INPUTS = {"--checkpoint": "good.npz", "--input": "three.txt", "--src": "three.txt",
               "--ref": "three_ref.txt", "--data": "corpus", "log": "log.jsonl",
               "file": "exercise.py"}


def value_for(action, files, scratch, command):
    """A strategy for the value of one argument, from what the parser says about it."""
    name = (action.option_strings or [action.dest])[-1]
    if action.choices:
        return mostly(st.sampled_from(sorted(action.choices)), ODD_STRINGS)
    if name in ("--out", "--output", "--dest"):
        good = {"--output": scratch / "translations.txt", "--dest": scratch / "made"}.get(
            name, scratch / "picture.png" if command[0] == "plot" else scratch / "run")
        return mostly(st.just(str(good)), output_paths(scratch))
    if name in GOOD_INPUTS:
        good = [str(files / GOOD_INPUTS[name])]
        if name == "--data" and command != ("train",):  # its own task: a direction to refuse
            good.append("builtin")
        return mostly(st.sampled_from(good), input_paths(files))
    if name == "--base-url":  # nothing that would reach the network
        return st.sampled_from(["http://127.0.0.1:9/", "ftp://x/", "nope", "",
                                "http://[::1", f"file://{files}/"])
    if name in ("--src-lang", "--tgt-lang"):
        return mostly(st.sampled_from(["xx", "yy", "en", "vel"]), ODD_STRINGS)
    if name == "--filter":
        return mostly(st.sampled_from(["relu", "softmax", "layer_norm", "embedding"]),
                      ODD_STRINGS)
    if name in ("name",):
        return mostly(st.sampled_from(["softmax", "linear", "masks", "adam_warmup"]),
                      ODD_STRINGS)
    if name in ("sentences", "sentence"):
        return mostly(st.sampled_from(["ka lo mi", "nu pe", "KA LO", ""]), ODD_STRINGS)
    if name in ("--config",):
        return mostly(st.sampled_from(["tiny", "small", "base", "big"]), ODD_STRINGS)
    numbers = st.one_of(st.sampled_from(NUMBERS), st.integers(-3, 10**12).map(str))
    return mostly(st.sampled_from(GOOD_NUMBERS.get(name, SMALL)), numbers)


def parser_of(command):
    parser = cli.build_parser()
    for word in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


@st.composite
def argument_vectors(draw, command, files, scratch):
    """An argv for ``command``: some of its options with generated values, its positionals,
    now and then an option dropped (a required one too) or an unknown one added."""
    actions = [a for a in parser_of(command)._actions
               if not isinstance(a, argparse._HelpAction | argparse._VersionAction)]
    argv = list(command)
    for action in actions:
        if action.option_strings:  # each option in about a third of the examples
            if draw(st.integers(0, 2)) and not (action.required and draw(st.integers(0, 9))):
                continue
            flag = draw(st.sampled_from(action.option_strings))
            if action.nargs == 0:
                argv.append(flag)
            else:
                argv += [flag, draw(value_for(action, files, scratch, command))]
        else:  # a positional: usually there, sometimes several, sometimes missing
            count = draw(st.sampled_from([1, 1, 1, 0, 2]))
            argv += [draw(value_for(action, files, scratch, command)) for _ in range(count)]
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(
            ["--bogus", "stray", "--beam=2", "-h-", "--json=1"])))
    return argv


def bounded(command, argv, files):
    """Options that keep an example short whatever else it draws: appended after the drawn
    ones, so argparse still parses (and must refuse) every drawn value, but the last one wins.
    What is bounded here is covered by the tests of each command instead."""
    if command == ("train",):  # the built-in task's 20,000 pairs: the fuzz corpus instead
        data = [] if "--data" in argv else ["--data", str(files / "corpus")]
        return ["--max-steps", "2", "--eval-every", "2", "--bleu-sentences", "2", "--config",
                "tiny", "--no-progress", "--max-len", "40", *data]
    if command in (("gradcheck",), ("plot", "gradcheck")) and "--filter" not in argv:
        return ["--filter", "relu"]  # the whole check takes a minute
    return []


# ------------------------------------------------------------------------------ the runner

def run_command(argv, stdin_bytes, cwd):
    """``minitransformer ARGV`` in this process, as the console script runs it: its exit
    status (argparse's SystemExit included), standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(stdin_bytes), encoding="utf-8",
                             errors="surrogateescape")

    def too_long(signum, frame):
        raise TookTooLong(f"{argv} ran for more than {EXAMPLE_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(EXAMPLE_SECONDS)
    old_stdin, old_cwd = sys.stdin, os.getcwd()
    sys.stdin = stdin
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(argv)
            except SystemExit as exc:  # argparse: usage errors (2)
                status = exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin = old_stdin
        os.chdir(old_cwd)
        mt.backend.use("cpu")
    return status, out.getvalue(), err.getvalue()


def check_contract(argv, status, out, err, scratch):
    assert status in (0, 1, 2), f"{argv}: exit status {status}\n{err}"
    assert "Traceback" not in err, f"{argv}:\n{err}"
    if status == 1 and "--json" in argv and out.strip():  # the failure is in the JSON
        assert isinstance(json.loads(out.strip().splitlines()[-1]), dict)
    elif status == 1 and out.strip() and argv[0] in ("check-exercise", "gradcheck"):
        pass  # a failed check: its report is the output
    elif status != 0:  # the message: a line that names the command (a drawn argument
        # holding a newline can carry its end onto the lines after it)
        said = [line for line in err.splitlines() if line.startswith("minitransformer")]
        assert said, f"{argv}: exit status {status} and no message\n{err}"
        assert len(" ".join(err.split()[-40:]).split()) >= 4, f"{argv}: {err!r}"
    for path in scratch.rglob("*"):
        assert not path.name.endswith((".tmp", ".partial")) and not path.name.startswith(
            ".tmp"), f"{argv} left {path}"
        if path.suffix == ".npz":
            try:
                load_checkpoint(path)
            except CheckpointError as exc:
                pytest.fail(f"{argv} wrote {path}, which does not load: {exc}")


OUTPUTS = ("runs", "data", "*.png", "*.svg", "*.pdf", "*.npz", "*.txt", "*.json")


@pytest.fixture(scope="module")
def repository_state():
    """The project's own folder: the fuzzed commands, run in their scratch folders, may not
    write there (no run folder, picture, checkpoint, translation or download appears)."""
    def state():
        return {str(p) for pattern in OUTPUTS for p in REPOSITORY.glob(pattern)}
    before = state()
    yield
    assert state() == before, "a fuzzed command wrote into the project's folder"


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_the_command_line_keeps_its_contract(command, world, tmp_path_factory,
                                            repository_state):
    examples = EXAMPLES or COMMANDS[command]

    # the long profile reports a failing example as found: shrinking one that ran past
    # EXAMPLE_SECONDS would rerun it many times
    @settings(max_examples=examples, deadline=None, database=None, derandomize=not EXAMPLES,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.generate] if EXAMPLES else list(Phase))
    @given(data=st.data())
    def example(data):
        scratch = tmp_path_factory.mktemp("scratch")
        (scratch / "file.txt").write_text("a file where a folder is expected\n")
        argv = data.draw(argument_vectors(command, world, scratch))
        argv += bounded(command, argv, world)
        stdin = data.draw(st.sampled_from([b"", b"ka lo\nmi nu\n", b"\xff\xfe\x00",
                                           (world / "latin1.txt").read_bytes()]))
        status, out, err = run_command(argv, stdin, scratch)
        check_contract(argv, status, out, err, scratch)

    example()
