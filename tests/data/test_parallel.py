"""Reading parallel text (plain and gzip'ed), its DataErrors, and encoding with filtering;
writing lines and sets of files whole."""

import gzip
import re
from pathlib import Path

import pytest

from minitransformer.data import DataError, Tokenizer, encode_pairs, read_lines, read_parallel
from minitransformer.data.parallel import write_files, write_lines

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"

LINES = ["Ein Hund läuft über die Straße.", "  zwei  Leerzeichen bleiben ", "", "Ende!"]


def write(path: Path, text: str, compress: bool = False) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_plain_and_gzip_read_the_same(tmp_path):
    text = "\n".join(LINES) + "\n"
    plain = read_lines(write(tmp_path / "a.txt", text))
    gz = read_lines(write(tmp_path / "a.txt.gz", text, compress=True))
    magic_only = read_lines(write(tmp_path / "a.bin", text, compress=True))  # no .gz suffix
    assert plain == gz == magic_only == LINES


def test_only_the_newline_is_stripped(tmp_path):
    assert read_lines(write(tmp_path / "a.txt", "eins \nzwei")) == ["eins ", "zwei"]
    assert read_lines(write(tmp_path / "b.txt", "eins\r\nzwei\r\n")) == ["eins", "zwei"]
    assert read_lines(write(tmp_path / "c.txt", "\n\n")) == ["", ""]
    assert read_lines(write(tmp_path / "d.txt", "\ufeffeins\n")) == ["eins"]  # BOM dropped


def test_unicode_line_separators_do_not_split_a_sentence(tmp_path):
    # str.splitlines would cut these lines and shift every later pair out of alignment
    text = "a\u2028b\nc\x0cd\x1ce\n"
    assert read_lines(write(tmp_path / "a.txt", text)) == ["a\u2028b", "c\x0cd\x1ce"]


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"nowhere\.de does not exist"):
        read_lines(tmp_path / "nowhere.de")


def test_unreadable_file(tmp_path):
    with pytest.raises(DataError, match=f"{re.escape(str(tmp_path))} could not be read"):
        read_lines(tmp_path)  # a directory


@pytest.mark.parametrize("compress", [False, True])
def test_empty_file(tmp_path, compress):
    path = write(tmp_path / ("empty.gz" if compress else "empty.txt"), "", compress)
    with pytest.raises(DataError, match=rf"{path.name} is empty"):
        read_lines(path)


def test_empty_gz_without_content(tmp_path):
    path = tmp_path / "zero.gz"
    path.write_bytes(b"")
    with pytest.raises(DataError, match="zero.gz is empty"):
        read_lines(path)


def test_truncated_gzip(tmp_path):
    path = tmp_path / "cut.de.gz"
    path.write_bytes(gzip.compress(("ein Satz\n" * 100).encode())[:30])
    with pytest.raises(DataError, match=r"cut\.de\.gz is not a complete gzip file"):
        read_lines(path)


@pytest.mark.parametrize("compress", [False, True])
def test_non_utf8_line_names_file_and_line(tmp_path, compress):
    data = b"eins\nzwei\n" + "drei Bär\n".encode("latin-1") + b"vier\n"
    path = tmp_path / ("latin.de.gz" if compress else "latin.de")
    path.write_bytes(gzip.compress(data) if compress else data)
    with pytest.raises(DataError, match=rf"{path.name}: line 3 is not valid UTF-8") as info:
        read_lines(path)
    assert str(path) in str(info.value) and "iconv" in str(info.value)


def test_read_parallel_pairs_lines(tmp_path):
    src = write(tmp_path / "train.de", "ein Hund\nzwei Katzen\n")
    tgt = write(tmp_path / "train.en.gz", "a dog\ntwo cats\n", compress=True)
    assert read_parallel(src, tgt) == [("ein Hund", "a dog"), ("zwei Katzen", "two cats")]


def test_mismatched_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.de", "a\nb\nc\n")
    tgt = write(tmp_path / "train.en", "a\nb\n")
    with pytest.raises(DataError) as info:
        read_parallel(src, tgt)
    message = str(info.value)
    assert f"{src} has 3 lines" in message and f"{tgt} has 2" in message


class WordTokenizer:
    """One id per whitespace-separated word: exact, known lengths for the filtering tests."""

    def encode_batch(self, texts):
        return [[4 + len(w) for w in text.split()] for text in texts]


def test_encode_pairs_filters_long_and_empty():
    pairs = [
        ("a b", "c"),            # kept
        ("a b c d", "e"),        # source too long
        ("a", "b c d e"),        # target too long
        ("", "x"),               # empty source
        ("x", "   "),            # target encodes to nothing
        ("a b c", "d e f"),      # exactly max_len: kept
    ]
    kept, dropped = encode_pairs(pairs, WordTokenizer(), max_len=3)
    assert dropped == 4
    assert kept == [([5, 5], [5]), ([5, 5, 5], [5, 5, 5])]
    kept, dropped = encode_pairs(pairs, WordTokenizer(), max_len=None)
    assert (len(kept), dropped) == (4, 2)


def test_encode_kept_counts_empty_and_long_pairs_apart():
    from minitransformer.data.parallel import Dropped, encode_kept
    pairs = [
        ("a b", "c"),            # kept
        ("a b c d", "e"),        # source too long
        ("", "x"),               # empty source
        ("x", "   "),            # target encodes to nothing
        ("", "a b c d"),         # empty and too long: counted as empty
        ("a b c", "d e f"),      # kept
    ]
    kept, positions, dropped = encode_kept(pairs, WordTokenizer(), max_len=3)
    assert dropped == Dropped(empty=3, too_long=1) and dropped.total == 4
    assert positions == [0, 5] and kept == [([5, 5], [5]), ([5, 5, 5], [5, 5, 5])]
    _, _, dropped = encode_kept(pairs, WordTokenizer(), max_len=None)
    assert dropped == Dropped(empty=3, too_long=0)


def test_encode_pairs_with_a_real_tokenizer():
    pairs = [("ein Hund läuft", "a dog runs"), ("zwei Katzen", "two cats"), ("", "nothing")]
    tok = Tokenizer.train([s for pair in pairs for s in pair], vocab_size=40)
    kept, dropped = encode_pairs(iter(pairs), tok, max_len=50)
    assert dropped == 1
    assert [(tok.decode(s), tok.decode(t)) for s, t in kept] == pairs[:2]


@pytest.mark.parametrize("max_len", [0, -1, 2.5, True])
def test_encode_pairs_rejects_bad_max_len(max_len):
    with pytest.raises(DataError, match="max_len must be a positive integer"):
        encode_pairs([("a", "b")], WordTokenizer(), max_len=max_len)


@pytest.mark.parametrize("split, n", [("train", 29000), ("val", 1014),
                                      ("test_2016_flickr", 1000)])
def test_multi30k_splits(split, n):
    if not (MULTI30K / f"{split}.de.gz").exists():
        pytest.skip(f"Multi30k not found in {MULTI30K}")
    pairs = read_parallel(MULTI30K / f"{split}.de.gz", MULTI30K / f"{split}.en.gz")
    assert len(pairs) == n
    assert all(de.strip() and en.strip() for de, en in pairs)


@pytest.mark.parametrize("src, tgt, direction", [
    (None, None, ("de", "en")), ("de", None, ("de", "en")), ("en", None, ("en", "de")),
    (None, "en", ("de", "en")), (None, "de", ("en", "de")),
])
def test_a_german_english_folder_reads_the_direction_from_either_side(tmp_path, src, tgt,
                                                                       direction):
    from minitransformer.translation.corpus import load_corpus
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text(f"{lang} {split}\n", encoding="utf-8")
    corpus = load_corpus(tmp_path, src, tgt)
    assert (corpus.src_lang, corpus.tgt_lang) == direction
    assert corpus.train[0] == (f"{direction[0]} train", f"{direction[1]} train")


def test_two_names_of_one_file_are_refused_before_anything_is_written(tmp_path):
    (tmp_path / "a.txt").write_text("kept\n")
    (tmp_path / "b.txt").symlink_to("a.txt")
    with pytest.raises(DataError, match="is the same file as another"):
        write_files({tmp_path / "a.txt": b"one\n", tmp_path / "b.txt": b"two\n"}, "the test")
    assert (tmp_path / "a.txt").read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_write_lines_keeps_a_link_and_the_file_s_permissions(tmp_path):
    (tmp_path / "real.txt").write_text("old\n")
    (tmp_path / "real.txt").chmod(0o640)
    (tmp_path / "link.txt").symlink_to("real.txt")
    write_lines(tmp_path / "link.txt", ["ka", "lo"])
    assert (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "ka\nlo\n"
    assert (tmp_path / "real.txt").stat().st_mode & 0o777 == 0o640
