"""Opening data files that may be gzip-compressed (detected from the content, not the name)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import IO

__all__ = ["open_maybe_gzip", "read_bytes", "read_text"]

_GZIP_MAGIC = b"\x1f\x8b"


def open_maybe_gzip(path: Path) -> IO[bytes] | gzip.GzipFile:
    """Open ``path`` for binary reading, decompressing if it starts with the gzip magic."""
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
        ValueError: a truncated or corrupt gzip file.
    """
    try:
        with open_maybe_gzip(path) as fh:
            return fh.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(
            f"{prefix}'{path}' is a truncated or corrupt gzip file ({err}); download it again"
        ) from err


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` (decompressed if gzipped; a byte-order mark, as
    spreadsheets write one, dropped).

    Raises:
        ValueError: a truncated or corrupt gzip file, or bytes that are not UTF-8 text.
    """
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig", errors="strict")
    except UnicodeDecodeError as err:
        raise ValueError(f"'{path}' is not a UTF-8 text (CSV) file ({err})") from err
