"""Writing a file whole: into a temporary file beside it, renamed over it once complete, so
that a crash or a full disk leaves the old file or the new one, never half of one.

    replaceable(path)                 the file such a write replaces, or None: write directly
    standard_output(path)             whether it is this process's standard output
    appended(path)                    whether a direct write appends to it
    temporary_beside(target)          a new, open file next to ``target`` (and its path)
    put_in_place(temporary, target)   the old file's mode (and owner) given to it, then renamed
    give_permissions(temporary, target)   that first half alone
    written_whole(path, write)        ``write(temporary)``, then put in place

A path that is no regular file is written directly: a device, a named pipe, /dev/stdout or a
file the process already has open as its standard input, output or error (replacing that
file's name would leave the process writing into a deleted file). A symbolic link keeps
leading where it did: the file it leads to is replaced. Nothing here imports the package.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def replaceable(path: str | os.PathLike) -> Path | None:
    """The regular file (existing or not) that writing ``path`` whole replaces: ``path``, or
    the file its links lead to; None where it must be written directly (see above). OSError
    for a loop of links."""
    path = Path(path)
    if _a_stream(path):
        return None
    try:
        return path.resolve()
    except RuntimeError:  # a loop of symbolic links (Python before 3.13)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None


def appended(path: str | os.PathLike) -> bool:
    """Whether a direct write to ``path`` should append: a device, a pipe, or a file another
    descriptor of this process writes (its standard error sent there by ``2>>``), which a
    truncation would cut; a regular file of its own is begun anew."""
    try:
        found = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(found.st_mode) or _a_stream(Path(path))


def standard_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is this process's standard output (/dev/stdout, or the file a shell's
    ``>`` sent it to): what is written there belongs on it, in order, through it."""
    with contextlib.suppress(OSError):
        return os.path.samestat(os.stat(path), os.fstat(1))
    return False


def _a_stream(path: Path) -> bool:
    if str(path.absolute()).startswith("/proc/"):  # /proc/self/fd/N: whatever fd N is
        return True
    try:
        found = os.stat(path)
    except OSError:  # not there yet (or a loop of links, which resolve reports)
        return False
    if not stat.S_ISREG(found.st_mode):
        return True
    for descriptor in (0, 1, 2):  # a shell's `> file` given as the path too
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(descriptor), found):
                return True
    return False


def temporary_beside(target: Path) -> tuple[IO[bytes], Path]:
    """A new file in ``target``'s folder, open for writing bytes, named after it (a dot first,
    its suffix last, so that a writer that reads the format from the suffix still can);
    created exclusively, so no file or link planted there is followed."""
    descriptor, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.",
                                        suffix=f".tmp{target.suffix}")
    return os.fdopen(descriptor, "wb"), Path(name)


def put_in_place(temporary: Path, target: Path) -> None:
    """Rename ``temporary`` over ``target``, with the permissions of the file it replaces."""
    give_permissions(temporary, target)
    os.replace(temporary, target)


def give_permissions(temporary: Path, target: Path) -> None:
    """``target``'s mode (and, for root, its owner) on ``temporary``, or a new file's default
    mode where there is no ``target`` (mkstemp makes its files private)."""
    try:
        old = os.stat(target)
    except FileNotFoundError:
        os.chmod(temporary, 0o666 & ~_umask())
        return
    os.chmod(temporary, stat.S_IMODE(old.st_mode))
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        with contextlib.suppress(OSError):
            os.chown(temporary, old.st_uid, old.st_gid)


def written_whole(path: str | os.PathLike, write: Callable[[Path], Any]) -> None:
    """``write(temporary)`` into a temporary file beside ``path``, then put in place: a failure
    (a full disk) raises and leaves ``path`` as it was, and no temporary file behind. Where
    ``path`` is no regular file, ``write(path)`` directly."""
    target = replaceable(path)
    if target is None:
        write(Path(path))
        return
    file, temporary = temporary_beside(target)
    file.close()
    try:
        write(temporary)
        put_in_place(temporary, target)
    finally:
        with contextlib.suppress(OSError):  # the write's own error goes on
            temporary.unlink(missing_ok=True)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
