"""`minitransformer data multi30k`: exit status 2 for a --dest or --base-url that cannot work,
1 for a download that failed (the input was fine; retrying may help)."""

import socket

import pytest

from minitransformer import cli


def unreachable_url():
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/raw/"


def test_a_failed_download_exits_with_status_1(tmp_path, capsys, monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # never route 127.0.0.1 through a proxy
    url = unreachable_url()
    assert cli.main(["data", "multi30k", "--dest", str(tmp_path / "m"), "--base-url", url]) == 1
    err = capsys.readouterr().err
    assert f"could not download {url}train.de.gz" in err and "Traceback" not in err


def test_a_dest_that_cannot_be_written_exits_with_status_2(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    assert cli.main(["data", "multi30k", "--dest", str(tmp_path / "a_file"), "--base-url",
                     unreachable_url()]) == 2
    assert "cannot write into --dest" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["127.0.0.1/raw/", "http://[::1", "https:///raw/",
                                 "ftp://example.org/raw/"])
def test_a_base_url_that_is_not_http_exits_with_status_2(tmp_path, capsys, url):
    """http://[::1 (an address that cannot be parsed) ended in urllib's ValueError."""
    assert cli.main(["data", "multi30k", "--dest", str(tmp_path / "m"), "--base-url",
                     url]) == 2
    assert (f"--base-url {url} is not an http:// or https:// address"
            in capsys.readouterr().err)
    assert not (tmp_path / "m").exists()
