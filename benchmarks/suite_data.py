"""Loaders of the small-data suite (``suite.py``): one function per data set, each
returning ``(x, y)``: ``x (np.ndarray[N, D])`` float64 features and ``y (np.ndarray[N])``
the class labels (strings or integers, as the source writes them).

The sources, read from a data folder (``data/`` of the checkout, or
``$KERNEL_LAYERS_DATA``) and never downloaded:

* ``mlbench/<Name>.csv``: the UCI data sets of Debian's ``r-cran-mlbench`` package,
  extracted by ``mlbench_data.py`` (a header row, the class in the last column);
* ``covtype/covtype.data.gz``: UCI CovType, read by
  :func:`kernel_layers.data.readers.read_covtype_csv`;
* scikit-learn's bundled ``breast_cancer`` and ``digits`` (no files).

Factor columns: DNA's 180 binary indicators (the one-hot code of its 60 bases) and
Ionosphere's binary first column are kept as 0/1 columns, CovType's 44 indicator columns
likewise; Vowel's first column, the speaker (a factor of 15 levels), is dropped, as it
names who spoke rather than what; the other columns are numeric and read as they are
(Ionosphere's constant second column included: min-max scaling maps it to 0). No loader
drops a row.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kernel_layers.data.readers import read_covtype_csv

__all__ = ["DATA", "LOADERS", "read_mlbench_csv"]

#: The data folder: ``$KERNEL_LAYERS_DATA`` if set (a clone or worktree reading another
#: checkout's files), else ``data/`` of this checkout (ignored by git).
DATA = Path(os.environ.get("KERNEL_LAYERS_DATA") or Path(__file__).resolve().parents[1] / "data")

Arrays = tuple[np.ndarray, np.ndarray]


def read_mlbench_csv(path: Path, *, drop_first: int = 0, label_first: bool = False) -> Arrays:
    """An ``mlbench_data.py`` CSV: a header row, numeric columns, the class last.

    Args:
        path: the CSV file.
        drop_first: number of leading columns to skip (an identifier column).
        label_first: the class is the first column instead (Letter's layout).

    Returns:
        tuple: ``x (np.ndarray[N, D])`` float64 and ``y (np.ndarray[N])`` the class
        column as strings.

    Raises:
        ValueError: a file with no rows, rows of unequal length, or a feature that is not
            a number (missing values included), naming the file and the line.
    """
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise ValueError(f"read_mlbench_csv: '{path}' holds no data rows")
    width = len(rows[0])
    features, labels = [], []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            raise ValueError(
                f"read_mlbench_csv: '{path}' line {line} has {len(row)} columns, the header {width}"
            )
        label, values = (row[0], row[1:]) if label_first else (row[-1], row[drop_first:-1])
        try:
            features.append([float(value) for value in values])
        except ValueError:
            raise ValueError(
                f"read_mlbench_csv: '{path}' line {line} holds a feature that is not a "
                f"number: {values}"
            ) from None
        labels.append(label)
    x = np.asarray(features, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"read_mlbench_csv: '{path}' holds a missing or infinite feature")
    return x, np.asarray(labels)


def _mlbench(name: str, drop_first: int = 0) -> Callable[[Path], Arrays]:
    def load(data: Path = DATA) -> Arrays:
        return read_mlbench_csv(data / "mlbench" / f"{name}.csv", drop_first=drop_first)

    load.__name__ = name.lower()
    load.__doc__ = f"``mlbench/{name}.csv`` of the data folder ``data``."
    return load


sonar = _mlbench("Sonar")
ionosphere = _mlbench("Ionosphere")
pima = _mlbench("PimaIndiansDiabetes")
vehicle = _mlbench("Vehicle")
vowel = _mlbench("Vowel", drop_first=1)  # V1: the speaker (0..14), not a feature
dna = _mlbench("DNA")
satellite = _mlbench("Satellite")
shuttle = _mlbench("Shuttle")


def _letter(data: Path = DATA) -> Arrays:
    """``mlbench/LetterRecognition.csv``: the letter is the first column."""
    return read_mlbench_csv(data / "mlbench" / "LetterRecognition.csv", label_first=True)


letter = _letter


def breast_cancer(data: Path = DATA) -> Arrays:
    """scikit-learn's bundled Wisconsin diagnostic breast cancer (569 x 30)."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return x.astype(np.float64), y


def digits(data: Path = DATA) -> Arrays:
    """scikit-learn's bundled digits (1797 x 64)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x.astype(np.float64), y


def covtype(data: Path = DATA) -> Arrays:
    """``covtype/covtype.data.gz``: 581,012 x 54 (the 44 binary indicator columns of the
    wilderness area and soil type kept as 0/1), labels ``0..6``."""
    x, y = read_covtype_csv(data / "covtype" / "covtype.data.gz")
    return x.astype(np.float64), y


#: name -> loader, smallest first (the order the suite runs them in).
LOADERS: dict[str, Callable[..., Arrays]] = {
    "sonar": sonar,
    "ionosphere": ionosphere,
    "breast_cancer": breast_cancer,
    "pima": pima,
    "vehicle": vehicle,
    "vowel": vowel,
    "digits": digits,
    "dna": dna,
    "satellite": satellite,
    "letter": letter,
    "shuttle": shuttle,
    "covtype": covtype,
}
