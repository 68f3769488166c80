"""Argument types that refuse impossible values while parsing, so that a bad number stops the
command at once with argparse's one-line error (``argument --beam: must be a whole number of
at least 1, got 0``) rather than hours later, deep inside training or decoding; and text
from the command line or standard input that was not UTF-8 (``check_utf8``)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable


def _number(text: str, kind: type) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def at_least(low: int) -> Callable[[str], int]:
    """A whole number >= ``low``."""
    def parse(text: str) -> int:
        value = _number(text, int)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least {low}, "
                                             f"got {value}")
        return value
    return parse


def between(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``: for sizes whose work or memory grows with
    them, where a larger value would run for hours or allocate what no machine has."""
    def parse(text: str) -> int:
        value = _number(text, int)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high:,}, "
                                             f"got {value}")
        return value
    return parse


def finite_float(text: str) -> float:
    """Any finite number (nan or inf would go through every comparison unnoticed)."""
    return _number(text, float)


def positive_float(text: str) -> float:
    """A number > 0."""
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value:g}")
    return value


def probability(text: str) -> float:
    """A number p with 0 <= p < 1 (a dropout rate, a label-smoothing ε)."""
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must satisfy 0 <= value < 1, got {value:g}")
    return value


LANGUAGE_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


def language_code(text: str) -> str:
    """A language suffix of corpus files ({split}.{lang}: de, en, pt_BR, zh-Hans): letters,
    digits, - and _, at most 32 characters (a longer one made a file name the system refuses,
    a "/" would leave the --data folder)."""
    if not LANGUAGE_CODE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"must be a language code of letters, digits, - and _ (at most 32 characters, "
            f"such as de or en), got {text[:40]!r}{'...' if len(text) > 40 else ''}")
    return text


# A SentencePiece BPE vocabulary holds the tokenizer's 4 special pieces (pad, unk, bos, eos),
# the word boundary "▁" and at least one character: 6 pieces at the least. The largest is far
# above any vocabulary in use (the paper's are 37,000 and 32,000), below sizes whose embedding
# tables alone would not fit in memory.
SMALLEST_VOCABULARY, LARGEST_VOCABULARY = 6, 1_000_000


def vocabulary_size(text: str) -> int:
    """A BPE vocabulary size SentencePiece can build, within reason."""
    value = _number(text, int)
    if not SMALLEST_VOCABULARY <= value <= LARGEST_VOCABULARY:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from {SMALLEST_VOCABULARY} (the 4 special pieces, the word "
            f"boundary and one character) to {LARGEST_VOCABULARY:,}, got {value}")
    return value


def check_utf8(sentences: list[str], source: str) -> None:
    """Refuse text that was not UTF-8: Python keeps such bytes as lone surrogates, which
    SentencePiece cannot take."""
    from ..data.errors import DataError

    for number, sentence in enumerate(sentences, 1):
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(f"sentence {number} of {source} is not valid UTF-8; convert the "
                            "text to UTF-8 (e.g. with iconv) and try again.") from None
