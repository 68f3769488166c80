"""Corpus folders: which splits are read, and the direction read from the files present."""

import pytest

from minitransformer.data import DataError
from minitransformer.translation.corpus import Corpus, check_max_len, load_corpus, prepare_corpus


def write_split(folder, split, langs=("de", "en"), text="{lang} {split}\n"):
    for lang in langs:
        (folder / f"{split}.{lang}").write_text(text.format(lang=lang, split=split),
                                                encoding="utf-8")


def test_only_the_splits_asked_for_are_read(tmp_path):
    write_split(tmp_path, "test")
    (tmp_path / "train.de.gz").write_bytes(b"\x1f\x8b not gzip")  # would fail if read
    corpus = load_corpus(tmp_path, splits=["test"])
    assert (corpus.src_lang, corpus.tgt_lang) == ("de", "en")
    assert corpus.test == [("de test", "en test")]
    assert corpus.train == [] and corpus.valid == []


def test_the_direction_comes_from_the_files_of_the_split_read(tmp_path):
    write_split(tmp_path, "valid", ("xx", "yy"))
    corpus = load_corpus(tmp_path, "yy", None, splits=["valid"])
    assert (corpus.src_lang, corpus.tgt_lang) == ("yy", "xx")
    assert corpus.valid == [("yy valid", "xx valid")]


def test_every_split_is_read_by_default(tmp_path):
    for split in ("train", "valid", "test"):
        write_split(tmp_path, split)
    corpus = load_corpus(tmp_path)
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [1, 1, 1]


def test_a_missing_split_asked_for_is_named(tmp_path):
    write_split(tmp_path, "test")
    with pytest.raises(DataError, match="no valid file for language 'de'"):
        load_corpus(tmp_path, "de", "en", splits=["valid"])
    with pytest.raises(DataError, match="cannot tell the translation direction"):
        load_corpus(tmp_path, splits=["valid"])


def test_a_language_code_too_long_for_a_file_name_is_no_file_of_the_folder(tmp_path):
    """test.aaa... of 5,000 letters is a name the system refuses (OSError ENAMETOOLONG)."""
    write_split(tmp_path, "test")
    with pytest.raises(DataError, match="has no test file for a language code of 5,000 "
                                        "characters; give a language code such as de or en"):
        load_corpus(tmp_path, "a" * 5000, "en", splits=["test"])


def test_the_builtin_task_keeps_only_the_splits_asked_for():
    corpus = load_corpus("builtin", splits=["test"])
    assert corpus.test and corpus.train == [] and corpus.valid == []


def test_the_builtin_task_accepts_its_own_languages_and_refuses_others():
    corpus = load_corpus("builtin", "en", "vel", splits=["valid"])
    assert (corpus.src_lang, corpus.tgt_lang) == ("en", "vel") and corpus.valid
    with pytest.raises(DataError, match="--src-lang vel does not fit the built-in task"):
        load_corpus("builtin", "vel", "en", splits=["valid"])


def test_validation_pairs_the_model_cannot_encode_are_dropped_with_their_text():
    train = [("ka lo mi", "MI LO KA"), ("nu pe", "PE NU")] * 20
    valid = [("ka lo", "LO KA"), ("ka " * 30, "KA " * 30), ("nu", "NU")]
    corpus = Corpus("toy", "xx", "yy", train, valid, [])
    prepared = prepare_corpus(corpus, 40, max_len=5, positions=12)
    assert prepared.valid_dropped.too_long == 1 and len(prepared.data.valid) == 2
    assert prepared.data.valid_sources == ["ka lo", "nu"]
    assert prepared.data.valid_references == ["LO KA", "NU"]


def test_a_max_len_the_positional_table_cannot_hold_is_refused():
    check_max_len(1023, 1024)
    with pytest.raises(DataError, match="--max-len 1024 is more than the model can encode: its "
                                        "positional table has 1024 positions"):
        check_max_len(1024, 1024)
