"""The IDX format of the MNIST and Fashion-MNIST files: reader and writer.

A 4-byte magic number ``0x00 0x00 <type> <ndim>``, ``ndim`` big-endian ``uint32``
dimensions, then the values in big-endian order. Images use ``0x00000803`` (``uint8``,
3 dims), labels ``0x00000801`` (``uint8``, 1 dim). Files may be gzip-compressed
(detected from the content, not the name).
"""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import numpy as np

from kernel_layers.data.gzipped import read_bytes

__all__ = ["IDX_DTYPES", "read_idx", "write_idx"]

#: IDX type code -> big-endian NumPy dtype.
IDX_DTYPES: dict[int, str] = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a native-endian array.

    Args:
        path: file in the IDX format of LeCun's MNIST distribution.

    Returns:
        np.ndarray[d_1, ..., d_k]: the stored values, shape taken from the header, dtype
        from the type code (``uint8`` for MNIST images ``[N, 28, 28]`` and labels ``[N]``).

    Raises:
        ValueError: the header is not an IDX header, or the payload's size differs from the
            header's (truncated, or trailing bytes the header does not count).
    """
    path = Path(path)
    raw = read_bytes(path, "read_idx")
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
    count = math.prod(shape)  # Python integers: no overflow for any header
    payload = len(raw) - header
    if payload != count * dtype.itemsize:
        short = payload < count * dtype.itemsize
        problem = "is truncated" if short else "is longer than its header"
        raise ValueError(
            f"read_idx: '{path}' {problem}: header announces shape {shape} "
            f"({count * dtype.itemsize} bytes), file holds {payload} bytes after the header "
            "(the sizes must agree)"
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
