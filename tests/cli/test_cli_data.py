"""`minitransformer data multi30k`: exit status 2 for a --dest or --base-url that cannot work,
1 for a download that failed (the input was fine; retrying may help), with the command to
retry. `minitransformer data builtin`: its six files complete or absent, a negative --seed
refused while parsing."""

import socket

import pytest

from minitransformer import cli
from minitransformer.data import multi30k


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


def test_the_retry_hint_repeats_the_base_url_given(tmp_path, capsys, monkeypatch):
    """The hint said `minitransformer data multi30k --dest DIR`, which retries the default
    mirror, not the one that failed."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    url, dest = unreachable_url(), tmp_path / "my data"
    assert cli.main(["data", "multi30k", "--dest", str(dest), "--base-url", url]) == 1
    assert (f"Retry `minitransformer data multi30k --dest '{dest}' --base-url {url}`, or copy "
            "the six Multi30k files") in capsys.readouterr().err


def test_the_hint_after_a_file_that_does_not_verify_repeats_the_base_url(tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setattr(multi30k, "_fetch", lambda url, out, *rest: out.write(b"not gzip"))
    url, dest = "https://mirror.example.org/raw/", tmp_path / "m"
    assert cli.main(["data", "multi30k", "--dest", str(dest), "--base-url", url]) == 1
    err = capsys.readouterr().err
    assert (f"Nothing was saved for it. Retry `minitransformer data multi30k --dest {dest} "
            f"--base-url {url}`; if it keeps failing") in err
    assert list(dest.iterdir()) == []


def test_the_hint_leaves_out_the_default_base_url(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(multi30k, "_fetch", lambda url, out, *rest: out.write(b"not gzip"))
    dest = tmp_path / "m"
    assert cli.main(["data", "multi30k", "--dest", str(dest)]) == 1
    assert f"Retry `minitransformer data multi30k --dest {dest}`;" in capsys.readouterr().err


def test_builtin_refuses_a_negative_seed_while_parsing(tmp_path, capsys):
    """--seed -1 was accepted, although a negative --seed is refused by every command."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["data", "builtin", "--dest", str(tmp_path / "b"), "--seed", "-1"])
    assert stop.value.code == 2
    assert ("argument --seed: must be a whole number of at least 0, got -1"
            in capsys.readouterr().err)
    assert not (tmp_path / "b").exists()


def test_builtin_on_a_full_disk_exits_2_and_changes_nothing(tmp_path, capsys,
                                                           disk_full_at_the_second_file):
    """On a full 1 MB tmpfs, a truncated train.en of 1,048,576 bytes was left behind."""
    dest = tmp_path / "b"
    dest.mkdir()
    (dest / "train.en").write_text("my own sentences\n")
    assert cli.main(["data", "builtin", "--dest", str(dest)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"minitransformer data builtin: cannot write into --dest {dest} (No "
                            "space left on device), so no file there was changed; give a folder "
                            "that can be created or written, with room for the task (about "
                            "2.5 MB).\n")
    assert [p.name for p in dest.iterdir()] == ["train.en"]
    assert (dest / "train.en").read_text() == "my own sentences\n"


def test_builtin_refuses_a_folder_where_a_file_goes(tmp_path, capsys):
    (tmp_path / "b" / "valid.en").mkdir(parents=True)
    assert cli.main(["data", "builtin", "--dest", str(tmp_path / "b")]) == 2
    assert (f"minitransformer data builtin: {tmp_path / 'b' / 'valid.en'} is a folder or "
            "another thing that is not a file, where the built-in task writes its valid.en; "
            "move it away or write to another folder.") in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["valid.en"]


def test_builtin_writes_the_six_files(tmp_path, capsys):
    assert cli.main(["data", "builtin", "--dest", str(tmp_path / "b"), "--seed", "3"]) == 0
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "test.en", "test.vel", "train.en", "train.vel", "valid.en", "valid.vel"]
    assert capsys.readouterr().out == f"wrote the built-in task to {tmp_path / 'b'}\n"
