"""benchmarks/suite_data.py: each loader of the suite reads small files written in the real
layouts (the CSVs of ``mlbench_data.py``, UCI's gzip CovType) into float64 features and
the labels of the file."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

suite_data = pytest.importorskip("suite_data")

# (loader, file, header, rows); the class is the last column (the first for Letter).
MLBENCH = {
    "sonar": (
        "Sonar",
        "V1,V2,V3,Class",
        ["0.02,0.0371,0.0428,R", "0.0453,0.0523,0.0843,M", "0.1,0.2,0.3,R"],
    ),
    "ionosphere": ("Ionosphere", "V1,V2,V3,Class", ["1,0,0.99539,good", "1,0,-0.5,bad"]),
    "pima": (
        "PimaIndiansDiabetes",
        "pregnant,glucose,mass,diabetes",
        ["6.0,148.0,33.6,pos", "1.0,85.0,26.6,neg"],
    ),
    "vehicle": ("Vehicle", "Comp,Circ,Class", ["95.0,48.0,van", "91.0,41.0,saab", "1,2,bus"]),
    "dna": ("DNA", "V1,V2,V3,V4,Class", ["0,1,0,0,n", "1,0,0,1,ei", "0,0,1,0,ie"]),
    "satellite": ("Satellite", "x.1,x.2,classes", ["92.0,115.0,grey soil", "84,102,red soil"]),
    "shuttle": ("Shuttle", "V1,V2,Class", ["50.0,21.0,Fpv.Close", "55.0,0.0,High"]),
}


def _write(folder: Path, name: str, header: str, rows: list[str]) -> None:
    (folder / "mlbench").mkdir(exist_ok=True)
    (folder / "mlbench" / f"{name}.csv").write_text("\n".join([header, *rows]) + "\n")


@pytest.mark.parametrize("loader", sorted(MLBENCH))
def test_an_mlbench_loader_reads_the_features_as_float64_and_the_class_column(
    loader: str, tmp_path: Path
) -> None:
    name, header, rows = MLBENCH[loader]
    _write(tmp_path, name, header, rows)
    x, y = suite_data.LOADERS[loader](tmp_path)
    cells = [row.split(",") for row in rows]
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x, np.array([[float(v) for v in c[:-1]] for c in cells]))
    assert list(y) == [c[-1] for c in cells]


def test_vowel_drops_the_speaker_column(tmp_path: Path) -> None:
    _write(tmp_path, "Vowel", "V1,V2,V3,Class", ["0,-3.639,-0.67,hid", "14,1.5,2.0,hId"])
    x, y = suite_data.LOADERS["vowel"](tmp_path)
    np.testing.assert_array_equal(x, [[-3.639, -0.67], [1.5, 2.0]])
    assert list(y) == ["hid", "hId"]


def test_letter_takes_the_letter_from_the_first_column(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "LetterRecognition",
        "lettr,x.box,y.box",
        ["T,2.0,8.0", "I,5.0,12.0"],
    )
    x, y = suite_data.LOADERS["letter"](tmp_path)
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x, [[2.0, 8.0], [5.0, 12.0]])
    assert list(y) == ["T", "I"]
    _write(tmp_path, "LetterRecognition", "lettr,x.box,y.box", ["A,nan,1", "B,2,3"])
    with pytest.raises(ValueError, match=r"'.*LetterRecognition.csv' holds a missing or infin"):
        suite_data.LOADERS["letter"](tmp_path)
    _write(tmp_path, "LetterRecognition", "lettr,x.box,y.box", ["A,1,2", "B,2"])
    with pytest.raises(ValueError, match=r"line 3 has 2 columns, the header 3"):
        suite_data.LOADERS["letter"](tmp_path)


def test_covtype_reads_the_gzip_uci_file_with_labels_from_zero(tmp_path: Path) -> None:
    rows = [[2596 + i] + [i % 2] * 53 + [1 + i] for i in range(7)]
    (tmp_path / "covtype").mkdir()
    with gzip.open(tmp_path / "covtype" / "covtype.data.gz", "wt") as fh:
        fh.write("\n".join(",".join(map(str, row)) for row in rows) + "\n")
    x, y = suite_data.LOADERS["covtype"](tmp_path)
    assert x.shape == (7, 54) and x.dtype == np.float64
    np.testing.assert_array_equal(x[:, 0], [2596 + i for i in range(7)])
    np.testing.assert_array_equal(y, np.arange(7))


@pytest.mark.parametrize(
    ("loader", "shape", "classes"), [("breast_cancer", (569, 30), 2), ("digits", (1797, 64), 10)]
)
def test_the_bundled_data_sets(loader: str, shape: tuple[int, int], classes: int) -> None:
    x, y = suite_data.LOADERS[loader]()
    assert x.shape == shape and x.dtype == np.float64
    assert len(np.unique(y)) == classes and len(y) == shape[0]


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([], "holds no data rows"),
        (["1.0,2.0,R", "1.0,R"], "line 3 has 2 columns, the header 3"),
        (["1.0,NA,R"], "line 2 holds a feature that is not a number"),
        (["1.0,inf,R"], "missing or infinite feature"),
    ],
)
def test_a_malformed_csv_is_refused_naming_the_file(
    rows: list[str], match: str, tmp_path: Path
) -> None:
    _write(tmp_path, "Sonar", "V1,V2,Class", rows)
    with pytest.raises(ValueError, match=match):
        suite_data.LOADERS["sonar"](tmp_path)


def test_the_suite_lists_at_least_eight_data_sets_from_hundreds_to_hundreds_of_thousands() -> None:
    assert len(suite_data.LOADERS) >= 8
    assert {"sonar", "covtype"} <= set(suite_data.LOADERS)
