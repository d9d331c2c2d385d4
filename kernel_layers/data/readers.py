"""File-format readers and network guards behind :mod:`kernel_layers.data` (private).

Everything here works on plain files and NumPy arrays; the Lightning data modules in
:mod:`kernel_layers.data` decide where the files live and how the arrays are split and
scaled. This module reads the UCI CSV files and the ``.npz`` cache of downloaded arrays,
and gathers the names of the other readers (:mod:`~kernel_layers.data.idx`,
:mod:`~kernel_layers.data.user_files`) and of the network guards
(:mod:`~kernel_layers.data.network`). The data modules call ``readers.check_network``
through this module, so replacing it here replaces it for all of them.

Formats:

* **UCI CovType CSV** (``covtype.data[.gz]``): 581012 comma-separated rows of 54
  integer features followed by the cover type ``1..7``.
* **UCI Letter CSV** (``letter-recognition.data[.gz]``): 20000 rows of a capital letter
  ``A..Z`` followed by 16 integer features.
* **IDX** (MNIST, Fashion-MNIST): see :mod:`kernel_layers.data.idx`.
"""

from __future__ import annotations

import gzip
import io
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from kernel_layers._files import replacing
from kernel_layers.data.gzipped import ExpansionLimitError, open_maybe_gzip, read_text
from kernel_layers.data.idx import IDX_DTYPES, read_idx, write_idx
from kernel_layers.data.network import (
    DOWNLOAD_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    DatasetNotFoundError,
    check_network,
    download_timeout,
)
from kernel_layers.data.user_files import parse_float, read_feature_rows

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

#: Number of columns of the UCI CovType CSV (54 features + the label).
COVTYPE_COLUMNS = 55
#: Number of columns of the UCI Letter CSV (the label + 16 features).
LETTER_COLUMNS = 17


def write_arrays(path: str | os.PathLike[str], x: np.ndarray, y: np.ndarray) -> None:
    """Keep downloaded ``x``, ``y`` as a ``.npz`` of plain arrays (atomically, through a
    fresh temporary file that no link in the folder can redirect)."""
    with replacing(path) as tmp, tmp.open("wb") as fh:  # a file object: no ".npz" added
        np.savez(fh, x=np.asarray(x), y=np.asarray(y))


def read_arrays(
    path: str | os.PathLike[str], *, owner: str = "read_arrays"
) -> tuple[np.ndarray, np.ndarray]:
    """``x``, ``y`` from :func:`write_arrays`' file, refusing pickled objects.

    Raises:
        ValueError: the file is not such an archive (or holds objects).
    """
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a single .npy array
            raise ValueError(f"it holds a single {type(loaded).__name__}, not an archive")
        with loaded as archive:
            for name in ("x.npy", "y.npy"):
                _check_member_size(archive.zip, name)
            return archive["x"], archive["y"]
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(  # an empty, truncated or foreign file included
            f"{owner}: '{path}' must be a .npz archive of plain arrays 'x' and 'y' ({err})"
        ) from err


def _check_member_size(archive: zipfile.ZipFile, name: str) -> None:
    """Refuse an archive member whose ``.npy`` header claims more bytes than the member
    holds, before NumPy allocates them (a 300-byte file could claim terabytes)."""
    with archive.open(name) as member:
        read_header = (
            np.lib.format.read_array_header_1_0
            if np.lib.format.read_magic(member) == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read_header(member)
        claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if claimed > archive.getinfo(name).file_size:
            raise ValueError(
                f"its member {name!r} claims shape {shape} of {dtype} ({claimed} bytes) "
                f"in {archive.getinfo(name).file_size} bytes"
            )


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
    with open_maybe_gzip(path, "read_covtype_csv") as fh:
        try:
            # comments=None: a line "# ..." is not skipped but refused, as any other text
            # read as text: a byte-order mark dropped, "\r" line ends understood
            text = io.TextIOWrapper(fh, encoding="utf-8-sig", newline=None)
            table = np.loadtxt(text, delimiter=",", dtype=np.int32, ndmin=2, comments=None)
        except ExpansionLimitError:
            raise  # its message says what is wrong; it is no parse error
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
    outside = ~((labels >= 1) & (labels <= 7))  # integers: the table is read as int32
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise ValueError(
            f"read_covtype_csv: labels in '{path}' must be integers in 1..7, got "
            f"{labels[row]:g} in row {row}"
        )
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
    rows: list[list[float]] = []
    labels: list[int] = []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
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
        try:
            rows.append([parse_float(field) for field in fields[1:]])
        except ValueError as err:
            raise ValueError(
                f"read_letter_csv: non-numeric feature on line {lineno} of '{path}': {err}"
            ) from None
    x = np.asarray(rows, dtype=np.float64).reshape(len(rows), LETTER_COLUMNS - 1)
    return x, np.asarray(labels, dtype=np.int64)
