"""``minitransformer plot``: the pictures of the course, as PNG (or SVG, PDF) files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .outputs import picture_out_refused, write_picture
from .values import at_least, between, check_utf8, positive_float, vocabulary_size

# plot model traces a real forward pass: 4 × (512 + 512) tokens of the `big` model took 10 s
# and 2.5 GB on a 2-core Xeon, 16 × (512 + 512) took 30 s and 7 GB
PICTURE_TOKENS = 4096


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "plot", help="draw the model, attention, positional encoding, schedule, curves, "
                     "gradient checks",
        description="Draw one picture and write it as a PNG (--out).")
    which = p.add_subparsers(dest="picture", metavar="PICTURE", required=True)

    m = which.add_parser(
        "model", help="the paper's Figure 1 drawn from a named configuration",
        description="Build the model of a named configuration and draw it as the paper's "
                    "Figure 1: the encoder and decoder stacks, each sub-layer with its residual "
                    "and LayerNorm, the masks, the shared embedding and the output projection, "
                    "labelled with the modules' names and the shapes of one batch of random "
                    "token ids.")
    m.add_argument("--config", default="small", help="tiny, small, base or big (default small)")
    m.add_argument("--vocab-size", type=vocabulary_size, default=37000,
                   help="shared vocabulary size (default 37000, as `info`)")
    m.add_argument("--batch", type=between(1, 64), default=2,
                   help="sentences B (default 2, at most 64)")
    m.add_argument("--src-len", type=at_least(1), default=7,
                   help="source length S (default 7)")
    m.add_argument("--tgt-len", type=at_least(1), default=6,
                   help="target length T (default 6)")
    m.add_argument("--all-layers", action="store_true",
                   help="draw every layer sub-layer by sub-layer (default: the first of each "
                        "stack, the others as one box each)")
    m.add_argument("--out", type=picture_file, default="model.png",
                   help="picture to write (.png, .svg, .pdf, ...)")
    m.set_defaults(run=run_model)

    a = which.add_parser("attention", help="attention heatmaps of one translated sentence")
    a.add_argument("sentence", help="the source sentence")
    a.add_argument("--checkpoint", required=True, help="a checkpoint written by `train`")
    a.add_argument("--kind", choices=["encoder", "decoder", "cross"], default="cross",
                   help="encoder self-, decoder self- or cross-attention (default cross)")
    a.add_argument("--layer", type=int, default=-1, help="which layer (default: the last)")
    a.add_argument("--out", type=picture_file, default="attention.png", help="PNG to write")
    a.set_defaults(run=run_attention)

    e = which.add_parser("positions", help="the sinusoidal positional-encoding table")
    e.add_argument("--d-model", type=between(1, 4096), default=64,
                   help="dimensions (default 64, at most 4,096)")
    e.add_argument("--length", type=between(1, 10_000), default=100,
                   help="positions (default 100, at most 10,000)")
    e.add_argument("--out", type=picture_file, default="positions.png")
    e.set_defaults(run=run_positions)

    s = which.add_parser("schedule", help="the learning-rate schedule of §5.3")
    s.add_argument("--d-model", type=at_least(1), default=512, help="d_model (default 512)")
    s.add_argument("--warmup", type=at_least(1), default=4000, help="warmup steps (default 4000)")
    s.add_argument("--scale", type=positive_float, default=1.0,
                   help="factor on the rate (default 1.0)")
    s.add_argument("--steps", type=between(1, 1_000_000), default=20000,
                   help="steps drawn (default 20000, at most 1,000,000)")
    s.add_argument("--out", type=picture_file, default="schedule.png")
    s.set_defaults(run=run_schedule)

    c = which.add_parser("curves", help="training and validation curves from a run's log")
    c.add_argument("log", help="a run's log.jsonl")
    c.add_argument("--out", type=picture_file, default="curves.png")
    c.set_defaults(run=run_curves)

    g = which.add_parser("gradcheck", help="the gradient-check errors of every row")
    g.add_argument("--filter", metavar="TEXT", help="only the cases whose name contains TEXT")
    g.add_argument("--out", type=picture_file, default="gradcheck.png")
    g.set_defaults(run=run_gradcheck)


def picture_file(text: str) -> str:
    """An --out whose suffix names a format matplotlib writes, checked before any work: an
    unknown suffix failed only at the end, and without one matplotlib wrote NAME.png."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(text).suffix[1:].lower() not in formats:
        raise argparse.ArgumentTypeError(
            f"must be a file name ending in .png (or another picture format: "
            f"{', '.join(sorted(formats))}), got {text!r}")
    return text


def _matplotlib() -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no window needed


def run_model(args: argparse.Namespace) -> int:
    from .. import viz
    from ..nn import NAMED_CONFIGS, TransformerConfig

    if picture_out_refused(args):
        return 2
    if args.config not in NAMED_CONFIGS:
        print(f"minitransformer plot model: unknown configuration {args.config!r}; choose one "
              f"of {', '.join(NAMED_CONFIGS)}.", file=sys.stderr)
        return 2
    config = TransformerConfig.named(args.config, args.vocab_size)
    longest = max(args.src_len, args.tgt_len)
    if longest > config.max_len:
        print(f"minitransformer plot model: a length of {longest} is longer than the model's "
              f"positional table ({config.max_len} positions); give --src-len and --tgt-len of "
              f"at most {config.max_len}.", file=sys.stderr)
        return 2
    tokens = args.batch * (args.src_len + args.tgt_len)
    if tokens > PICTURE_TOKENS:  # the picture is drawn from a real forward pass
        print(f"minitransformer plot model: a batch of {args.batch} × ({args.src_len} + "
              f"{args.tgt_len}) = {tokens:,} tokens is more than the {PICTURE_TOKENS:,} a "
              "picture's forward pass takes (its shapes are labels); give a smaller --batch, "
              "--src-len or --tgt-len.", file=sys.stderr)
        return 2
    _matplotlib()
    try:
        return write_picture(args, lambda: viz.draw_model(
            config, batch=(args.batch, args.src_len, args.tgt_len),
            layers_in_full=None if args.all_layers else 1, path=args.out))
    except MemoryError:
        print(f"minitransformer plot model: the '{args.config}' model with a vocabulary of "
              f"{args.vocab_size:,} and this batch do not fit in this machine's memory; give "
              "a smaller --vocab-size, --batch or --config.", file=sys.stderr)
        return 2


def run_attention(args: argparse.Namespace) -> int:
    from .. import no_grad, viz
    from ..data.errors import DataError
    from ..translation.alignment import cross_attention
    from ..translation.checkpoint import CheckpointError
    from ..translation.decode import greedy_decode
    from ..translation.translator import load_translator

    if picture_out_refused(args):
        return 2
    _matplotlib()
    try:
        check_utf8([args.sentence], "the command line")  # SentencePiece cannot take it
        model, tokenizer = load_translator(args.checkpoint)
    except (CheckpointError, DataError) as exc:
        print(f"minitransformer plot attention: {exc}", file=sys.stderr)
        return 2
    model.eval()
    stack = model.encoder.layers if args.kind == "encoder" else model.decoder.layers
    if not -len(stack) <= args.layer < len(stack):
        print(f"minitransformer plot attention: --layer {args.layer} does not exist; the model "
              f"has {len(stack)} layers (0..{len(stack) - 1}, or -1 for the last).",
              file=sys.stderr)
        return 2
    layer = stack[args.layer]
    attention = {"encoder": getattr(layer, "self_attn", None), "decoder": layer.self_attn,
                 "cross": getattr(layer, "cross_attn", None)}[args.kind]
    src_ids = tokenizer.encode(args.sentence) or [tokenizer.unk_id]
    longest = model.config.max_len - 1  # as translate: the positional table ends there
    if len(src_ids) > longest:
        print(f"warning: the sentence's {len(src_ids)} tokens were cut to {longest}, the "
              "model's longest input.", file=sys.stderr)
        src_ids = src_ids[:longest]
    # the ids the model generated (greedy), not its text encoded again: re-encoding can split
    # the words otherwise, and the rows would belong to a sequence the model never produced
    [best] = greedy_decode(model, [src_ids], tokenizer.bos_id, tokenizer.eos_id, n_best=1)[0]
    out_ids = best.tokens[:40]
    source = [tokenizer.id_to_piece(i) for i in src_ids]
    if args.kind == "cross":  # rows: the tokens generated, as translate --alignment reads them
        generated = [*out_ids, *[tokenizer.eos_id] * (best.finished and len(best.tokens) <= 40)]
        [weights] = cross_attention(model, [src_ids], [generated], tokenizer.bos_id, args.layer)
        output = [tokenizer.id_to_piece(i) for i in generated]
        return write_picture(args, lambda: viz.attention_heads(
            weights, output, source, average=True,
            title=f"cross-attention, layer {args.layer % len(stack)} of {len(stack)}: each "
                  "generated token (row) looks at the source (columns)", path=args.out))
    attention.record_weights = True
    with no_grad():
        model([src_ids], [[tokenizer.bos_id, *out_ids]])
    attention.record_weights = False
    output = ["<s>", *(tokenizer.id_to_piece(i) for i in out_ids)]
    queries, keys = {"encoder": (source, source), "decoder": (output, output)}[args.kind]
    return write_picture(args, lambda: viz.attention_heads(
        attention.weights.numpy()[0], queries, keys,
        title=f"{args.kind} attention, layer {args.layer % len(stack)} of {len(stack)}: rows "
              "look at columns", path=args.out))


def run_positions(args: argparse.Namespace) -> int:
    from .. import viz

    if picture_out_refused(args):
        return 2
    _matplotlib()
    return write_picture(args, lambda: viz.positional_encoding(args.d_model, args.length,
                                                        path=args.out))


def run_schedule(args: argparse.Namespace) -> int:
    from .. import viz
    from ..optim import noam_rate

    if picture_out_refused(args):
        return 2
    _matplotlib()
    rates = [noam_rate(step, args.d_model, args.warmup, args.scale)
             for step in range(1, args.steps + 1)]
    return write_picture(args, lambda: viz.schedule(
        rates, title=f"d_model {args.d_model}, warmup {args.warmup}, scale {args.scale}",
        path=args.out))


def run_curves(args: argparse.Namespace) -> int:
    from .. import viz

    if picture_out_refused(args):
        return 2
    if not Path(args.log).is_file():
        print(f"minitransformer plot curves: no log at {args.log}; a run writes "
              "RUN/log.jsonl.", file=sys.stderr)
        return 2
    problem = _log_problem(Path(args.log))
    if problem:
        print(f"minitransformer plot curves: {problem}", file=sys.stderr)
        return 2
    _matplotlib()
    return write_picture(args, lambda: viz.training_curves(args.log, path=args.out))


def _log_problem(log: Path) -> str | None:
    """Why ``log`` is not a run's log.jsonl (one JSON object per line, a training record with
    "step" and "loss", a validation record with "validation": {"step", "valid_loss"}), or
    None if it is one."""
    import json

    fix = "give the log.jsonl that `minitransformer train` writes in its run folder."
    try:
        lines = log.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return f"{log} is not a text file; {fix}"
    except OSError as exc:
        return f"{log} could not be read ({exc.strerror or exc}); {fix}"
    records = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except ValueError:
            return f"{log}: line {number} is not JSON, so this is not a run's log; {fix}"
        validation = record.get("validation") if isinstance(record, dict) else None
        if not isinstance(record, dict) or (
                "loss" in record and not _numbers(record, "step", "loss")) or (
                "validation" in record and not _numbers(validation, "step", "valid_loss")):
            return (f"{log}: line {number} is not a training or validation record of a run's "
                    f"log; {fix}")
        records += "loss" in record or "validation" in record
    if not records:
        return f"{log} holds no training or validation records, so there is nothing to draw; {fix}"
    return None


def _numbers(record: Any, *keys: str) -> bool:
    return isinstance(record, dict) and all(
        isinstance(record.get(key), int | float) and not isinstance(record.get(key), bool)
        for key in keys)


def run_gradcheck(args: argparse.Namespace) -> int:
    from .. import viz
    from ..verify.module_cases import full_suite

    if picture_out_refused(args):
        return 2
    _matplotlib()
    rows = []
    for case, run in full_suite(args.filter):
        report = run(case)
        rows.append({"name": report.name, "shapes": report.shapes,
                     "max_rel_error": report.max_rel_error, "passed": report.passed})
    if not rows:
        print(f"minitransformer plot gradcheck: no case name contains {args.filter!r}.",
              file=sys.stderr)
        return 2
    return write_picture(args, lambda: viz.gradcheck_errors(rows, path=args.out))
