"""Multi30k task 1: download, find and verify the six raw English-German files.

Multi30k (Elliott et al., 2016) gives five-word-to-twenty-word descriptions of Flickr30k images
in English with German translations, one sentence a line: 29,000 training pairs, 1,014
validation pairs and 1,000 test pairs (test_2016_flickr). The raw gzip files live in the
dataset's repository, https://github.com/multi30k/dataset, under ``data/task1/raw/``.

Each file is checked by the SHA-256 of its *decompressed* bytes and its line count, never by
the gzip bytes: recompressing the same text changes the gzip header (name, mtime) and so the
compressed digest, but not the text. A download goes to a hidden temporary file in the
destination and is renamed into place only once it verifies, so an interrupted or corrupt
download never leaves a file that looks complete.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shlex
import sys
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from tqdm import tqdm

from .errors import DataError

DEFAULT_BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"

# name -> (SHA-256 of the decompressed bytes, number of lines). Computed from the files of
# multi30k/dataset data/task1/raw/ (gzip headers dated 2017-12-21) with
#   for f in *.gz; do echo "$f $(zcat $f | sha256sum) $(zcat $f | wc -l)"; done
# Every file ends with a newline, so the line count is the number of b"\n" bytes.
MULTI30K_FILES: dict[str, tuple[str, int]] = {
    "train.de.gz": ("2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72", 29000),
    "train.en.gz": ("460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6", 29000),
    "val.de.gz": ("660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660", 1014),
    "val.en.gz": ("1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227", 1014),
    "test_2016_flickr.de.gz": (
        "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16", 1000),
    "test_2016_flickr.en.gz": (
        "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182", 1000),
}

# Our split name -> the file stem Multi30k uses for it.
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
LANGS = ("de", "en")

_CHUNK = 1 << 16


def multi30k_name(split: str, lang: str) -> str:
    """The file name of one side of a split: ``multi30k_name("valid", "de") == "val.de.gz"``."""
    if split not in SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}; expected one of {sorted(SPLITS)}")
    if lang not in LANGS:
        raise DataError(f"unknown Multi30k language {lang!r}; expected one of {list(LANGS)}")
    return f"{SPLITS[split]}.{lang}.gz"


def find_multi30k(directory: str | Path) -> dict[str, Path]:
    """The paths of the files in ``directory``, by name; DataError naming any that are absent.

    Only checks that the files exist; ``verify_multi30k`` also checks their contents.
    """
    directory = Path(directory).expanduser()
    paths = {name: directory / name for name in MULTI30K_FILES}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if missing:
        raise DataError(
            f"Multi30k files missing from {directory}: {', '.join(missing)}. "
            f"Download them with `{_command(directory)}`, or copy them by hand from "
            f"{DEFAULT_BASE_URL} into {directory}."
        )
    return paths


def verify_multi30k(directory: str | Path) -> dict[str, Path]:
    """Check that every file is present, with the right text digest and line count; returns
    the paths like ``find_multi30k``.

    Raises one DataError listing every file that is missing, unreadable or differs.
    """
    directory = Path(directory).expanduser()
    paths = {name: directory / name for name in MULTI30K_FILES}
    problems = []
    for name, path in paths.items():
        problem = _check(name, path) if path.is_file() else f"{name} is missing"
        if problem is not None:
            problems.append(problem)
    if problems:
        raise DataError(
            f"Multi30k files in {directory} do not verify:\n  " + "\n  ".join(problems)
            + f"\nRun `{_command(directory)}` to download them again (files that verify "
            f"are kept), or copy them by hand from {DEFAULT_BASE_URL}."
        )
    return paths


def download_multi30k(
    dest: str | Path,
    base_url: str = DEFAULT_BASE_URL,
    timeout: float = 60,
    progress: bool = True,
) -> Path:
    """Download the six files into ``dest`` (created if needed), verify them, return ``dest``.

    Files already present and valid are skipped; a present file that does not verify is
    downloaded again and replaced only once the new copy verifies. ``timeout`` (seconds)
    bounds each connection attempt and each read. Raises DataError on a network error or on a
    download whose digest or line count is wrong; files that verified stay in place.
    """
    dest = Path(dest).expanduser()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"cannot create the Multi30k directory {dest}: {err}") from err
    base_url = base_url.rstrip("/") + "/"
    for name in MULTI30K_FILES:
        final = dest / name
        if final.is_file() and _check(name, final) is None:
            if progress:
                print(f"{name}: already present and verified", file=sys.stderr)
            continue
        _download_one(name, base_url, final, timeout, progress)
    return dest


def _command(dest: Path, base_url: str = DEFAULT_BASE_URL) -> str:
    """The command that downloads into ``dest`` from ``base_url`` again, quoted for a shell."""
    words = ["minitransformer", "data", "multi30k", "--dest", str(dest)]
    if base_url.rstrip("/") != DEFAULT_BASE_URL.rstrip("/"):
        words += ["--base-url", base_url]
    return shlex.join(words)


def _download_one(name: str, base_url: str, final: Path, timeout: float,
                  progress: bool) -> None:
    """Fetch ``name`` from ``base_url`` into a temporary file next to ``final``; rename it there
    once it verifies."""
    url, retry = base_url + name, _command(final.parent, base_url)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=final.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            _fetch(url, out, retry, final.parent, name, timeout, progress)
        problem = _check(name, tmp)
        if problem is not None:
            raise DataError(
                f"downloaded {problem}. Nothing was saved for it. Retry `{retry}`; if it keeps "
                f"failing, the server at {url} serves a different file: copy the Multi30k "
                f"task-1 file by hand into {final.parent}."
            )
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's file is private; a download is not
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process's file-creation mask (reading it means setting it: put it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fetch(url: str, out, retry: str, dest: Path, name: str, timeout: float,
           progress: bool) -> None:
    """Stream the body of ``url`` into the open file ``out``, with a tqdm bar; a network error
    is a DataError that suggests the command ``retry``."""
    request = urllib.request.Request(url, headers={"User-Agent": "minitransformer"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        raise _network_error(url, retry, dest, f"HTTP {err.code} {err.reason}") from err
    except (OSError, http.client.HTTPException, ValueError) as err:
        raise _network_error(url, retry, dest, getattr(err, "reason", err)) from err
    with response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        received = 0
        with tqdm(total=total, desc=name, unit="B", unit_scale=True, unit_divisor=1024,
                  disable=not progress, file=sys.stderr) as bar:
            while True:
                try:
                    chunk = response.read(_CHUNK)
                except (OSError, http.client.HTTPException) as err:
                    raise _network_error(url, retry, dest, err) from err
                if not chunk:
                    break
                out.write(chunk)  # disk errors propagate as they are, not as network errors
                received += len(chunk)
                bar.update(len(chunk))
    if total is not None and received != total:
        raise _network_error(url, retry, dest,
                             f"connection closed after {received} of {total} bytes")


def _network_error(url: str, retry: str, dest: Path, reason: object) -> DataError:
    return DataError(
        f"could not download {url}: {reason}. Retry `{retry}`, or copy the six "
        f"Multi30k files ({', '.join(MULTI30K_FILES)}) by hand into {dest}."
    )


def _check(name: str, path: Path) -> str | None:
    """None if ``path`` holds the expected text of ``name``; otherwise what is wrong with it."""
    expected_digest, expected_lines = MULTI30K_FILES[name]
    try:
        digest, lines = _text_digest(path)
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        return f"{name} is not a readable, complete gzip file ({err})"
    if digest != expected_digest or lines != expected_lines:
        return (f"{name} has the wrong content: SHA-256 of its decompressed text is {digest} "
                f"with {lines} lines, expected {expected_digest} with {expected_lines} lines")
    return None


def _text_digest(path: Path) -> tuple[str, int]:
    """SHA-256 hex digest and number of lines (b"\\n" bytes) of the decompressed file."""
    sha = hashlib.sha256()
    lines = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            lines += chunk.count(b"\n")
    return sha.hexdigest(), lines
