"""``minitransformer translate`` and ``evaluate``: use and score a trained checkpoint."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .values import at_least, finite_float


def add_parser(commands: argparse._SubParsersAction) -> None:
    t = commands.add_parser(
        "translate", help="translate sentences with a trained checkpoint",
        description="Translate the sentences given as arguments, else the lines of --input, "
                    "else the lines of standard input; one translation per line. Empty lines "
                    "stay empty; unknown characters become the unknown token.")
    t.add_argument("sentences", nargs="*", help="sentences to translate")
    _checkpoint_options(t)
    t.add_argument("--input", help="a file of sentences, one per line (plain or .gz)")
    t.add_argument("--output", help="write the translations here instead of standard output")
    t.set_defaults(run=run_translate)

    e = commands.add_parser(
        "evaluate", help="translate a test set and score it with sacreBLEU",
        description="Translate --src and score against --ref (or a split of --data) with "
                    "sacreBLEU BLEU and chrF on detokenized, cased text, printing their "
                    "signatures.")
    _checkpoint_options(e)
    e.add_argument("--src", help="source sentences, one per line")
    e.add_argument("--ref", help="reference translations, one per line")
    e.add_argument("--data", metavar="builtin|DIR", help="instead of --src/--ref: a corpus")
    e.add_argument("--split", choices=["valid", "test"],
                   help="which split of --data (default test)")
    e.add_argument("--src-lang", help="source language suffix of --data")
    e.add_argument("--tgt-lang", help="target language suffix of --data")
    e.add_argument("--output", help="write the translations here")
    e.add_argument("--json", action="store_true", help="print the scores as JSON")
    e.set_defaults(run=run_evaluate)


def _checkpoint_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="a checkpoint, e.g. runs/builtin-tiny/checkpoints/averaged.npz")
    p.add_argument("--beam", type=at_least(1), default=4,
                   help="beam size; 1 for greedy decoding (default 4)")
    p.add_argument("--length-penalty", type=finite_float, default=0.6,
                   help="α of the length penalty ((5 + length) / 6)^α (default 0.6)")
    p.add_argument("--batch-size", type=at_least(1), default=None,
                   help="sentences decoded at once (default: 128 for each CPU thread, at "
                        "most 256; 256 on the GPU); the translations do not depend on it")
    p.add_argument("--device", choices=["cpu", "cuda"],
                   help="default: $MINITRANSFORMER_DEVICE, else cpu")


def _direction(args: argparse.Namespace, trained: tuple[str, str] | None
               ) -> tuple[str | None, str | None]:
    """The languages to read from --data: those given, else those the checkpoint was trained
    on (so a de -> en model is not scored on en -> de); given ones must agree with them."""
    from ..data.builtin import SOURCE_LANGUAGE, TARGET_LANGUAGE
    from ..data.errors import DataError

    if trained is None:
        return args.src_lang, args.tgt_lang
    src, tgt = trained
    for flag, given, recorded in (("--src-lang", args.src_lang, src),
                                  ("--tgt-lang", args.tgt_lang, tgt)):
        if given and given != recorded:
            raise DataError(f"{flag} {given} does not fit {args.checkpoint}, which was trained "
                            f"to translate {src} to {tgt}; leave {flag} out, or give a "
                            "checkpoint trained in that direction.")
    if args.data == "builtin" and (src, tgt) != (SOURCE_LANGUAGE, TARGET_LANGUAGE):
        raise DataError(f"{args.checkpoint} translates {src} to {tgt}, but the built-in task "
                        f"is {SOURCE_LANGUAGE} to {TARGET_LANGUAGE}; give --data a folder of "
                        f"{src} and {tgt} files.")
    return src, tgt


def run_translate(args: argparse.Namespace) -> int:
    from ..data.errors import DataError
    from ..data.parallel import read_lines
    from ..translation.checkpoint import CheckpointError
    from ..translation.translator import load_translator, translate

    if args.sentences and args.input:
        print(f"minitransformer translate: give sentences as arguments or --input, not both "
              f"(got --input {args.input} together with {len(args.sentences)} sentence"
              f"{'s' if len(args.sentences) > 1 else ''}).", file=sys.stderr)
        return 2
    try:
        model, tokenizer = load_translator(args.checkpoint)
        if args.sentences:
            sentences = list(args.sentences)
        elif args.input:
            sentences = read_lines(args.input)
        else:
            sentences = [line.rstrip("\n") for line in sys.stdin]
        _check_utf8(sentences, "an argument" if args.sentences else
                    args.input or "standard input")
        _check_output(args.output)
    except (CheckpointError, DataError) as exc:
        print(f"minitransformer translate: {exc}", file=sys.stderr)
        return 2
    outputs = translate(model, tokenizer, sentences, args.beam, args.length_penalty,
                        args.batch_size)
    text = "".join(line + "\n" for line in outputs)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
            return 0
        except OSError as exc:  # a full disk: the translations go to standard output instead
            print(f"minitransformer translate: could not write --output {args.output} "
                  f"({exc.strerror or exc}); the translations follow on standard output.",
                  file=sys.stderr)
            sys.stdout.write(text)
            return 1
    sys.stdout.write(text)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from ..data.errors import DataError
    from ..data.parallel import read_parallel
    from ..translation.checkpoint import CheckpointError
    from ..translation.corpus import load_corpus
    from ..translation.scoring import score
    from ..translation.translator import load_translator_and_languages

    contradiction = _contradicting_options(args)
    if contradiction:
        print(f"minitransformer evaluate: {contradiction}", file=sys.stderr)
        return 2
    if not args.data and not (args.src and args.ref):
        print("minitransformer evaluate: give --src and --ref, or --data.", file=sys.stderr)
        return 2
    try:
        model, tokenizer, trained = load_translator_and_languages(args.checkpoint)
        if args.data:
            split = args.split or "test"
            corpus = load_corpus(args.data, *_direction(args, trained), splits=[split])
            pairs = getattr(corpus, split)
        else:
            pairs = read_parallel(args.src, args.ref)
        _check_output(args.output)
    except (CheckpointError, DataError) as exc:
        print(f"minitransformer evaluate: {exc}", file=sys.stderr)
        return 2
    result = score(model, tokenizer, pairs, args.beam, args.length_penalty, args.output,
                   args.batch_size)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"BLEU = {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF = {result['chrf']:.2f}  ({result['chrf_signature']})")
    return 0


def _contradicting_options(args: argparse.Namespace) -> str | None:
    """What is wrong when evaluate is given two test sets, or options of the one it does not
    read (they would be ignored without a word); None when nothing is."""
    if args.data and (args.src or args.ref):
        given = " and ".join(f"--{name} {getattr(args, name)}" for name in ("src", "ref")
                             if getattr(args, name))
        return (f"give either --src and --ref or --data, not both (got --data {args.data} "
                f"together with {given}).")
    if not args.data:
        given = [f"--{name.replace('_', '-')}" for name in ("split", "src_lang", "tgt_lang")
                 if getattr(args, name)]
        if given:
            return (f"{' and '.join(given)} choose{'s' if len(given) == 1 else ''} what to "
                    "read from --data, which was not given; leave "
                    f"{'it' if len(given) == 1 else 'them'} out, or give --data.")
    return None


def _check_utf8(sentences: list[str], source: str) -> None:
    """Refuse text that was not UTF-8: Python keeps such bytes as lone surrogates, which
    SentencePiece cannot take."""
    from ..data.errors import DataError

    for number, sentence in enumerate(sentences, 1):
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(f"sentence {number} of {source} is not valid UTF-8; convert the "
                            "text to UTF-8 (e.g. with iconv) and try again.") from None


def _check_output(output: str | None) -> None:
    """Refuse an --output the translations could not be written to, before translating."""
    from ..data.errors import DataError

    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise DataError(f"--output {path} is a folder; give a file name for the translations.")
    if not path.parent.is_dir():
        raise DataError(f"--output {path}: the folder {path.parent} does not exist; create it "
                        "or write elsewhere.")
    where = path if path.exists() else path.parent
    if not os.access(where, os.W_OK):
        raise DataError(f"--output {path}: {'the file' if where == path else 'its folder'} "
                        "may not be written (permission denied); write elsewhere.")
