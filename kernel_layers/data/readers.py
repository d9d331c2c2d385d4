"""File-format readers and network guards behind :mod:`kernel_layers.data` (private).

Everything here works on plain files and NumPy arrays; the Lightning data modules in
:mod:`kernel_layers.data` decide where the files live and how the arrays are split and
scaled.

Formats:

* **IDX** (MNIST, Fashion-MNIST): a 4-byte magic number ``0x00 0x00 <type> <ndim>``,
  ``ndim`` big-endian ``uint32`` dimensions, then the values in big-endian order.
  Images use ``0x00000803`` (``uint8``, 3 dims), labels ``0x00000801`` (``uint8``,
  1 dim). Files may be gzip-compressed (detected from the content, not the name).
* **UCI CovType CSV** (``covtype.data[.gz]``): 581012 comma-separated rows of 54
  integer features followed by the cover type ``1..7``.
* **UCI Letter CSV** (``letter-recognition.data[.gz]``): 20000 rows of a capital letter
  ``A..Z`` followed by 16 integer features.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

__all__ = [
    "DOWNLOAD_TIMEOUT_S",
    "IDX_DTYPES",
    "PROBE_TIMEOUT_S",
    "DatasetNotFoundError",
    "check_network",
    "download_timeout",
    "read_arrays",
    "read_covtype_csv",
    "read_feature_rows",
    "read_idx",
    "read_letter_csv",
    "write_arrays",
    "write_idx",
]

#: Seconds allowed to open a TCP connection to a download host before giving up.
PROBE_TIMEOUT_S = 5.0
#: Default socket timeout (seconds) while a library downloads, so a stalled transfer
#: fails instead of hanging forever.
DOWNLOAD_TIMEOUT_S = 60.0

#: IDX type code -> big-endian NumPy dtype.
IDX_DTYPES: dict[int, str] = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}
_GZIP_MAGIC = b"\x1f\x8b"

#: Number of columns of the UCI CovType CSV (54 features + the label).
COVTYPE_COLUMNS = 55
#: Number of columns of the UCI Letter CSV (the label + 16 features).
LETTER_COLUMNS = 17


class DatasetNotFoundError(FileNotFoundError):
    """The data files are neither on disk nor downloadable (offline, no cache).

    The message names the directory to fill and the files expected there.
    """


def _open_maybe_gzip(path: Path) -> IO[bytes] | gzip.GzipFile:
    """Open ``path`` for binary reading, decompressing if it starts with the gzip magic."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    if head == _GZIP_MAGIC:
        return gzip.GzipFile(path, "rb")
    return open(path, "rb")


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a native-endian array.

    Args:
        path: file in the IDX format of LeCun's MNIST distribution.

    Returns:
        np.ndarray[d_1, ..., d_k]: the stored values, shape taken from the header, dtype
        from the type code (``uint8`` for MNIST images ``[N, 28, 28]`` and labels ``[N]``).

    Raises:
        ValueError: the header is not an IDX header or the payload is truncated.
    """
    path = Path(path)
    try:
        with _open_maybe_gzip(path) as fh:
            raw = fh.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise ValueError(
            f"read_idx: '{path}' is a truncated or corrupt gzip file ({err}); download it again"
        ) from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(
            f"read_idx: '{path}' is not an IDX file (expected magic 0x0000TTNN, got "
            f"{raw[:4].hex() or 'an empty file'})"
        )
    type_code, ndim = raw[2], raw[3]
    if type_code not in IDX_DTYPES:
        raise ValueError(
            f"read_idx: '{path}' has unknown IDX type code 0x{type_code:02x} "
            f"(expected one of {sorted(hex(c) for c in IDX_DTYPES)})"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"read_idx: '{path}' is truncated inside its header")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[type_code])
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header < count * dtype.itemsize:
        raise ValueError(
            f"read_idx: '{path}' is truncated: header announces shape {shape} "
            f"({count * dtype.itemsize} bytes), file holds {len(raw) - header} bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | os.PathLike[str], array: np.ndarray, *, compress: bool = False) -> None:
    """Write ``array`` as an IDX file (the inverse of :func:`read_idx`).

    Args:
        path: destination file.
        array (np.ndarray[d_1, ..., d_k]): values of a dtype listed in :data:`IDX_DTYPES`.
        compress: gzip the file.

    Raises:
        ValueError: the dtype has no IDX type code.
    """
    array = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in IDX_DTYPES.items()}
    key = array.dtype.newbyteorder("=")
    if key not in codes:
        raise ValueError(
            f"write_idx: dtype {array.dtype} has no IDX type code "
            f"(expected one of {sorted(str(d) for d in codes)})"
        )
    code = codes[key]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = np.ascontiguousarray(array, dtype=IDX_DTYPES[code]).tobytes()
    opener = gzip.open if compress else open
    with opener(path, "wb") as fh:
        fh.write(header + payload)


def _read_text(path: Path) -> str:
    try:
        with _open_maybe_gzip(path) as fh:
            data = fh.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise ValueError(
            f"'{path}' is a truncated or corrupt gzip file ({err}); download it again"
        ) from err
    try:
        return data.decode("ascii", errors="strict")
    except UnicodeDecodeError as err:
        raise ValueError(f"'{path}' is not a text (ASCII CSV) file ({err})") from err


def write_arrays(path: str | os.PathLike[str], x: np.ndarray, y: np.ndarray) -> None:
    """Keep downloaded ``x``, ``y`` as a ``.npz`` of plain arrays (atomically)."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp.npz")
    np.savez(tmp, x=np.asarray(x), y=np.asarray(y))
    os.replace(tmp, out)


def read_arrays(
    path: str | os.PathLike[str], *, owner: str = "read_arrays"
) -> tuple[np.ndarray, np.ndarray]:
    """``x``, ``y`` from :func:`write_arrays`' file, refusing pickled objects.

    Raises:
        ValueError: the file is not such an archive (or holds objects).
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            return archive["x"], archive["y"]
    except (ValueError, KeyError, OSError) as err:
        raise ValueError(
            f"{owner}: '{path}' must be a .npz archive of plain arrays 'x' and 'y' ({err})"
        ) from err


def read_covtype_csv(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """Read the UCI ``covtype.data`` CSV (optionally gzip-compressed).

    Args:
        path: ``covtype.data`` or ``covtype.data.gz``.

    Returns:
        tuple: ``x (np.ndarray[N, 54])`` int32 features (the file holds integers: parsed
        straight into 4 bytes a value, 125 MiB for the full file, no float64 table) and
        ``y (np.ndarray[N])`` int64 labels shifted from ``1..7`` to ``0..6``.

    Raises:
        ValueError: wrong number of columns, a value that is not an integer, or labels
            outside ``1..7``.
    """
    path = Path(path)
    with _open_maybe_gzip(path) as fh:
        try:
            table = np.loadtxt(fh, delimiter=",", dtype=np.int32, ndmin=2)
        except ValueError as err:
            raise ValueError(
                f"read_covtype_csv: cannot parse '{path}' as a CSV of integers (the UCI "
                f"layout): {err}"
            ) from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as err:
            raise ValueError(
                f"read_covtype_csv: '{path}' is a truncated or corrupt gzip file ({err}); "
                "download it again"
            ) from err
    if table.shape[1] != COVTYPE_COLUMNS:
        raise ValueError(
            f"read_covtype_csv: '{path}' must have {COVTYPE_COLUMNS} comma-separated columns "
            f"(54 features + cover type), got {table.shape[1]}"
        )
    labels = table[:, -1]
    if not np.all((labels >= 1) & (labels <= 7)):
        raise ValueError(f"read_covtype_csv: labels in '{path}' must be integers in 1..7")
    return table[:, :-1], labels.astype(np.int64) - 1


def read_letter_csv(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """Read the UCI ``letter-recognition.data`` CSV (optionally gzip-compressed).

    Args:
        path: ``letter-recognition.data`` (lines such as ``T,2,8,3,5,1,8,13,0,6,6,10,8,0,8,0,8``).

    Returns:
        tuple: ``x (np.ndarray[N, 16])`` float64 features and ``y (np.ndarray[N])`` int64
        labels, ``A..Z`` mapped to ``0..25``.

    Raises:
        ValueError: a line without 17 fields, a label that is not a capital letter, or a
            non-numeric feature.
    """
    path = Path(path)
    rows: list[list[str]] = []
    labels: list[int] = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        fields = line.split(",")
        if len(fields) != LETTER_COLUMNS:
            raise ValueError(
                f"read_letter_csv: line {lineno} of '{path}' must have {LETTER_COLUMNS} "
                f"comma-separated fields (letter + 16 features), got {len(fields)}"
            )
        letter = fields[0].strip()
        if len(letter) != 1 or not "A" <= letter <= "Z":
            raise ValueError(
                f"read_letter_csv: line {lineno} of '{path}' must start with a capital "
                f"letter A..Z, got {letter!r}"
            )
        labels.append(ord(letter) - ord("A"))
        rows.append(fields[1:])
    try:
        x = np.asarray(rows, dtype=np.float64).reshape(len(rows), LETTER_COLUMNS - 1)
    except ValueError as err:
        raise ValueError(f"read_letter_csv: non-numeric feature in '{path}': {err}") from None
    return x, np.asarray(labels, dtype=np.int64)


def check_network(urls: Sequence[str], *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when none of ``urls`` can be reached.

    Opens a TCP connection to each URL's host (first success wins) with a short
    timeout, so a machine without network, or behind a firewall that drops packets,
    gets an error in seconds instead of a download that hangs. Skipped when a proxy is
    configured (the direct probe would not tell anything then).

    Args:
        urls: candidate download URLs.
        timeout: seconds per connection attempt.

    Raises:
        OSError: no host answered; the message names the hosts and the last error.
    """
    if urllib.request.getproxies():
        return
    last: BaseException | None = None
    hosts: list[str] = []
    for url in urls:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.hostname
        if host is None:
            continue
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        hosts.append(host)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as err:
            last = err
    raise OSError(f"cannot reach {', '.join(hosts) or 'any host'} ({last})")


@contextlib.contextmanager
def download_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    """Temporarily set the default socket timeout (only when none is set).

    Args:
        seconds: socket timeout applied to connections opened inside the block.
    """
    previous = socket.getdefaulttimeout()
    if previous is None:
        socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        if previous is None:
            socket.setdefaulttimeout(None)


#: Image files read by :func:`read_feature_rows` from a folder.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def read_feature_rows(
    path: str | os.PathLike[str], input_shape: Sequence[int], *, owner: str = "read_feature_rows"
) -> np.ndarray:
    """Raw feature rows from a user file or image folder (no code is ever executed).

    Args:
        path: ``.npy`` (read with ``allow_pickle=False``), ``.csv`` (comma-separated
            numbers, an optional header row), or a folder of images (file-name order;
            decoded as grayscale for one channel, RGB for three; each must be
            ``input_shape``'s height x width).
        input_shape: the shape of one sample, ``(D,)`` or ``(C, H, W)``.
        owner: the caller's name for messages.

    Returns:
        np.ndarray[N, prod(input_shape)]: float64 rows in the file's units.

    Raises:
        ValueError: an unsupported file type, an empty source, or rows of the wrong size
            (the message names the file and both sizes).
    """
    source = Path(path)
    width = int(np.prod(input_shape))
    if source.is_dir():
        rows = _read_image_folder(source, input_shape, owner)
    elif source.suffix == ".npy":
        try:
            rows = np.load(source, allow_pickle=False)
        except ValueError as err:
            raise ValueError(
                f"{owner}: cannot read {str(source)!r} as a .npy array without pickles ({err})"
            ) from err
    elif source.suffix == ".csv":
        lines = [line for line in _read_text(source).splitlines() if line.strip()]
        if lines and not _is_numeric_row(lines[0]):
            lines = lines[1:]  # a header row
        try:
            rows = np.array([[float(v) for v in line.split(",")] for line in lines])
        except ValueError as err:
            raise ValueError(
                f"{owner}: cannot read {str(source)!r} as comma-separated numbers ({err})"
            ) from err
    else:
        raise ValueError(
            f"{owner}: argument 'path' must be a .npy or .csv file or an image folder, "
            f"got {str(source)!r}"
        )
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim == 0 or len(rows) == 0:
        raise ValueError(f"{owner}: {str(source)!r} holds no rows")
    rows = rows.reshape(len(rows), -1)
    if rows.shape[1] != width:
        raise ValueError(
            f"{owner}: {str(source)!r} must hold rows of {width} values (the data's "
            f"sample shape {tuple(input_shape)}), got {rows.shape[1]}"
        )
    if not np.isfinite(rows).all():
        raise ValueError(f"{owner}: {str(source)!r} holds NaN or Inf values")
    return rows


def _is_numeric_row(line: str) -> bool:
    try:
        [float(v) for v in line.split(",")]
    except ValueError:
        return False
    return True


def _read_image_folder(folder: Path, input_shape: Sequence[int], owner: str) -> np.ndarray:
    from PIL import Image

    if len(input_shape) != 3 or input_shape[0] not in (1, 3):
        raise ValueError(
            f"{owner}: an image folder needs image data (sample shape (1 or 3, H, W)), "
            f"got sample shape {tuple(input_shape)}"
        )
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(
            f"{owner}: the folder {str(folder)!r} holds no image ({list(IMAGE_SUFFIXES)})"
        )
    mode = "L" if input_shape[0] == 1 else "RGB"
    images = []
    for file in files:
        with Image.open(file) as opened:
            pixels = np.asarray(opened.convert(mode))
        image = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        if tuple(image.shape) != tuple(input_shape):
            raise ValueError(
                f"{owner}: image {str(file)!r} must have shape {tuple(input_shape)} "
                f"(channels, height, width), got {tuple(image.shape)}"
            )
        images.append(image)
    return np.stack(images).astype(np.float64)
