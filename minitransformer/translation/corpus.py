"""Parallel corpora on disk or built in, turned into token ids for training.

A corpus folder holds aligned files ``{split}.{lang}`` (plain or ``.gz``), one sentence per
line, with the splits named ``train``, ``valid`` (or ``val``, ``dev``) and ``test`` (or
``test_2016_flickr``, the Multi30k test set). ``minitransformer data multi30k --dest DIR``
writes exactly such a folder; ``load_corpus("builtin")`` generates the built-in task instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..data.builtin import SOURCE_LANGUAGE, TARGET_LANGUAGE, builtin_task
from ..data.errors import DataError
from ..data.parallel import Dropped, encode_kept, read_parallel
from ..data.tokenizer import Tokenizer
from ..nn.config import TransformerConfig
from .training import TranslationData

POSITIONS = TransformerConfig.max_len  # the default positional table (1024 positions)

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
                seed: int = 0, splits: Iterable[str] = tuple(SPLIT_NAMES)) -> Corpus:
    """``"builtin"`` (generated from ``seed``) or a folder of ``{split}.{lang}`` files.

    Languages given for the built-in task must be its own (en -> vel): it has no other.

    Only the ``splits`` named are read (``("test",)`` to score a model: the other splits'
    files need not exist, and are left empty in the Corpus); the direction, unless given, is
    read from the languages of those splits' files.
    """
    splits = tuple(splits)
    unknown = [split for split in splits if split not in SPLIT_NAMES]
    if unknown or not splits:
        raise ValueError(f"splits must name some of {', '.join(SPLIT_NAMES)}, got {splits!r}.")
    if source == "builtin":
        for flag, given, builtin in (("--src-lang", src_lang, SOURCE_LANGUAGE),
                                     ("--tgt-lang", tgt_lang, TARGET_LANGUAGE)):
            if given and given != builtin:
                raise DataError(f"{flag} {given} does not fit the built-in task, which "
                                f"translates {SOURCE_LANGUAGE} to {TARGET_LANGUAGE}; leave "
                                f"{flag} out, or give --data a folder of {given} files.")
        generated = builtin_task(seed)
        return Corpus("builtin", SOURCE_LANGUAGE, TARGET_LANGUAGE,
                      **{split: generated[split] if split in splits else []
                         for split in SPLIT_NAMES})
    folder = Path(source)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder: give --data builtin or a folder of "
                        "{split}.{lang} files (minitransformer data multi30k --dest DIR "
                        "makes one).")
    src_lang, tgt_lang = _languages(folder, splits, src_lang, tgt_lang)
    pairs = {split: read_parallel(_split_file(folder, split, src_lang),
                                  _split_file(folder, split, tgt_lang)) if split in splits
             else [] for split in SPLIT_NAMES}
    return Corpus(folder.name, src_lang, tgt_lang, **pairs)


def _split_file(folder: Path, split: str, lang: str) -> Path:
    for name in SPLIT_NAMES[split]:
        for candidate in (folder / f"{name}.{lang}", folder / f"{name}.{lang}.gz"):
            try:
                if candidate.is_file():
                    return candidate
            except OSError:  # a name the system refuses (too long): no such file
                continue
    if len(lang) > 40:
        raise DataError(f"{folder} has no {split} file for a language code of {len(lang):,} "
                        "characters; give a language code such as de or en.")
    tried = ", ".join(f"{n}.{lang}[.gz]" for n in SPLIT_NAMES[split])
    raise DataError(f"{folder} has no {split} file for language {lang!r} (looked for "
                    f"{tried}).")


def _split_languages(folder: Path, split: str) -> set[str]:
    """The languages of a split's files: ``de`` of ``val.de`` and of ``val.de.gz``."""
    return {path.name.split(".")[1] for name in SPLIT_NAMES[split]
            for path in folder.glob(f"{name}.*")
            if len(path.name.split(".")) == 2
            or len(path.name.split(".")) == 3 and path.name.endswith(".gz")}


def _languages(folder: Path, splits: tuple[str, ...], src: str | None,
               tgt: str | None) -> tuple[str, str]:
    """The given languages, or the two that every split read has files for (de -> en for
    Multi30k)."""
    if src and tgt:
        return src, tgt
    found = sorted(set.intersection(*(_split_languages(folder, split) for split in splits)))
    if set(found) == {"de", "en"}:  # Multi30k: de -> en, unless one side says otherwise
        if src:
            return src, tgt or ("en" if src == "de" else "de")
        return ("de" if tgt != "de" else "en"), tgt or "en"
    if len(found) == 2 and (src or tgt):
        other = [lang for lang in found if lang != (src or tgt)][0]
        return (src, other) if src else (other, tgt)
    raise DataError(f"cannot tell the translation direction in {folder} ({' and '.join(splits)} "
                    f"files for {', '.join(found) or 'no language'}); give --src-lang and "
                    "--tgt-lang.")


@dataclass
class Prepared:
    """What ``prepare_corpus`` makes: the tokenizer, the data, and how many training and
    validation pairs were dropped, and why."""

    tokenizer: Tokenizer
    data: TranslationData
    train_dropped: Dropped
    valid_dropped: Dropped


def check_max_len(max_len: int | None, positions: int = POSITIONS) -> None:
    """Refuse a ``max_len`` the model cannot encode: a target of max_len tokens takes
    max_len + 1 decoder positions (BOS or EOS), and the positional table has ``positions``."""
    if max_len is not None and max_len > positions - 1:
        raise DataError(f"--max-len {max_len} is more than the model can encode: its positional "
                        f"table has {positions} positions, so a sentence (with its BOS or EOS) "
                        f"can have at most {positions - 1} tokens; give --max-len "
                        f"{positions - 1} or less.")


def prepare_corpus(corpus: Corpus, vocab_size: int, max_len: int | None,
                   tokenizer: Tokenizer | None = None, positions: int = POSITIONS) -> Prepared:
    """Train a joint BPE tokenizer on the training text (unless given) and encode the
    training and validation pairs, dropping pairs with an empty side, training pairs longer
    than ``max_len`` tokens and validation pairs longer than the model can encode
    (``positions``, the length of its positional table, less one for BOS or EOS), each with
    their text."""
    check_max_len(max_len, positions)
    if tokenizer is None:
        text = [s for pair in corpus.train for s in pair]
        tokenizer = Tokenizer.train(text, vocab_size)
    train, _, train_dropped = encode_kept(corpus.train, tokenizer, max_len)
    valid, kept, valid_dropped = encode_kept(corpus.valid, tokenizer, positions - 1)
    data = TranslationData(train, valid, [corpus.valid[i][0] for i in kept],
                           [corpus.valid[i][1] for i in kept], corpus.src_lang, corpus.tgt_lang)
    return Prepared(tokenizer, data, train_dropped, valid_dropped)


def prepare(corpus: Corpus, vocab_size: int, max_len: int | None,
            tokenizer: Tokenizer | None = None) -> tuple[Tokenizer, TranslationData, int]:
    """``prepare_corpus`` for a model of the default positional table: the tokenizer, the
    data and how many training pairs were dropped (too long or with an empty side)."""
    prepared = prepare_corpus(corpus, vocab_size, max_len, tokenizer)
    return prepared.tokenizer, prepared.data, prepared.train_dropped.total
