"""Subword tokenization with SentencePiece: one joint vocabulary for source and target.

§5.1: "Sentences were encoded using byte-pair encoding [3], which has a shared source-target
vocabulary of about 37000 tokens." A shared vocabulary is what lets the model tie its source,
target and output embedding matrices (§3.4). ``Tokenizer`` trains such a model in memory,
serializes it to bytes (so a checkpoint can carry it), and maps text to ids and back.

The four special ids are fixed, whatever the text, so the model and the batching code can
rely on them:

    PAD_ID = 0   padding; the model masks it (config.pad_id) and the loss ignores it
    UNK_ID = 1   a character the vocabulary has never seen; decodes to " ⁇ "
    BOS_ID = 2   start of the decoder input (tgt_in)
    EOS_ID = 3   end of the target (tgt_out); decoding stops there

Training is deterministic: same sentences and options, same bytes. SentencePiece only
guarantees that for a fixed thread count (the unigram trainer's results depend on it, and the
thread count is stored in the model), so training always runs on one thread.
"""

from __future__ import annotations

import io
import operator
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sentencepiece as spm

from .errors import DataError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
MODEL_TYPES = ("bpe", "unigram", "char", "word")
_SILENT_IDS = frozenset((PAD_ID, BOS_ID, EOS_ID))  # dropped by decode; unk stays visible

_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")
_DEFAULT_SENTENCE_BYTES = 4192  # SentencePiece's default max_sentence_length
_MAX_SENTENCE_BYTES = 1 << 30   # the largest max_sentence_length it accepts


class Tokenizer:
    """A trained SentencePiece model with the fixed special ids above.

    Build one with ``Tokenizer.train``, ``Tokenizer.load`` or ``Tokenizer.from_bytes``.
    ``encode`` adds no BOS/EOS: the batching code places them (tgt_in = BOS + target,
    tgt_out = target + EOS).
    """

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_proto: bytes, source: str = "the tokenizer bytes"):
        """Wrap a serialized SentencePiece model; ``source`` names it in error messages."""
        if not isinstance(model_proto, (bytes, bytearray)):
            raise TypeError(f"Tokenizer needs the serialized model as bytes, got "
                            f"{type(model_proto).__name__}.")
        if not model_proto:
            raise DataError(f"{source} is empty, not a SentencePiece model; train a tokenizer "
                            f"with Tokenizer.train or point to the right file.")
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(bytes(model_proto))
        except RuntimeError as e:
            raise DataError(f"{source} is not a SentencePiece model (it could not be parsed: "
                            f"{_first_line(e)}); the file may be truncated or of another "
                            f"kind, so train a new one with Tokenizer.train.") from None
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if processor.get_piece_size() == 0 or ids != SPECIAL_IDS:
            raise DataError(f"{source} has special ids pad, unk, bos, eos = {ids} but "
                            f"minitransformer needs {SPECIAL_IDS}; train it with "
                            f"Tokenizer.train, which fixes them.")
        self._proto = bytes(model_proto)
        self._sp = processor

    # ------------------------------------------------------------------ building
    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int, model_type: str = "bpe",
              character_coverage: float = 1.0) -> Tokenizer:
        """Train a joint model on ``sentences`` (source and target lines together).

        In memory, no files written. ``model_type`` is "bpe" (the paper's choice), "unigram",
        "char" or "word". ``character_coverage`` (0.98 to 1.0) is the share of characters
        kept: 1.0 keeps every one (right for European languages; ~0.9995 suits scripts with
        thousands of characters). Every sentence is used, however long. Raises DataError
        when ``vocab_size`` does not fit the text, with the size that would.
        """
        if model_type not in MODEL_TYPES:
            raise DataError(f"model_type {model_type!r} is not a SentencePiece model type; "
                            f"use one of {', '.join(MODEL_TYPES)}.")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise DataError(f"vocab_size must be a positive integer, got {vocab_size!r}; "
                            f"try 8000 for a corpus the size of Multi30k.")
        if (isinstance(character_coverage, bool)
                or not isinstance(character_coverage, (int, float))
                or not 0.98 <= character_coverage <= 1.0):
            raise DataError(f"character_coverage must be a number from 0.98 to 1.0 (the share "
                            f"of the text's characters the vocabulary keeps), got "
                            f"{character_coverage!r}; use 1.0 for European languages.")
        lines = _text_lines(sentences)
        # SentencePiece skips, without a word, sentences longer than max_sentence_length
        # bytes (4192 by default): raise it to the longest so every sentence is used.
        longest = max((len(s.encode("utf-8")) for s in lines), default=0)
        if longest > _MAX_SENTENCE_BYTES:
            raise DataError(f"a training sentence has {longest:,} bytes, more than "
                            f"SentencePiece's limit of {_MAX_SENTENCE_BYTES:,}; split the "
                            f"text into lines (one sentence each).")
        writer = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines), model_writer=writer,
                vocab_size=vocab_size, model_type=model_type,
                character_coverage=character_coverage,
                max_sentence_length=max(_DEFAULT_SENTENCE_BYTES, longest),
                # a char model keeps all its characters, so too small a vocab_size shows up
                # as a model larger than asked for (checked below) instead of lost characters
                **({"use_all_vocab": True} if model_type == "char" else {}),
                pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                # determinism: every sentence, in the given order, on one thread
                input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
                minloglevel=2)  # quiet: no training log on stderr
        except (RuntimeError, ValueError) as e:
            raise _training_error(str(e), vocab_size, model_type) from None
        tokenizer = cls(writer.getvalue(), source="the trained model")
        size = tokenizer.vocab_size
        if size > vocab_size:  # a char model needs one piece per character
            raise DataError(f"vocab_size={vocab_size} is too small for a {model_type} model of "
                            f"this text: its characters and the 4 special pieces need {size}; "
                            f"pass vocab_size={size}.")
        if size < vocab_size:  # and has no more pieces than that
            raise DataError(f"vocab_size={vocab_size} does not fit a {model_type} model of "
                            f"this text, which has {size} pieces; pass vocab_size={size}.")
        return tokenizer

    @classmethod
    def from_bytes(cls, data: bytes) -> Tokenizer:
        """The tokenizer whose serialized model is ``data`` (from ``to_bytes``)."""
        return cls(data)

    def to_bytes(self) -> bytes:
        """The serialized SentencePiece model proto: store it in a checkpoint or a file."""
        return self._proto

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Read a model written by ``save`` (or by ``spm_train``, if its special ids match)."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise DataError(f"{path} does not exist; train a tokenizer and save it there, or "
                            f"correct the path.") from None
        except OSError as e:
            raise DataError(f"{path} could not be read ({e.strerror or e}); check that it is "
                            f"a readable file.") from None
        return cls(data, source=str(path))

    def save(self, path: str | os.PathLike) -> None:
        """Write the model to ``path`` through a temporary file, so a crash leaves no half."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self._proto)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ using
    @property
    def vocab_size(self) -> int:
        """Number of pieces, the four special ones included: the model's V."""
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of one sentence, without BOS/EOS; "" gives []."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes one sentence as a str, got a {type(text).__name__}; "
                            "for a list of sentences use encode_batch.")
        return self._sp.encode(text, out_type=int)

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """``encode`` of each text, in one call into SentencePiece."""
        if isinstance(texts, str):  # its characters would be encoded one by one
            raise TypeError("encode_batch takes a list of sentences, got one str; use "
                            "encode(text) for a single sentence.")
        texts = list(texts)
        return self._sp.encode(texts, out_type=int) if texts else []

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, skipping pad, BOS and EOS (it does not stop at EOS)."""
        if isinstance(ids, str | bytes):  # "567" would decode as the ids 5, 6, 7
            raise TypeError(f"decode takes a list of token ids, got a {type(ids).__name__}; "
                            "encode text with encode(text) first.")
        kept = [_token_id(i) for i in ids]
        bad = [i for i in kept if not 0 <= i < self.vocab_size]
        if bad:
            raise DataError(f"token id {bad[0]} is outside this tokenizer's vocabulary of "
                            f"{self.vocab_size} pieces; decode ids made with the same "
                            f"tokenizer (and a model whose vocab_size matches it).")
        return self._sp.decode([i for i in kept if i not in _SILENT_IDS])

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        """``decode`` of each row (lists, or the rows of a padded (B, L) array)."""
        return [self.decode(ids) for ids in batch]

    def id_to_piece(self, i: int) -> str:
        """The vocabulary entry of id ``i`` ("▁" marks a word start), for inspection."""
        i = _token_id(i)
        if not 0 <= i < self.vocab_size:
            raise DataError(f"token id {i} is outside this tokenizer's vocabulary of "
                            f"{self.vocab_size} pieces (ids 0 to {self.vocab_size - 1}).")
        return self._sp.id_to_piece(i)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self._proto == other._proto

    def __hash__(self) -> int:
        return hash(self._proto)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"


def _token_id(value: Any) -> int:
    """``value`` as an int, if it is an integer (Python or NumPy): int(1.7) would be 1."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"token ids are integers, got {value!r} (a {type(value).__name__}); "
                        "pass the ids encode or a model gave, as ints.") from None


def _text_lines(sentences: Iterable[str]) -> list[str]:
    """The sentences as a list (training reads them all anyway), each checked to be a str;
    an error of a lazy source (a DataError from a reader) comes back unchanged."""
    lines = []
    for n, s in enumerate(sentences, start=1):
        if not isinstance(s, str):
            raise DataError(f"training sentence {n} is a {type(s).__name__}, not a str; pass "
                            f"the lines of text (read_lines gives them).")
        lines.append(s)
    return lines


def _training_error(message: str, vocab_size: int, model_type: str) -> DataError:
    """Turn SentencePiece's trainer errors into one-sentence DataErrors with the fix."""
    if m := _TOO_HIGH.search(message):
        limit = int(m.group(2))
        return DataError(f"vocab_size={vocab_size} is too large for this text: a "
                         f"{model_type} model of it has at most {limit} pieces; pass "
                         f"vocab_size <= {limit} (or train on more text).")
    if m := _TOO_LOW.search(message):
        need = int(m.group(2))
        return DataError(f"vocab_size={vocab_size} is too small: the text's characters and "
                         f"the 4 special pieces need at least {need}; pass vocab_size >= "
                         f"{need} or lower character_coverage.")
    if "sentences_.empty()" in message or "all_chars_count" in message:  # or only spaces
        return DataError("the training sentences contain no text; pass the (non-empty) "
                         "lines of the training corpus.")
    return DataError(f"SentencePiece could not train a {model_type} model "
                     f"({_first_line(message)}); check the sentences and options.")


def _first_line(error: object) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else "no detail"
