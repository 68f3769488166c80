"""Multi30k download, find and verify, against a local HTTP server on 127.0.0.1.

The real files (from /work/shared/data/multi30k) are served once to check the hard-coded
digests end to end; the other tests serve tiny synthetic files whose digests replace
MULTI30K_FILES, so they run in milliseconds.
"""

import gzip
import hashlib
import http.server
import os
import re
import shutil
import socket
import threading
from functools import partial
from pathlib import Path

import pytest

from minitransformer.data import multi30k
from minitransformer.data.errors import DataError
from minitransformer.data.multi30k import (
    LANGS,
    MULTI30K_FILES,
    SPLITS,
    download_multi30k,
    find_multi30k,
    multi30k_name,
    verify_multi30k,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


class _Server:
    """A ThreadingHTTPServer serving ``root``; ``requests`` lists the paths asked for."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[str] = []
        requests = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            timeout = 5  # a stuck client cannot hold a handler thread for long

            def do_GET(self):
                requests.append(self.path)
                super().do_GET()

            def log_message(self, format, *args):  # keep the test output quiet
                pass

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/raw/"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A server whose base URL ``server.url`` maps to the folder ``server.root / "raw"``."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # never route 127.0.0.1 through a proxy
    root = tmp_path / "www"
    (root / "raw").mkdir(parents=True)
    srv = _Server(root)
    srv.thread.start()
    yield srv
    srv.stop()


@pytest.fixture
def synthetic(server, monkeypatch):
    """Serve three-line stand-ins for the six files; MULTI30K_FILES holds their digests."""
    files = {}
    for name in MULTI30K_FILES:
        text = "".join(f"{name} sentence {i}\n" for i in range(3)).encode()
        (server.root / "raw" / name).write_bytes(gzip.compress(text, mtime=0))
        files[name] = (hashlib.sha256(text).hexdigest(), 3)
    monkeypatch.setattr(multi30k, "MULTI30K_FILES", files)
    return files


def download(server, dest):
    return download_multi30k(dest, base_url=server.url, timeout=5, progress=False)


def test_real_files_download_and_verify(server, tmp_path):
    if not SHARED.is_dir():
        pytest.skip(f"no shared copy of Multi30k at {SHARED}")
    for name in MULTI30K_FILES:
        shutil.copy(SHARED / name, server.root / "raw" / name)
    dest = tmp_path / "new" / "multi30k"  # parents are created too

    assert download(server, dest) == dest
    assert sorted(p.name for p in dest.iterdir()) == sorted(MULTI30K_FILES)
    assert verify_multi30k(dest) == {name: dest / name for name in MULTI30K_FILES}
    with gzip.open(dest / "train.en.gz", "rt", encoding="utf-8") as f:
        assert f.readline() == "Two young, White males are outside near many bushes.\n"


def test_tampered_file_is_refused_and_not_saved(server, synthetic, tmp_path):
    served = server.root / "raw" / "val.de.gz"
    lines = gzip.decompress(served.read_bytes()).decode().splitlines(keepends=True)
    lines[1] = "ein veränderter Satz\n"
    tampered = "".join(lines).encode()
    served.write_bytes(gzip.compress(tampered))
    dest = tmp_path / "dest"

    with pytest.raises(DataError) as info:
        download(server, dest)
    message = str(info.value)
    assert "val.de.gz" in message
    assert synthetic["val.de.gz"][0] in message  # expected digest
    assert hashlib.sha256(tampered).hexdigest() in message  # actual digest
    assert "copy" in message and "Retry" in message  # what to do
    # The files before it verified and stay; nothing else, no temporary file, is left.
    assert sorted(p.name for p in dest.iterdir()) == ["train.de.gz", "train.en.gz"]


def test_truncated_gzip_is_refused(server, synthetic, tmp_path):
    served = server.root / "raw" / "train.de.gz"
    served.write_bytes(served.read_bytes()[:-10])
    with pytest.raises(DataError, match=r"train\.de\.gz is not a readable, complete gzip"):
        download(server, tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []


def test_404_names_the_url(server, synthetic, tmp_path):
    (server.root / "raw" / "test_2016_flickr.en.gz").unlink()
    with pytest.raises(DataError, match=re.escape(server.url + "test_2016_flickr.en.gz")) as info:
        download(server, tmp_path / "dest")
    assert "404" in str(info.value)
    assert "by hand" in str(info.value)
    assert not (tmp_path / "dest" / "test_2016_flickr.en.gz").exists()


def test_unreachable_server_names_the_url(tmp_path):
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/raw/"
    with pytest.raises(DataError, match=re.escape(url + "train.de.gz")):
        download_multi30k(tmp_path / "dest", base_url=url, timeout=5, progress=False)


def test_second_call_skips_valid_files(server, synthetic, tmp_path):
    dest = tmp_path / "dest"
    download(server, dest)
    mask = os.umask(0)
    os.umask(mask)
    for name in MULTI30K_FILES:  # as readable as any file the user creates, not private
        assert (dest / name).stat().st_mode & 0o777 == 0o666 & ~mask
    assert sorted(server.requests) == sorted(f"/raw/{name}" for name in MULTI30K_FILES)

    server.requests.clear()
    download(server, dest)
    assert server.requests == []

    (dest / "val.en.gz").write_bytes(gzip.compress(b"not the right text\n"))
    download(server, dest)
    assert server.requests == ["/raw/val.en.gz"]  # only the broken file is fetched again
    verify_multi30k(dest)


def test_regzipped_copy_is_accepted(server, synthetic, tmp_path):
    for name in MULTI30K_FILES:
        served = server.root / "raw" / name
        original = served.read_bytes()
        regzipped = gzip.compress(gzip.decompress(original), compresslevel=1, mtime=123456789)
        assert regzipped != original
        served.write_bytes(regzipped)
    dest = tmp_path / "dest"
    download(server, dest)
    verify_multi30k(dest)


def test_find_lists_missing_files(tmp_path):
    (tmp_path / "train.de.gz").write_bytes(b"")
    with pytest.raises(DataError) as info:
        find_multi30k(tmp_path)
    message = str(info.value)
    assert "train.de.gz" not in message.split("Download")[0]
    for name in MULTI30K_FILES:
        if name != "train.de.gz":
            assert name in message


def test_verify_lists_every_bad_file(server, synthetic, tmp_path):
    dest = tmp_path / "dest"
    download(server, dest)
    (dest / "train.en.gz").write_bytes(b"not gzip")
    (dest / "val.de.gz").write_bytes(gzip.compress(b"one line\n"))
    (dest / "test_2016_flickr.en.gz").unlink()
    with pytest.raises(DataError) as info:
        verify_multi30k(dest)
    message = str(info.value)
    assert "train.en.gz is not a readable" in message
    assert "val.de.gz has the wrong content" in message
    assert "test_2016_flickr.en.gz is missing" in message
    assert "train.de.gz" not in message


def test_names_of_splits():
    assert {multi30k_name(split, lang) for split in SPLITS for lang in LANGS} == set(MULTI30K_FILES)
    assert multi30k_name("valid", "de") == "val.de.gz"
    with pytest.raises(DataError, match="split"):
        multi30k_name("dev", "de")
    with pytest.raises(DataError, match="language"):
        multi30k_name("train", "fr")
