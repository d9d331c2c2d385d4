"""Opening data files that may be gzip-compressed (detected from the content, not the name).

Only regular files are read (a link to ``/dev/zero`` never ends), and a gzip file is
decompressed only up to :data:`MAX_EXPANSION` times its size (at least
:data:`EXPANSION_FLOOR` bytes): data sets compress 4 to 10 times, a decompression bomb
a thousand.
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from pathlib import Path
from typing import IO

__all__ = ["EXPANSION_FLOOR", "MAX_EXPANSION", "open_maybe_gzip", "read_bytes", "read_text"]

_GZIP_MAGIC = b"\x1f\x8b"
#: A gzip file is refused once it has expanded to more than this many times its size...
MAX_EXPANSION = 100
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


def open_maybe_gzip(path: Path, owner: str | None = None) -> IO[bytes] | gzip.GzipFile:
    """Open ``path`` (a regular file) for binary reading, decompressing if it starts
    with the gzip magic.

    Raises:
        ValueError: ``path`` is not a regular file.
    """
    _check_regular(path, owner)
    with open(path, "rb") as fh:
        head = fh.read(2)
    if head == _GZIP_MAGIC:
        return gzip.GzipFile(path, "rb")
    return open(path, "rb")


def read_bytes(path: Path, owner: str | None = None) -> bytes:
    """The bytes of ``path`` (decompressed if gzipped).

    Args:
        path: the file.
        owner: the caller's name, which prefixes the message.

    Raises:
        ValueError: not a regular file, a truncated or corrupt gzip file, or one that
            expands beyond :data:`MAX_EXPANSION` times its size.
    """
    limit = max(MAX_EXPANSION * os.path.getsize(path), EXPANSION_FLOOR)
    try:
        with open_maybe_gzip(path, owner) as fh:
            if not isinstance(fh, gzip.GzipFile):
                return fh.read()  # a regular file: its size on disk
            chunks, size = [], 0
            while chunk := fh.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    prefix = f"{owner}: " if owner else ""
                    raise ValueError(
                        f"{prefix}'{path}' expands to more than {limit} bytes, over "
                        f"{MAX_EXPANSION} times its size: not a data file (a "
                        "decompression bomb?)"
                    )
                chunks.append(chunk)
            return b"".join(chunks)
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(
            f"{prefix}'{path}' is a truncated or corrupt gzip file ({err}); download it again"
        ) from err


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` (decompressed if gzipped; a byte-order mark, as
    spreadsheets write one, dropped).

    Raises:
        ValueError: as :func:`read_bytes`, or bytes that are not UTF-8 text.
    """
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig", errors="strict")
    except UnicodeDecodeError as err:
        raise ValueError(f"'{path}' is not a UTF-8 text (CSV) file ({err})") from err
