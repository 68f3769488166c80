"""``minitransformer data``: fetch Multi30k or write the built-in task to a folder."""

from __future__ import annotations

import argparse
import sys

from .values import at_least


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "data", help="download Multi30k or write the built-in task",
        description="Prepare a folder of parallel text that `minitransformer train --data DIR` "
                    "reads.")
    which = p.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    m = which.add_parser(
        "multi30k", help="download Multi30k task 1 (German-English image captions)",
        description="Download the Multi30k task-1 raw files (train, val, test_2016_flickr; de "
                    "and en) from the dataset's public repository into --dest and verify "
                    "their checksums. Files already present and valid are kept.")
    m.add_argument("--dest", required=True, help="folder to write the six .gz files into")
    m.add_argument("--base-url", help="another mirror of data/task1/raw/ (default: the "
                                      "dataset's GitHub repository)")
    m.set_defaults(run=run_multi30k)
    b = which.add_parser(
        "builtin", help="write the built-in translation task as text files",
        description="Generate the built-in task from a seed and write train/valid/test files, "
                    "to read them or to train on them like any other corpus.")
    b.add_argument("--dest", required=True, help="folder to write the files into")
    b.add_argument("--seed", type=at_least(0), default=0, help="generator seed (default 0)")
    b.set_defaults(run=run_builtin)


def run_multi30k(args: argparse.Namespace) -> int:
    """Exit status 2 for a --dest or --base-url that cannot work (the input), 1 for a download
    that failed (the network, or a server whose file does not verify: retrying may help)."""
    from pathlib import Path
    from urllib.parse import urlsplit

    from ..data.errors import DataError
    from ..data.multi30k import DEFAULT_BASE_URL, download_multi30k

    base_url = args.base_url or DEFAULT_BASE_URL
    try:
        parts = urlsplit(base_url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # "http://[::1": an address that cannot be parsed
        valid = False
    if not valid:
        print(f"minitransformer data multi30k: --base-url {base_url} is not an http:// or "
              "https:// address; give the URL of a folder that holds the six .gz files.",
              file=sys.stderr)
        return 2
    dest = Path(args.dest).expanduser()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        folder = download_multi30k(dest, base_url)
    except OSError as exc:  # --dest is a file, or a place that cannot be written
        print(f"minitransformer data multi30k: cannot write into --dest {args.dest} "
              f"({exc.strerror or exc}); give a folder that can be created or written.",
              file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"minitransformer data multi30k: {exc}", file=sys.stderr)
        return 1
    print(f"Multi30k is in {folder}; train with: minitransformer train --data {folder}")
    return 0


def run_builtin(args: argparse.Namespace) -> int:
    """Exit status 2 for a --dest where the files cannot be written; the folder then holds
    what it held before (the six files are written whole or not at all)."""
    from ..data.builtin import write_task
    from ..data.errors import DataError

    try:
        write_task(args.dest, seed=args.seed)
    except DataError as exc:  # a folder where one of the files goes
        print(f"minitransformer data builtin: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # --dest is a file, a place that cannot be written, a full disk
        print(f"minitransformer data builtin: cannot write into --dest {args.dest} "
              f"({exc.strerror or exc}), so no file there was changed; give a folder that can "
              "be created or written, with room for the task (about 2.5 MB).", file=sys.stderr)
        return 2
    print(f"wrote the built-in task to {args.dest}")
    return 0
