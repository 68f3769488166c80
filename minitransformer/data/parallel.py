"""Parallel text: two aligned files, one sentence per line, line i of each a translation pair.

This is how WMT and Multi30k ship (``train.de.gz`` / ``train.en.gz``). Files may be gzip'ed
(recognized by a ``.gz`` suffix or by gzip's magic bytes) and must be UTF-8. Lines are split
on "\\n" alone (plus a "\\r" before it, for files written on Windows): ``str.splitlines`` would
also split on characters such as U+2028 or form feed inside a sentence, and silently shift every
later pair out of alignment.

    read_lines(path)                     the sentences of one file
    write_lines(path, lines)             and back, complete or not at all
    write_files({path: bytes}, writer)   several files, every one or none
    read_parallel(src_path, tgt_path)    [(source, target), ...], counts checked
    encode_pairs(pairs, tok, max_len)    token ids, too long or empty pairs dropped
    encode_kept(pairs, tok, max_len)     the same, with which were kept and why not
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..files import appended, give_permissions, replaceable, temporary_beside, written_whole
from .errors import DataError
from .tokenizer import Tokenizer

_GZIP_MAGIC = b"\x1f\x8b"


def read_lines(path: str | os.PathLike, allow_empty: bool = False) -> list[str]:
    """The lines of a UTF-8 text file, plain or gzip'ed, each without its trailing newline.

    Nothing else is stripped: spaces and empty lines stay, so line i is still sentence i.
    Raises DataError for a missing, unreadable or corrupt file, for an empty one (a corpus
    whose download stopped) unless ``allow_empty`` (sentences to translate: nothing to do), and
    for a line that is not UTF-8 (naming the 1-based line number).
    """
    path = Path(path)
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}: line {line} is not valid UTF-8 (byte 0x{data[e.start]:02x} "
                        f"cannot start or continue a character); re-encode the file as UTF-8, "
                        f"for example with `iconv -f latin1 -t utf-8`.") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark is not part of the first sentence
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    if not lines and not allow_empty:
        raise DataError(f"{path} is empty; it should hold one sentence per line, so check "
                        f"that the download or extraction finished.")
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path``, each followed by a newline, in UTF-8, complete or not at
    all (``files.written_whole``): a failure (a full disk) raises OSError and leaves ``path``
    as it was. A path that is no regular file (a device, a pipe) is written directly."""
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    if replaceable(path) is None:  # a device, a pipe, a file standard error goes to
        with open(path, "ab" if appended(path) else "wb") as file:
            file.write(text)
        return
    written_whole(path, lambda file: file.write_bytes(text))


def write_files(files: dict[Path, bytes], writer: str) -> None:
    """Write every file (path -> its bytes) or none. Each goes to a temporary file beside it;
    once all are written they are renamed into place, an earlier file moved aside first so
    that a failed rename can put it back. A symbolic link keeps leading where it did (its
    target is replaced). DataError, before anything is written, where something other than a
    regular file (a folder) has one of their names, or two of them are one file; ``writer``
    names who writes them there."""
    targets: dict[Path, Path] = {}
    for path in files:
        target = replaceable(path)
        if target is None:  # os.replace would fail, or replace a folder's name, after the work
            raise DataError(f"{path} is a folder or another thing that is not a file, where "
                            f"{writer} writes its {path.name}; move it away or write to another "
                            "folder.")
        if target in targets.values():
            raise DataError(f"{path} is the same file as another that {writer} writes; give "
                            "each its own name.")
        targets[path] = target
    temporaries: dict[Path, Path] = {}
    moved: list[tuple[Path, Path | None]] = []  # (target, the earlier file moved aside)
    try:
        for path, data in files.items():
            file, temporaries[targets[path]] = temporary_beside(targets[path])
            with file:
                file.write(data)
        for target, temporary in temporaries.items():
            give_permissions(temporary, target)
            aside = None
            if target.exists():
                aside = target.with_name(f".{target.name}.{os.getpid()}.old")
            moved.append((target, aside))  # before the move: an interrupt after it puts it back
            if aside is not None:
                os.replace(target, aside)
            os.replace(temporary, target)
    except BaseException:  # a full disk, Ctrl-C: put back what was there
        for target, aside in reversed(moved):
            if aside is None:
                _quietly(target.unlink, True)
            elif aside.exists():
                _quietly(os.replace, aside, target)
        raise
    finally:
        for temporary in temporaries.values():
            _quietly(temporary.unlink, True)
    for _, aside in moved:
        if aside is not None:
            _quietly(aside.unlink, True)


def _quietly(clean_up, *args) -> None:
    """A clean-up step whose failure must not hide the error being raised."""
    try:
        clean_up(*args)
    except OSError:
        pass


def read_parallel(src_path: str | os.PathLike,
                  tgt_path: str | os.PathLike) -> list[tuple[str, str]]:
    """Aligned (source, target) sentence pairs from two files with the same number of lines."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                        f"parallel files must align line by line, so check that both are the "
                        f"same split of the same corpus version.")
    return list(zip(src, tgt, strict=True))


@dataclass(frozen=True)
class Dropped:
    """How many pairs ``encode_kept`` dropped, by reason."""

    empty: int = 0     # the source or the target encodes to no token
    too_long: int = 0  # neither side is empty, but one has more than max_len tokens

    @property
    def total(self) -> int:
        return self.empty + self.too_long


def encode_pairs(pairs: Iterable[tuple[str, str]], tokenizer: Tokenizer,
                 max_len: int | None) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Token ids of each pair (no BOS/EOS), keeping those fit to train on.

    A pair is dropped when its source or target encodes to no token, or to more than
    ``max_len`` tokens (``None``: no limit). The decoder sees one more position than the target
    (BOS or EOS), so a kept target makes at most max_len + 1 decoder positions.
    Returns ``(kept, n_dropped)``; kept pairs keep their input order. ``encode_kept`` says
    which pairs were kept, and why the others were not.
    """
    kept, _, dropped = encode_kept(pairs, tokenizer, max_len)
    return kept, dropped.total


def encode_kept(pairs: Iterable[tuple[str, str]], tokenizer: Tokenizer, max_len: int | None
                ) -> tuple[list[tuple[list[int], list[int]]], list[int], Dropped]:
    """``encode_pairs``' kept pairs, their positions in ``pairs`` (to keep the text of the
    same pairs), and the count of the others by reason (an empty side counts as empty even
    when the other side is too long)."""
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or max_len < 1):
        raise DataError(f"max_len must be a positive integer or None, got {max_len!r}; "
                        f"try 100 or None.")
    pairs = list(pairs)
    src_ids = tokenizer.encode_batch([src for src, _ in pairs])
    tgt_ids = tokenizer.encode_batch([tgt for _, tgt in pairs])
    limit = float("inf") if max_len is None else max_len
    positions, empty = [], 0
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if not s or not t:
            empty += 1
        elif len(s) <= limit and len(t) <= limit:
            positions.append(i)
    kept = [(src_ids[i], tgt_ids[i]) for i in positions]
    return kept, positions, Dropped(empty, len(pairs) - len(kept) - empty)


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it is gzip'ed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; check the path (relative paths start at "
                        f"{Path.cwd()}).") from None
    except OSError as e:
        raise DataError(f"{path} could not be read ({e.strerror or e}); check that it is a "
                        f"file you have permission to read.") from None
    if path.suffix == ".gz" or data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path} is not a complete gzip file ({e}); download it again, "
                            f"or check it with `gzip -t`.") from None
    return data
