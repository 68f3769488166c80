"""``minitransformer info``: a named configuration's layers and parameter count."""

from __future__ import annotations

import argparse
import json
import sys

from .values import vocabulary_size

PAPER_PARAMETERS = {"base": "65M", "big": "213M"}


def add_parser(commands: argparse._SubParsersAction) -> None:
    info = commands.add_parser(
        "info",
        help="print a configuration's layers and parameter count",
        description="Build the model of a named configuration (Table 3 sizes: tiny, small, "
                    "base, big) for a vocabulary size and print one row per part and layer "
                    "with its parameter count. Shared embeddings are counted once.",
    )
    info.add_argument("--config", default="base", help="tiny, small, base or big (default base)")
    info.add_argument("--vocab-size", type=vocabulary_size, default=37000,
                      help="shared source/target vocabulary size (default 37000, the paper's "
                           "English-German BPE vocabulary)")
    info.add_argument("--json", action="store_true",
                      help="print the configuration, rows and num_parameters as JSON")
    info.set_defaults(run=run, device=None)


def run(args: argparse.Namespace) -> int:
    from ..nn import NAMED_CONFIGS, Transformer, TransformerConfig
    from ..nn.summary import format_table, layer_table

    if args.config not in NAMED_CONFIGS:
        print(f"minitransformer info: unknown configuration {args.config!r}; choose one of "
              f"{', '.join(NAMED_CONFIGS)}.", file=sys.stderr)
        return 2
    config = TransformerConfig.named(args.config, args.vocab_size)
    try:
        model = Transformer(config)
    except MemoryError:
        print(f"minitransformer info: the '{args.config}' model with a vocabulary of "
              f"{args.vocab_size:,} does not fit in this machine's memory; give a smaller "
              "--vocab-size or --config.", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"config": args.config, "settings": config.to_dict(),
                          "num_parameters": model.num_parameters(),
                          "layers": layer_table(model)}, indent=1))
        return 0
    c = config
    title = (f"Transformer '{args.config}': vocabulary {c.src_vocab_size:,} (shared), "
             f"N={c.n_layers}, d_model={c.d_model}, d_ff={c.d_ff}, h={c.n_heads}, "
             f"P_drop={c.p_dropout}, {'pre' if c.pre_norm else 'post'}-LN\n")
    print(format_table(model, title))
    if args.config in PAPER_PARAMETERS:
        print(f"(Table 3 of the paper reports {PAPER_PARAMETERS[args.config]} for this size)")
    return 0
