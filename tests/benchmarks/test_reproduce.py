"""Smoke test of the paper-reproduction script (benchmarks/reproduce.py) and its grid,
read-outs and results (benchmarks/section5_*.py), offline on digits."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from formats import make_mnist_dir, write_covtype, write_letter

reproduce = pytest.importorskip("reproduce")
grid = pytest.importorskip("section5_grid")
readouts = pytest.importorskip("section5_readouts")
results = pytest.importorskip("section5_results")


def test_quick_digits(tmp_path: Path) -> None:
    methods = ["standard-nystrom", "kmeans-nystrom", "di-nystrom", "ls-fourier", "ce-fourier"]
    rows = reproduce.main(
        [
            *("--dataset", "digits", "--quick", "--dims", "16", "--out", str(tmp_path)),
            *("--max-epochs", "2", "--methods", *methods),
        ]
    )
    assert [r["method"] for r in rows] == methods
    for row in rows:
        assert 0.5 < row["test_acc"] <= 1.0, row
        assert 0.0 <= row["svm_test_acc"] <= 1.0
        assert row["train_mse"] > 0 and row["test_mse"] > 0
        assert row["epochs"] == (0 if row["objective"] == "none" else 2)
    assert math.isnan(rows[0]["readout_test_acc"]) and not math.isnan(rows[-1]["readout_test_acc"])
    written = results.read_csv(tmp_path / "digits.csv")
    assert len(written) == len(methods) and set(written[0]) == set(results.FIELDS)
    assert (tmp_path / "digits_accuracy.png").stat().st_size > 0
    assert (tmp_path / "digits_mse.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("dataset", "classes"), [("mnist", 10), ("fashion-mnist", 10), ("covtype", 7), ("letter", 26)]
)
def test_quick_runs_unchanged_on_the_paper_datasets(
    tmp_path: Path, dataset: str, classes: int
) -> None:
    """The same protocol reads each dataset from files in its real format (no network)."""
    root = tmp_path / "data"
    if dataset.endswith("mnist"):
        make_mnist_dir(root)
    elif dataset == "covtype":
        root.mkdir()
        write_covtype(root / "covtype.data.gz", n=200)
    else:
        root.mkdir()
        write_letter(root / "letter-recognition.data", n=200)
    methods = ["standard-nystrom", "di-fourier", "ls-nystrom"]
    rows = reproduce.main(
        [
            *("--dataset", dataset, "--root", str(root), "--quick", "--dims", "12"),
            *("--max-epochs", "1", "--methods", *methods, "--out", str(tmp_path)),
        ]
    )
    assert [r["method"] for r in rows] == methods
    for row in rows:
        assert row["dataset"] == dataset and row["J"] == 12
        assert 0.0 <= row["test_acc"] <= 1.0 and 0.0 <= row["svm_test_acc"] <= 1.0
        assert math.isfinite(row["train_mse"]) and math.isfinite(row["test_mse"])
        assert 0.0 < row["gamma"] < math.inf
    assert rows[1]["epochs"] == 1 and rows[1]["batch_size"] > 12
    # An intercept alone leaves a one-hot train MSE of at most 1 - 1/classes; the 12 kernel
    # features must explain part of the rest.
    assert rows[0]["train_mse"] < 1.0 - 1.0 / classes - 0.01


def test_expand_methods() -> None:
    assert grid.expand_methods(["ls", "di-fourier"]) == [
        "di-fourier",
        "ls-nystrom",
        "ls-fourier",
    ]
    with pytest.raises(ValueError, match="unknown method 'svm'"):
        grid.expand_methods(["svm"])


def test_merge_of_parallel_runs_reports_mean_and_std(tmp_path: Path) -> None:
    common = ["--dataset", "digits", "--quick", "--dims", "16", "--max-epochs", "1"]
    common += ["--methods", "standard-nystrom", "di-fourier", "--no-svm", "--out", str(tmp_path)]
    first = reproduce.main([*common, "--tag", "a", "--first-repeat", "0"])
    second = reproduce.main([*common, "--tag", "b", "--first-repeat", "1"])
    merged = reproduce.main(
        [*common, "--tag", "both", "--merge", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    )
    assert [(r["method"], int(r["repeat"])) for r in merged] == [
        (r["method"], r["repeat"]) for r in first + second
    ]
    assert (tmp_path / "both_accuracy.png").stat().st_size > 0
    table = results.results_table(merged).splitlines()
    assert table[0].startswith("| method | J | repeats | ridge acc | SVM acc |")
    row = next(line for line in table if line.startswith("| di-fourier | 16 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    accs = [100 * r["test_acc"] for r in first + second if r["method"] == "di-fourier"]
    assert cells[2] == "2" and cells[4] == "-"  # two repeats; the SVM was skipped
    assert cells[3] == f"{statistics.fmean(accs):.2f} ± {statistics.stdev(accs):.2f}"
    assert float(cells[7]) == 1  # epochs


def test_markdown_table_spread_only_over_several_repeats() -> None:
    rows = [
        {"method": "di-nystrom", "J": 10, "test_acc": 0.5},
        {"method": "di-nystrom", "J": 10, "test_acc": 0.7},
        {"method": "di-nystrom", "J": 20, "test_acc": 0.8125},
        {"method": "standard-nystrom", "J": 10, "test_acc": 0.25},
    ]
    lines = results.markdown_table(rows).splitlines()
    assert lines[0] == "| method | J=10 | J=20 |"
    std = 100 * statistics.stdev([0.5, 0.7])
    # METHODS order: untrained maps first; no spread for one repeat, empty cell if not run.
    assert lines[2] == "| standard-nystrom | 25.00 |  |"
    assert lines[3] == f"| di-nystrom | 60.00 ± {std:.2f} | 81.25 |"


def test_spread_only_over_the_repeats_that_measured_the_figure() -> None:
    """Three repeats of a map, the SVM read-out on one of them: its mean alone, no ``± 0``."""
    nan = float("nan")
    rows = [
        {"method": "di-nystrom", "J": 10, "test_acc": 0.5, "svm_test_acc": 0.625},
        {"method": "di-nystrom", "J": 10, "test_acc": 0.7, "svm_test_acc": nan},
        {"method": "di-nystrom", "J": 10, "test_acc": 0.6, "svm_test_acc": nan},
    ]
    assert results.markdown_table(rows, key="svm_test_acc").splitlines()[2] == (
        "| di-nystrom | 62.50 |"
    )
    std = 100 * statistics.stdev([0.5, 0.7, 0.6])
    assert results.markdown_table(rows).splitlines()[2] == f"| di-nystrom | 60.00 ± {std:.2f} |"
    for row in rows:
        row.update(train_mse=0.1, test_mse=0.2, epochs=3, seconds=1.0)
    cells = [c.strip() for c in results.results_table(rows).splitlines()[2].split("|")[1:-1]]
    assert cells[2] == "3" and cells[3] == f"60.00 ± {std:.2f}" and cells[4] == "62.50"


def test_incumbent_row_and_resume(tmp_path: Path) -> None:
    """The incumbent (scikit-learn Nystroem + LinearSVC) is a row like the others, with
    its fit time; a grid re-run with --append runs only the rows not yet in the CSV."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.svm import LinearSVC

    common = ["--dataset", "digits", "--quick", "--dims", "16", "--out", str(tmp_path)]
    first = reproduce.main([*common, "--methods", "incumbent", "--repeats", "1"])
    (row,) = first
    assert row["method"] == "sklearn-nystroem" and row["seconds"] > 0
    # the same pipeline by hand, on the same scaled data (in float64, which spares
    # LinearSVC its float64 copy of the features) and seed
    dm = grid.make_datamodule("digits", 16, root=None)
    dm.setup("fit")
    (xtr, ytr), (xte, yte) = dm.train_dataset.tensors, dm.test_dataset.tensors
    xtr64, xte64 = xtr.double().numpy(), xte.double().numpy()
    ny = Nystroem(gamma=row["gamma"], n_components=16, random_state=0).fit(xtr64)
    assert ny.transform(xtr64).dtype == np.float64
    svm = LinearSVC(random_state=0).fit(ny.transform(xtr64), ytr.numpy())
    expected = (svm.predict(ny.transform(xte64)) == yte.numpy()).mean()
    assert row["svm_test_acc"] == pytest.approx(expected, abs=1e-12)
    assert 0.3 < row["test_acc"] <= 1.0  # the ridge head on its features
    again = reproduce.main(
        [*common, "--methods", "incumbent", "standard-nystrom", "--repeats", "2", "--append"]
    )
    assert [(r["method"], r["repeat"]) for r in again] == [
        ("standard-nystrom", 0),  # methods in table order, the incumbent last
        ("standard-nystrom", 1),
        ("sklearn-nystroem", 1),
    ]
    assert len(results.read_csv(tmp_path / "digits.csv")) == 4


def test_svm_c_chosen_by_cross_validation(tmp_path: Path) -> None:
    """Several --svm-c: C is chosen by stratified 3-fold CV (the same search by hand
    agrees), recorded per row; an older CSV without the column is rewritten, not
    misaligned, when a run appends to it."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    x, y = np.random.default_rng(0).normal(size=(300, 5)), np.arange(300) % 3
    x[:, 0] += 2.0 * y  # separable along one column: a tiny C underfits
    cs = [1e-5, 1.0]
    chosen = readouts.choose_svm_c(x, y, cs, seed=0)
    search = GridSearchCV(
        make_pipeline(StandardScaler(), LinearSVC(random_state=0)),
        {"linearsvc__C": cs},
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
    ).fit(x, y)
    assert chosen == search.best_params_["linearsvc__C"] == 1.0
    assert readouts.choose_svm_c(x, y, [0.3], seed=0) == 0.3  # one value: no search

    common = ["--dataset", "digits", "--quick", "--dims", "16", "--out", str(tmp_path)]
    old = [{k: v for k, v in row.items() if k != "svm_c"} for row in reproduce.main(common)]
    with open(tmp_path / "digits.csv", "w", newline="") as fh:  # the layout before svm_c
        writer = csv.DictWriter(fh, fieldnames=[f for f in results.FIELDS if f != "svm_c"])
        writer.writeheader()
        writer.writerows(old)
    rows = reproduce.main(
        [
            *common,
            *("--methods", "standard-nystrom", "--repeats", "2", "--append"),
            *("--svm-c", "0.01", "1", "100"),
        ]
    )
    assert float(rows[0]["svm_c"]) in (0.01, 1.0, 100.0)
    written = results.read_csv(tmp_path / "digits.csv")
    assert list(written[0]) == results.FIELDS and len(written) == len(old) + 1
    assert written[-1]["svm_c"] == str(rows[0]["svm_c"]) and written[0]["svm_c"] == ""


def test_replace_runs_the_grid_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--append --replace runs the grid's rows again and replaces them in the CSV; rows
    outside the grid stay as they were; --replace alone is refused."""
    common = ["--dataset", "digits", "--quick", "--dims", "16", "--out", str(tmp_path)]
    reproduce.main([*common, "--methods", "standard-nystrom", "incumbent", "--no-svm"])
    path = tmp_path / "digits.csv"
    stale = results.read_csv(path)
    for row in stale:
        row["test_acc"] = "-1"  # a figure the re-run must replace
    results.write_csv(path, stale)
    again = reproduce.main(
        [
            *common,
            "--methods",
            "standard-nystrom",
            "--append",
            "--replace",
            "--svm-max-samples",
            "200",
        ]
    )
    assert [r["method"] for r in again] == ["standard-nystrom"]
    # each new row takes its old one's place; no file is left beside the CSV
    assert [r["method"] for r in results.read_csv(path)] == [r["method"] for r in stale]
    assert not list(tmp_path.glob("*.partial"))
    written = {r["method"]: r for r in results.read_csv(path)}
    assert float(written["standard-nystrom"]["test_acc"]) == again[0]["test_acc"] > 0
    assert written["standard-nystrom"]["svm_test_acc"] != "nan"  # the SVM read-out now
    assert written["sklearn-nystroem"]["test_acc"] == "-1"  # outside the grid: kept
    with pytest.raises(SystemExit):
        reproduce.main([*common, "--replace"])
    assert "--replace needs --append" in capsys.readouterr().err
