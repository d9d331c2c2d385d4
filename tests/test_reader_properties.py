"""Property tests (hypothesis) of the data readers: a random valid IDX or CSV file reads
back exactly what was written; a random corruption of an IDX file is refused with an
error that names the file."""

from __future__ import annotations

import csv
import gzip
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kernel_layers.data.idx import IDX_DTYPES, read_idx, write_idx
from kernel_layers.data.user_files import read_feature_rows

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_NATIVE = [np.dtype(code).newbyteorder("=") for code in IDX_DTYPES.values()]


@st.composite
def idx_arrays(draw: st.DrawFn) -> np.ndarray:
    """Arrays of every IDX dtype, 1 to 3 dimensions of 1 to 6 entries, any finite values."""
    dtype = draw(st.sampled_from(_NATIVE))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6))
    elements = (
        st.floats(width=8 * dtype.itemsize, allow_nan=False, allow_infinity=False)
        if dtype.kind == "f"
        else None
    )
    return draw(hnp.arrays(dtype, shape, elements=elements))


@SETTINGS
@given(idx_arrays(), st.booleans())
def test_a_random_idx_file_round_trips(array: np.ndarray, compress: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "a-idx"
        write_idx(path, array, compress=compress)
        got = read_idx(path)
    assert got.dtype == array.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got, array)


def _corrupt(raw: bytes, kind: str, amount: int) -> bytes:
    header = 4 + 4 * raw[3]
    if kind == "truncate":  # lose 1 .. all payload bytes, or cut into the header
        return raw[: max(len(raw) - amount, 0)]
    if kind == "append":  # bytes the header does not count
        return raw + bytes(amount)
    if kind == "magic":  # a non-zero byte in the magic number's zero half
        return bytes([amount % 255 + 1]) + raw[1:]
    if kind == "type":  # a type code outside the table
        codes = [c for c in range(256) if c not in IDX_DTYPES]
        return raw[:2] + bytes([codes[amount % len(codes)]]) + raw[3:]
    # "dims": a dimension enlarged, the payload left as it was
    dim = header - 4
    size = int.from_bytes(raw[dim:header], "big") + amount
    return raw[:dim] + min(size, 2**32 - 1).to_bytes(4, "big") + raw[header:]


@SETTINGS
@given(
    idx_arrays(),
    st.sampled_from(["truncate", "append", "magic", "type", "dims"]),
    st.integers(1, 64),
    st.booleans(),
)
def test_a_random_idx_corruption_is_refused_by_name(
    array: np.ndarray, kind: str, amount: int, compress: bool
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "damaged-idx3-ubyte"
        write_idx(path, array)
        raw = _corrupt(path.read_bytes(), kind, amount)
        if compress:
            raw = gzip.compress(raw)
        path.write_bytes(raw)
        with pytest.raises(ValueError, match=r"^read_idx: '.*damaged-idx3-ubyte' "):
            read_idx(path)


@st.composite
def csv_tables(draw: st.DrawFn) -> tuple[np.ndarray, list[str] | None]:
    """Finite float64 rows and a header: none, pandas' ``0..D-1`` (D >= 3), or text."""
    width = draw(st.integers(1, 6))
    rows = draw(
        hnp.arrays(
            np.float64,
            (draw(st.integers(1, 8)), width),
            elements=st.floats(allow_nan=False, allow_infinity=False),
        )
    )
    kinds = ["none", "text"] + (["pandas-int", "pandas-float"] if width >= 3 else [])
    kind = draw(st.sampled_from(kinds))
    header = {
        "none": None,
        "text": [f"x{i}" for i in range(width)],
        "pandas-int": [str(i) for i in range(width)],
        "pandas-float": [str(float(i)) for i in range(width)],
    }[kind]
    if header is None:  # the documented ambiguity: a first data row 0, 1, ..., D-1
        assume(rows[0].tolist() != [float(i) for i in range(width)])
    return rows, header


@SETTINGS
@given(csv_tables(), st.booleans())
def test_a_random_csv_file_round_trips(table, compress: bool) -> None:
    rows, header = table
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            if header is not None:
                writer.writerow(header)
            writer.writerows([[repr(v) for v in row] for row in rows.tolist()])
        if compress:
            path.write_bytes(gzip.compress(path.read_bytes()))
        got = read_feature_rows(path, (rows.shape[1],))
    np.testing.assert_array_equal(got, rows)


@SETTINGS
@given(csv_tables(), st.sampled_from(["text", "short", "long", "nan"]), st.data())
def test_a_random_csv_corruption_is_refused_by_name(table, kind: str, data) -> None:
    rows, header = table
    cells = [[repr(v) for v in row] for row in rows.tolist()]
    # A first row with text is a header by rule: corrupt a later one (or any, after one).
    first = 0 if header is not None else 1
    assume(len(cells) > first)
    row = data.draw(st.integers(first, len(cells) - 1))
    column = data.draw(st.integers(0, rows.shape[1] - 1))
    if kind == "text":
        cells[row][column] = data.draw(st.sampled_from(["x", "1,5", "", "0x10", "--1"]))
    elif kind == "short":
        del cells[row][column]
    elif kind == "long":
        cells[row].append("1.0")
    else:
        cells[row][column] = data.draw(st.sampled_from(["nan", "inf", "-inf", "1e999"]))
    assume(len(cells[row]) > 1 or any(cells[row]))  # a blank line is skipped
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "damaged.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            if header is not None:
                writer.writerow(header)
            writer.writerows(cells)
        with pytest.raises(ValueError, match=r"^read_feature_rows: .*'.*damaged.csv'"):
            read_feature_rows(path, (rows.shape[1],))
