"""Opening data files that may be gzip-compressed (detected from the content, not the name).

Only regular files are read (a link to ``/dev/zero`` never ends), and a gzip file is
decompressed only up to :data:`MAX_EXPANSION` times its size (at least
:data:`EXPANSION_FLOOR` bytes): data sets compress 4 to 10 times, sparse one-hot tables
a few hundred, while deflate's limit, which a decompression bomb of one layer reaches,
is about 1030.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from pathlib import Path
from typing import IO, Any

__all__ = [
    "EXPANSION_FLOOR",
    "MAX_EXPANSION",
    "ExpansionLimitError",
    "open_maybe_gzip",
    "read_bytes",
    "read_text",
]

_GZIP_MAGIC = b"\x1f\x8b"
#: A gzip file is refused once it has expanded to more than this many times its size...
MAX_EXPANSION = 1000
#: ... and more than this many bytes.
EXPANSION_FLOOR = 64 * 2**20
_CHUNK = 2**20


def _check_regular(path: Path, owner: str | None) -> None:
    """Refuse anything but a regular file (links are followed to their target)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        prefix = f"{owner}: " if owner else ""
        kind = "directory" if stat.S_ISDIR(mode) else "device, pipe or socket"
        raise ValueError(f"{prefix}'{path}' must be a regular file, got a {kind}")


class ExpansionLimitError(ValueError):
    """A gzip file that expands beyond :data:`MAX_EXPANSION` times its size."""


class _Bounded(io.RawIOBase):
    """A gzip stream that raises once it has given more than ``limit`` bytes."""

    def __init__(self, inner: gzip.GzipFile, limit: int, message: str) -> None:
        super().__init__()
        self._inner, self._limit, self._message, self._given = inner, limit, message, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._inner.readinto(buffer)
        self._given += count
        if self._given > self._limit:
            raise ExpansionLimitError(self._message)
        return count

    def close(self) -> None:
        self._inner.close()
        super().close()


def open_maybe_gzip(path: Path, owner: str | None = None) -> IO[bytes]:
    """Open ``path`` (a regular file) for binary reading, decompressing if it starts
    with the gzip magic; a gzip stream raises a ``ValueError`` once it has expanded to
    more than :data:`MAX_EXPANSION` times the file's size (at least
    :data:`EXPANSION_FLOOR` bytes).

    Raises:
        ValueError: ``path`` is not a regular file.
    """
    _check_regular(path, owner)
    with open(path, "rb") as fh:
        head = fh.read(2)
    if head != _GZIP_MAGIC:
        return open(path, "rb")
    limit = max(MAX_EXPANSION * os.path.getsize(path), EXPANSION_FLOOR)
    prefix = f"{owner}: " if owner else ""
    message = (
        f"{prefix}'{path}' expands to more than {limit} bytes, over {MAX_EXPANSION} times "
        "its size: not a data file (a decompression bomb?)"
    )
    return io.BufferedReader(_Bounded(gzip.GzipFile(path, "rb"), limit, message), _CHUNK)


def read_bytes(path: Path, owner: str | None = None) -> bytes:
    """The bytes of ``path`` (decompressed if gzipped).

    Args:
        path: the file.
        owner: the caller's name, which prefixes the message.

    Raises:
        ValueError: not a regular file, a truncated or corrupt gzip file, or one that
            expands beyond :data:`MAX_EXPANSION` times its size.
    """
    try:
        with open_maybe_gzip(path, owner) as fh:
            return fh.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(
            f"{prefix}'{path}' is a truncated or corrupt gzip file ({err}); download it again"
        ) from err


def read_text(path: Path, owner: str | None = None) -> str:
    """The UTF-8 text of ``path`` (decompressed if gzipped; a byte-order mark, as
    spreadsheets write one, dropped).

    Raises:
        ValueError: as :func:`read_bytes`, or bytes that are not UTF-8 text.
    """
    data = read_bytes(path, owner)
    try:
        return data.decode("utf-8-sig", errors="strict")
    except UnicodeDecodeError as err:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}'{path}' is not a UTF-8 text (CSV) file ({err})") from err
