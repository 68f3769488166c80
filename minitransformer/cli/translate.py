"""``minitransformer translate`` and ``evaluate``: use and score a trained checkpoint."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..files import standard_output
from .outputs import TranslationsOutput, check_output, to_standard_output
from .values import at_least, check_utf8, finite_float, language_code


def add_parser(commands: argparse._SubParsersAction) -> None:
    t = commands.add_parser(
        "translate", help="translate sentences with a trained checkpoint",
        description="Translate the sentences given as arguments, else the lines of --input, "
                    "else the lines of standard input, each as soon as its line is complete "
                    "(from a terminal or a pipe); one translation per line. Empty lines stay "
                    "empty; unknown characters become the unknown token. --n-best, "
                    "--alignment and --json print what the search found besides.")
    t.add_argument("sentences", nargs="*", help="sentences to translate")
    _checkpoint_options(t)
    t.add_argument("--input", help="a file of sentences, one per line (plain or .gz)")
    t.add_argument("--output", help="write the translations here instead of standard output")
    t.add_argument("--n-best", type=at_least(1), metavar="K",
                   help="the K best hypotheses of each sentence (K at most --beam), one line "
                        "each, best first: sentence number (from 0), score, log-probability, "
                        "translation, separated by tabs")
    t.add_argument("--alignment", action="store_true",
                   help="add each translation's word alignment to the source, as i-j pairs "
                        "(source word i, output word j, from 0) after a tab: the source word "
                        "that the cross-attention of --alignment-layer, averaged over its "
                        "heads, weighs most")
    t.add_argument("--alignment-layer", type=int, metavar="L",
                   help="the decoder layer whose cross-attention gives --alignment (default "
                        "-1, the last)")
    t.add_argument("--json", action="store_true",
                   help="one JSON object per sentence instead: the source and its pieces, and "
                        "each hypothesis's text, pieces, per-piece log-probabilities, "
                        "log-probability, score (and alignment)")
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
    e.add_argument("--src-lang", type=language_code, help="source language suffix of --data")
    e.add_argument("--tgt-lang", type=language_code, help="target language suffix of --data")
    e.add_argument("--output", help="write the translations here")
    e.add_argument("--n-best", type=at_least(1), metavar="K",
                   help="also the oracle BLEU: that of the hypotheses, one of the K best of "
                        "each sentence, closest to their references (K at most --beam)")
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
    p.add_argument("--cuda-graphs", action="store_true",
                   help="GPU: replay each shape's decoding step as a CUDA graph "
                        "(docs/performance.md)")


def _decoding_graphs(model: Any, args: argparse.Namespace) -> Any:
    """The model's decoding steps in CUDA graphs when --cuda-graphs asks for them, else None;
    a DataError on a device that has none."""
    from ..autograd.graphs import GraphsUnavailable
    from ..data.errors import DataError
    from ..translation.graphs import DecodingGraphs

    if not args.cuda_graphs:
        return None
    try:
        return DecodingGraphs(model)
    except GraphsUnavailable as exc:
        raise DataError(str(exc)) from None


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
    from ..translation.alignment import check_layer
    from ..translation.checkpoint import CheckpointError
    from ..translation.memory import MemoryLimitError
    from ..translation.translator import beam_problem, load_translator, translation_session
    from .live import arrives_over_time, lines_as_they_come

    problem = _translate_options_problem(args)
    if problem:
        print(f"minitransformer translate: {problem}", file=sys.stderr)
        return 2
    try:
        model, tokenizer = load_translator(args.checkpoint)
        if beam_problem(model.config.tgt_vocab_size, args.beam):
            raise DataError(beam_problem(model.config.tgt_vocab_size, args.beam))
        graphs = _decoding_graphs(model, args)
        if args.alignment:
            try:
                check_layer(model, -1 if args.alignment_layer is None else args.alignment_layer)
            except ValueError:
                n = len(model.decoder.layers)
                raise DataError(f"--alignment-layer {args.alignment_layer} does not exist; the "
                                f"model has {n} decoder layers (0 to {n - 1}, or -1 for the "
                                "last).") from None
        inputs = {"--checkpoint": args.checkpoint, "--input": args.input}
        if not (args.sentences or args.input) and os.path.exists("/dev/stdin"):
            inputs["standard input's"] = "/dev/stdin"  # `< t.txt` with --output t.txt
        check_output(args.output, inputs)
        live = not (args.sentences or args.input) and arrives_over_time(sys.stdin)
        status = 0
        if args.sentences:
            batches: Any = [list(args.sentences)]
            check_utf8(batches[0], "an argument")
        elif args.input:
            batches = [read_lines(args.input, allow_empty=True)]
        elif not live:  # a file given as standard input: there at once, read whole
            stdin = getattr(sys.stdin, "buffer", None)  # None: replaced by a text object
            data = stdin.read() if stdin is not None else \
                sys.stdin.read().encode("utf-8", "surrogateescape")
            lines = data.split(b"\n")
            if lines[-1] == b"":  # the last newline ends a line; it does not start one
                lines.pop()
            sentences, status = _decoded(lines, 1)
            batches = [sentences]
    except (CheckpointError, DataError) as exc:
        print(f"minitransformer translate: {exc}", file=sys.stderr)
        return 2
    # lines as they arrive go to --output as they are translated; the rest is put in place
    # whole, or not at all when the work stops
    out = TranslationsOutput(args.output, whole=not live)
    if not live:
        try:
            out.write(_translations(model, tokenizer, batches[0], args, 0, graphs))
        except MemoryLimitError as exc:  # not even one sentence fits (a smaller batch would)
            out.discard()
            print(f"minitransformer translate: {exc}", file=sys.stderr)
            return 2
        except BaseException:  # Ctrl-C, a bug: no half file in --output's place
            out.discard()
            raise
        out.close()
        return max(status, out.status)
    prompt = "> " if sys.stdin.isatty() else None
    first, status = 0, 0
    # the model does not change here: its weights' copies laid out for small products serve
    # every line (translation_session), where each translate call would make its own
    with translation_session(model):
        try:
            # a stream keeps coming: hand it on in many batches at a time, memory bounded
            max_lines = max(4096, 16 * (args.batch_size or 0))
            for lines in lines_as_they_come(sys.stdin.buffer, prompt, max_lines):
                sentences, bad = _decoded(lines, first + 1)
                status = max(status, bad)
                out.write(_translations(model, tokenizer, sentences, args, first, graphs))
                first += len(sentences)
        except KeyboardInterrupt:  # Ctrl-C at the prompt: the translations so far are out
            print(file=sys.stderr)
            return 130
        except MemoryLimitError as exc:
            print(f"minitransformer translate: {exc}", file=sys.stderr)
            return 2
        finally:
            out.close()
    return max(status, out.status)


def _translate_options_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with a combination of translate's options, or None."""
    if args.sentences and args.input:
        n = len(args.sentences)
        return (f"give sentences as arguments or --input, not both (got --input {args.input} "
                f"together with {n} sentence{'s' if n > 1 else ''}).")
    if args.n_best is not None and args.n_best > 1 and args.beam == 1:
        return (f"--n-best {args.n_best} needs beam search, but --beam 1 is greedy decoding, "
                f"which keeps one hypothesis; give --beam {args.n_best} or more.")
    if args.n_best is not None and args.n_best > args.beam:
        return (f"--n-best {args.n_best} is more than --beam {args.beam}, and the search keeps "
                f"only {args.beam} hypotheses; give --beam {args.n_best} or more, or a smaller "
                "--n-best.")
    if args.alignment_layer is not None and not args.alignment:
        return ("--alignment-layer chooses the layer of --alignment, which was not given; add "
                "--alignment, or leave --alignment-layer out.")
    return None


def _translations(model: Any, tokenizer: Any, sentences: list[str], args: argparse.Namespace,
                  first: int, graphs: Any = None) -> str:
    """The text translate prints for ``sentences`` (numbered from ``first``), in the format
    its options ask for."""
    from ..translation.translator import translate, translate_n_best

    if not (args.n_best or args.alignment or args.json):  # the translations alone
        return "".join(line + "\n" for line in translate(
            model, tokenizer, sentences, args.beam, args.length_penalty, args.batch_size,
            graphs))
    layer = None
    if args.alignment:
        layer = -1 if args.alignment_layer is None else args.alignment_layer
    found = translate_n_best(model, tokenizer, sentences, args.beam, args.length_penalty,
                             args.n_best or 1, args.batch_size, layer, graphs)
    if args.json:
        return "".join(json.dumps(t.to_json(), ensure_ascii=False) + "\n" for t in found)

    def alignment(hyp: Any) -> str:
        words = hyp.alignment.words if hyp.alignment else []
        return "\t" + " ".join(f"{i}-{j}" for i, j in words) if args.alignment else ""

    lines = []
    for number, translation in enumerate(found, first):
        if not args.n_best:  # one line a sentence: the translation and its alignment
            best = translation.hypotheses[0] if translation.hypotheses else None
            lines.append((best.text + alignment(best)) if best else
                         "\t" if args.alignment else "")
            continue
        for hyp in translation.hypotheses:
            lines.append(f"{number}\t{hyp.score:.4f}\t{hyp.log_prob:.4f}\t{hyp.text}"
                         + alignment(hyp))
    return "".join(line + "\n" for line in lines)


def _decoded(lines: list[bytes], first: int) -> tuple[list[str], int]:
    """Lines of standard input (numbered from ``first``) as text, a "\\r" before the end
    dropped; a line that is not UTF-8 is reported and becomes an empty line, to keep the
    lines in step, and the status 1."""
    sentences, status = [], 0
    for number, line in enumerate(lines, first):
        try:
            sentences.append(line.removesuffix(b"\r").decode("utf-8"))
        except UnicodeDecodeError:
            print(f"minitransformer translate: line {number} of standard input is not valid "
                  "UTF-8, so it is left untranslated (an empty line); convert the text to "
                  "UTF-8 (e.g. with iconv).", file=sys.stderr)
            sentences.append("")
            status = 1
    return sentences, status


def run_evaluate(args: argparse.Namespace) -> int:
    from ..data.errors import DataError
    from ..data.parallel import read_parallel, write_lines
    from ..translation.checkpoint import CheckpointError
    from ..translation.corpus import load_corpus
    from ..translation.memory import MemoryLimitError
    from ..translation.scoring import score_hypotheses, translate_sources
    from ..translation.translator import beam_problem, load_translator_and_languages

    contradiction = _contradicting_options(args)
    if contradiction:
        print(f"minitransformer evaluate: {contradiction}", file=sys.stderr)
        return 2
    if not args.data and not (args.src and args.ref):
        print("minitransformer evaluate: give --src and --ref, or --data.", file=sys.stderr)
        return 2
    if args.n_best is not None and args.n_best > args.beam:
        print(f"minitransformer evaluate: --n-best {args.n_best} is more than --beam "
              f"{args.beam}, and the search keeps only {args.beam} hypotheses; give --beam "
              f"{args.n_best} or more, or a smaller --n-best.", file=sys.stderr)
        return 2
    try:
        model, tokenizer, trained = load_translator_and_languages(args.checkpoint)
        if beam_problem(model.config.tgt_vocab_size, args.beam):
            raise DataError(beam_problem(model.config.tgt_vocab_size, args.beam))
        graphs = _decoding_graphs(model, args)
        if args.data:
            split = args.split or "test"
            corpus = load_corpus(args.data, *_direction(args, trained), splits=[split])
            pairs = getattr(corpus, split)
        else:
            pairs = read_parallel(args.src, args.ref)
        inputs = {"--checkpoint": args.checkpoint, "--src": args.src, "--ref": args.ref}
        if args.data and args.data != "builtin":  # the split's two files
            inputs.update({f"--data's {name}": str(Path(args.data) / name)
                           for lang in (corpus.src_lang, corpus.tgt_lang)
                           for name in (f"{split}.{lang}", f"{split}.{lang}.gz")})
        check_output(args.output, inputs)
    except (CheckpointError, DataError) as exc:
        print(f"minitransformer evaluate: {exc}", file=sys.stderr)
        return 2
    try:
        hypotheses, lists = translate_sources(model, tokenizer, [s for s, _ in pairs],
                                              args.beam, args.length_penalty, args.batch_size,
                                              args.n_best, graphs)
    except MemoryLimitError as exc:  # not even one sentence fits (a smaller batch would)
        print(f"minitransformer evaluate: {exc}", file=sys.stderr)
        return 2
    result = score_hypotheses(hypotheses, [t for _, t in pairs], args.beam, args.n_best, lists)
    status = 0
    if args.output and standard_output(args.output):  # /dev/stdout: before the scores
        to_standard_output("".join(h + "\n" for h in hypotheses).encode("utf-8"))
    elif args.output:
        try:
            write_lines(args.output, hypotheses)
        except OSError as exc:  # a full disk: the scores are still worth having
            print(f"minitransformer evaluate: could not write --output {args.output} "
                  f"({exc.strerror or exc}); it is left as it was, and the scores follow.",
                  file=sys.stderr)
            status = 1
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"BLEU = {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF = {result['chrf']:.2f}  ({result['chrf_signature']})")
        if args.n_best is not None:
            print(f"oracle BLEU of the {args.n_best} best = {result['oracle_bleu']:.2f}  (for "
                  "each sentence the hypothesis closest to its reference by sentence BLEU)")
    return status


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
