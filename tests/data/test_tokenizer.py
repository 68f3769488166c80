"""The SentencePiece tokenizer: round trips, fixed special ids, determinism, serialization,
and clear errors for bad models and vocabulary sizes that do not fit the text."""

import gzip
import io
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from minitransformer.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    DataError,
    Tokenizer,
    read_parallel,
)

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"

CORPUS = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "A man in an orange hat starring at something.",
    "Zwei junge Mädchen spielen im Schnee vor einem Geschäft.",
    "Two young girls play in the snow in front of a shop.",
    "Die Straße ist nass; ein Fußgänger überquert sie schnell!",
    "The street is wet; a pedestrian crosses it quickly!",
    "Größere Hunde laufen über die Wiese (bei Sonnenschein).",
    "Bigger dogs run across the meadow (in sunshine).",
    "Ärzte und Öffentlichkeit: „Wer ist schuld?“ – niemand.",
    "Doctors and the public: \"Who is to blame?\" - nobody.",
    "Ein Kind isst 3 Äpfel, 2 Birnen & 1 Orange.",
    "A child eats 3 apples, 2 pears & 1 orange.",
]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.train(CORPUS, vocab_size=150)


def test_round_trip_umlauts_and_punctuation(tok):
    for sentence in CORPUS:
        ids = tok.encode(sentence)
        assert ids and all(4 <= i < tok.vocab_size for i in ids)  # no special id, no unk
        assert tok.decode(ids) == sentence


def test_batch_versions_match_single(tok):
    ids = tok.encode_batch(CORPUS)
    assert ids == [tok.encode(s) for s in CORPUS]
    assert tok.decode_batch(ids) == CORPUS
    assert tok.encode_batch([]) == []


def test_empty_string_and_unknown_characters(tok):
    assert tok.encode("") == []
    assert tok.decode([]) == ""
    ids = tok.encode("Ein ✈ Hund")
    assert UNK_ID in ids
    assert "⁇" in tok.decode(ids)


def test_default_nmt_nfkc_normalization(tok):
    # decomposed "a + combining diaeresis" is composed, runs of whitespace collapse
    assert tok.decode(tok.encode("  Ma\u0308dchen \t spielen  ")) == "Mädchen spielen"


def test_special_ids_are_fixed(tok):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == 150


def test_decode_skips_pad_bos_eos_but_does_not_stop(tok):
    a, b = tok.encode(CORPUS[0]), tok.encode(CORPUS[1])
    assert tok.decode([BOS_ID, *a, EOS_ID, PAD_ID, PAD_ID]) == CORPUS[0]
    assert tok.decode([*a, EOS_ID, *b]) == tok.decode(a + b)


def test_decode_accepts_padded_array_rows(tok):
    ids = tok.encode(CORPUS[2])
    rows = np.zeros((2, len(ids) + 3), dtype=np.int64)
    rows[0, : len(ids) + 1] = [*ids, EOS_ID]
    assert tok.decode_batch(rows) == [CORPUS[2], ""]


def test_decode_rejects_ids_outside_vocabulary(tok):
    with pytest.raises(DataError, match="token id 150 is outside"):
        tok.decode([5, 150])
    with pytest.raises(DataError, match="token id -1"):
        tok.decode([-1])


def test_text_where_ids_belong_and_ids_where_text_belongs_are_refused(tok):
    """decode("567") once decoded the ids 5, 6 and 7, decode([1.7]) the id 1, and
    encode_batch("a sentence") encoded each character as a sentence, all silently."""
    with pytest.raises(TypeError, match=r"decode takes a list of token ids, got a str; encode "
                                        r"text with encode\(text\) first"):
        tok.decode("567")
    with pytest.raises(TypeError, match=r"token ids are integers, got 1\.7 \(a float\)"):
        tok.decode([5, 1.7])
    with pytest.raises(TypeError, match=r"encode_batch takes a list of sentences, got one str"):
        tok.encode_batch(CORPUS[0])
    with pytest.raises(TypeError, match=r"encode takes one sentence as a str, got a NoneType"):
        tok.encode(None)
    assert tok.decode(np.array(tok.encode(CORPUS[0]))) == CORPUS[0]  # NumPy ids still do


def test_id_to_piece_outside_the_vocabulary_names_the_range(tok):
    with pytest.raises(DataError, match=rf"token id {tok.vocab_size} is outside this "
                                        rf"tokenizer's vocabulary of {tok.vocab_size} pieces"):
        tok.id_to_piece(tok.vocab_size)


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_training_is_deterministic(model_type):
    first = Tokenizer.train(CORPUS, vocab_size=120, model_type=model_type)
    second = Tokenizer.train(iter(CORPUS), vocab_size=120, model_type=model_type)
    assert first.to_bytes() == second.to_bytes()
    assert first == second


def test_training_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Tokenizer.train(CORPUS, vocab_size=100)
    assert list(tmp_path.iterdir()) == []


def test_bytes_round_trip(tok):
    data = tok.to_bytes()
    assert isinstance(data, bytes) and data
    again = Tokenizer.from_bytes(data)
    assert again == tok and again.vocab_size == tok.vocab_size
    assert again.encode_batch(CORPUS) == tok.encode_batch(CORPUS)


def test_save_load_round_trip(tok, tmp_path):
    path = tmp_path / "spm.model"
    tok.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spm.model"]  # no .tmp left
    loaded = Tokenizer.load(str(path))
    assert loaded.to_bytes() == tok.to_bytes()
    assert loaded.decode(loaded.encode(CORPUS[4])) == CORPUS[4]


def test_load_missing_file(tmp_path):
    path = tmp_path / "nope.model"
    with pytest.raises(DataError, match=r"nope\.model does not exist"):
        Tokenizer.load(path)


def test_load_directory(tmp_path):
    with pytest.raises(DataError, match="could not be read"):
        Tokenizer.load(tmp_path)


@pytest.mark.parametrize("content", [b"", b"this is not a model\x00\xff", None])
def test_load_corrupt_file(tok, tmp_path, content):
    path = tmp_path / "broken.model"
    path.write_bytes(tok.to_bytes()[:100] if content is None else content)  # None: truncated
    with pytest.raises(DataError, match=r"broken\.model (is empty|is not a SentencePiece)"):
        Tokenizer.load(path)


def test_model_with_other_special_ids_is_refused():
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=writer,
                                   vocab_size=100, minloglevel=2)  # unk=0, bos=1, eos=2
    with pytest.raises(DataError, match=r"special ids .* \(0, 1, 2, 3\)"):
        Tokenizer.from_bytes(writer.getvalue())


def test_vocab_too_large_suggests_a_smaller_size():
    with pytest.raises(DataError, match=r"vocab_size=5000 is too large.*vocab_size <= \d+"):
        Tokenizer.train(CORPUS, vocab_size=5000)


def test_vocab_too_large_for_a_char_model():
    with pytest.raises(DataError, match=r"vocab_size=5000 does not fit a char model"):
        Tokenizer.train(CORPUS, vocab_size=5000, model_type="char")


def test_sentences_longer_than_sentencepieces_default_limit_are_used():
    # 5,600 bytes: past SentencePiece's default max_sentence_length of 4,192, which it
    # would skip without a word, leaving its characters unknown
    long_line = "Über Straße " * 400
    tok = Tokenizer.train(["the cat sat on the mat"] * 20 + [long_line], vocab_size=25)
    assert tok.decode(tok.encode("Über Straße")) == "Über Straße"
    alone = Tokenizer.train([long_line], vocab_size=20)
    assert alone.decode(alone.encode("Straße Über")) == "Straße Über"


def test_vocab_too_small_names_the_minimum():
    with pytest.raises(DataError, match=r"vocab_size=10 is too small.*vocab_size >= \d+"):
        Tokenizer.train(CORPUS, vocab_size=10)


def test_vocab_too_small_for_a_char_model_names_the_size():
    chars = len(set(unicodedata.normalize("NFKC", "".join(CORPUS)).replace(" ", "")))
    need = chars + 1 + 4  # the characters, the word-start mark "▁" and the special pieces
    with pytest.raises(DataError, match=rf"vocab_size=10 is too small for a char model.*"
                                        rf"vocab_size={need}\.$"):
        Tokenizer.train(CORPUS, vocab_size=10, model_type="char")
    tok = Tokenizer.train(CORPUS, vocab_size=need, model_type="char")
    assert tok.decode(tok.encode(CORPUS[4])) == CORPUS[4]


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab_size": 100, "model_type": "wordpiece"}, "not a SentencePiece model type"),
    ({"vocab_size": 0}, "positive integer"),
    ({"vocab_size": 100, "character_coverage": 0.0}, "character_coverage must be .* got 0.0"),
    ({"vocab_size": 100, "character_coverage": 1.5}, "character_coverage must be .* got 1.5"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(DataError, match=message):
        Tokenizer.train(CORPUS, **kwargs)


@pytest.mark.parametrize("sentences", [["", ""], ["  ", "\t", " \n "]])
def test_no_text(sentences):
    with pytest.raises(DataError, match="contain no text"):
        Tokenizer.train(sentences, vocab_size=100)


def test_non_string_sentence():
    with pytest.raises(DataError, match="training sentence 2 is a int"):
        Tokenizer.train(["ein Hund", 5], vocab_size=100)


def test_errors_of_a_lazy_sentence_source_come_back_unchanged():
    def lines():
        yield from CORPUS
        raise DataError("corpus.txt: line 13 is not valid UTF-8")

    with pytest.raises(DataError, match="line 13"):
        Tokenizer.train(lines(), vocab_size=100)


def test_multi30k_round_trips():
    if not (MULTI30K / "train.de.gz").exists():
        pytest.skip(f"Multi30k not found in {MULTI30K}")
    pairs = read_parallel(MULTI30K / "train.de.gz", MULTI30K / "train.en.gz")
    assert len(pairs) == 29000
    tok = Tokenizer.train([s for pair in pairs[:5000] for s in pair], vocab_size=8000)
    assert tok.vocab_size == 8000
    sentences = [s for pair in pairs[:5000:10] for s in pair]
    with gzip.open(MULTI30K / "val.de.gz", "rt", encoding="utf-8") as f:
        sentences += f.read().splitlines()[:200]  # unseen text
    for s in sentences:
        # nmt_nfkc: NFKC (no-break space -> space, ...) and runs of spaces collapsed
        assert tok.decode(tok.encode(s)) == " ".join(unicodedata.normalize("NFKC", s).split())
