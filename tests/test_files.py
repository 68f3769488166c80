"""Writing a file whole (minitransformer/files.py): what is replaced, what is written
directly, and what the replacement keeps of the file it replaces."""

import os
import stat
import sys

import pytest

from minitransformer.files import (
    appended,
    put_in_place,
    replaceable,
    temporary_beside,
    written_whole,
)


def test_a_regular_file_or_a_new_name_is_replaced_and_a_link_leads_to_its_file(tmp_path):
    (tmp_path / "real.txt").write_text("old\n")
    (tmp_path / "link.txt").symlink_to("real.txt")
    assert replaceable(tmp_path / "new.txt") == (tmp_path / "new.txt").resolve()
    assert replaceable(tmp_path / "link.txt") == (tmp_path / "real.txt").resolve()
    written_whole(tmp_path / "link.txt", lambda file: file.write_text("new\n"))
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_devices_and_the_process_s_own_output_are_written_directly(tmp_path):
    """Renaming a file over /dev/stdout's target, when standard output is a file, would take
    the file's name from the process, which would go on writing into a deleted file."""
    assert replaceable("/dev/stdout") is None
    assert replaceable("/dev/null") is None
    os.mkfifo(tmp_path / "pipe")
    assert replaceable(tmp_path / "pipe") is None
    target = tmp_path / "log.txt"
    with open(target, "w") as log:
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            assert replaceable(target) is None
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    assert replaceable(target) is not None


def test_a_loop_of_links_is_an_oserror(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OSError, match="symbolic links"):
        replaceable(tmp_path / "a")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_the_replacement_keeps_the_old_file_s_permissions(tmp_path):
    target = tmp_path / "private.txt"
    target.write_text("old\n")
    target.chmod(0o600)
    file, temporary = temporary_beside(target)
    with file:
        file.write(b"new\n")
    put_in_place(temporary, target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    written_whole(tmp_path / "fresh.txt", lambda file: file.write_text("x"))
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")

    def full(file):
        file.write_text("half")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        written_whole(target, full)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_regular_file_under_dev_is_a_file_and_a_direct_write_appends_only_to_streams(
        tmp_path):
    """/dev/shm holds ordinary files: replaced whole, not appended to."""
    if os.path.isdir("/dev/shm"):
        assert replaceable("/dev/shm/minitransformer-test.txt") is not None
    (tmp_path / "plain.txt").write_text("x")
    assert not appended(tmp_path / "plain.txt") and not appended(tmp_path / "missing.txt")
    os.mkfifo(tmp_path / "pipe")
    assert appended(tmp_path / "pipe")
