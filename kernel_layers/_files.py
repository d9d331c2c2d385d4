"""Writing a file whole or not at all: a fresh temporary file beside it, renamed over it."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cannot_write", "fresh_file", "replacing"]

#: Names tried for the temporary file before giving up (each is new with near certainty).
_TRIES = 16
#: Characters of the target's name kept in the temporary file's.
_NAME_KEPT = 200


def fresh_file(path: Path) -> Path:
    """Create an empty file of a new random name beside ``path`` and return its path.

    ``O_CREAT | O_EXCL`` fails where anything, a symbolic link included, already has the
    name, so a link planted in a data folder cannot redirect the write elsewhere; the
    file gets the permissions the umask gives new files.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    stem = path.name[:_NAME_KEPT]  # a name within the file system's 255 bytes
    for _ in range(_TRIES):
        candidate = path.with_name(f".{stem}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(candidate, flags, 0o666))
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no fresh temporary name beside '{path}' after {_TRIES} tries")


def cannot_write(folder: Path) -> str | None:
    """Why a file cannot be written in ``folder`` (for messages: ``"NotADirectoryError: a
    file is in the folder's place"``, ``"PermissionError: Permission denied"``), or
    ``None`` where it can: a fresh file is created in ``folder``, or where it is missing
    in its nearest existing folder, and removed. Asked before any work, it fails where a
    later write there would (a folder that is a file, one not writable, a read-only file
    system); nothing is left behind, and a missing folder is made by the write itself."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return "NotADirectoryError: a file is in the folder's place"
    try:
        fresh_file(existing / "kernel-layers-write-test").unlink()  # follows no link
    except OSError as err:
        return f"{type(err).__name__}: {err.strerror or err}"
    return None


@contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a new empty temporary file beside ``path`` to write, then rename it over
    ``path`` (atomic within a folder: ``path`` is either as it was or whole). The folder
    is created if missing and must be writable; the temporary file is removed if the
    block raises. An existing file's permissions are kept. A link at ``path`` is
    replaced by the file, not followed (a link planted in a data folder cannot redirect
    the write), and a hard link to it keeps the old content."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = fresh_file(target)
    try:
        yield scratch
        if target.is_file() and not target.is_symlink():
            os.chmod(scratch, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)  # gone after the rename; a failed write's leftover
