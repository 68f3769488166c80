"""Parallel corpora on disk or built in, turned into token ids for training.

A corpus folder holds aligned files ``{split}.{lang}`` (plain or ``.gz``), one sentence per
line, with the splits named ``train``, ``valid`` (or ``val``, ``dev``) and ``test`` (or
``test_2016_flickr``, the Multi30k test set). ``minitransformer data multi30k --dest DIR``
writes exactly such a folder; ``load_corpus("builtin")`` generates the built-in task instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .data.builtin import SOURCE_LANGUAGE, TARGET_LANGUAGE, builtin_task
from .data.errors import DataError
from .data.parallel import encode_pairs, read_parallel
from .data.tokenizer import Tokenizer
from .train import TranslationData

SPLIT_NAMES = {"train": ("train",), "valid": ("valid", "val", "dev"),
               "test": ("test", "test_2016_flickr")}


@dataclass
class Corpus:
    name: str
    src_lang: str
    tgt_lang: str
    train: list[tuple[str, str]]
    valid: list[tuple[str, str]]
    test: list[tuple[str, str]]


def load_corpus(source: str, src_lang: str | None = None, tgt_lang: str | None = None,
                seed: int = 0) -> Corpus:
    """``"builtin"`` (generated from ``seed``) or a folder of ``{split}.{lang}`` files."""
    if source == "builtin":
        splits = builtin_task(seed)
        return Corpus("builtin", SOURCE_LANGUAGE, TARGET_LANGUAGE, splits["train"],
                      splits["valid"], splits["test"])
    folder = Path(source)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder: give --data builtin or a folder of "
                        "{split}.{lang} files (minitransformer data multi30k --dest DIR "
                        "makes one).")
    src_lang, tgt_lang = _languages(folder, src_lang, tgt_lang)
    splits = {split: read_parallel(_split_file(folder, split, src_lang),
                                   _split_file(folder, split, tgt_lang))
              for split in SPLIT_NAMES}
    return Corpus(folder.name, src_lang, tgt_lang, splits["train"], splits["valid"],
                  splits["test"])


def _split_file(folder: Path, split: str, lang: str) -> Path:
    for name in SPLIT_NAMES[split]:
        for candidate in (folder / f"{name}.{lang}", folder / f"{name}.{lang}.gz"):
            if candidate.is_file():
                return candidate
    tried = ", ".join(f"{n}.{lang}[.gz]" for n in SPLIT_NAMES[split])
    raise DataError(f"{folder} has no {split} file for language {lang!r} (looked for "
                    f"{tried}).")


def _languages(folder: Path, src: str | None, tgt: str | None) -> tuple[str, str]:
    """The given languages, or the two found beside the train files (de -> en for Multi30k)."""
    if src and tgt:
        return src, tgt
    found = sorted({p.name.split(".")[1] for p in folder.glob("train.*")
                    if len(p.name.split(".")) >= 2})
    if set(found) == {"de", "en"}:  # Multi30k: de -> en, unless one side says otherwise
        if src:
            return src, tgt or ("en" if src == "de" else "de")
        return ("de" if tgt != "de" else "en"), tgt or "en"
    if len(found) == 2 and (src or tgt):
        other = [lang for lang in found if lang != (src or tgt)][0]
        return (src, other) if src else (other, tgt)
    raise DataError(f"cannot tell the translation direction in {folder} (train files for "
                    f"{found or 'no language'}); give --src-lang and --tgt-lang.")


def prepare(corpus: Corpus, vocab_size: int, max_len: int | None,
            tokenizer: Tokenizer | None = None) -> tuple[Tokenizer, TranslationData, int]:
    """Train a joint BPE tokenizer on the training text (unless given) and encode the
    training and validation pairs, dropping pairs longer than ``max_len`` tokens. Returns the
    tokenizer, the data and how many training pairs were dropped."""
    if tokenizer is None:
        text = [s for pair in corpus.train for s in pair]
        tokenizer = Tokenizer.train(text, vocab_size)
    train, n_dropped = encode_pairs(corpus.train, tokenizer, max_len)
    valid, _ = encode_pairs(corpus.valid, tokenizer, None)
    data = TranslationData(train, valid, [s for s, _ in corpus.valid],
                           [t for _, t in corpus.valid])
    return tokenizer, data, n_dropped
