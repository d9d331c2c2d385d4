"""benchmarks/records.py (what every record carries, the record file) and
benchmarks/exact_svm.py on small files in the real formats (CovType's UCI CSV, IDX)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from formats import make_mnist_dir, write_covtype
from sklearn.svm import SVC

records = pytest.importorskip("records")
report = pytest.importorskip("report")
exact_svm = pytest.importorskip("exact_svm")


def test_store_replaces_by_name_keeps_the_rest_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    first = records.record("a", {"x": 1}, "demo.py", ["--k", "2"])
    records.store(path, first, "demo", {"t": {"rows": ["a"], "columns": [["x", "{x}"]]}})
    records.store(path, records.record("b", {"x": 2}, "demo.py", []), "demo", {})
    again = records.record("a", {"x": 3}, "demo.py", [])
    kept = records.store(path, again, "demo", lambda rs: {"n": len(rs)})
    data = json.loads(path.read_text())
    assert [r["name"] for r in kept] == ["b", "a"] == [r["name"] for r in data["records"]]
    assert data["records"][1]["figures"] == {"x": 3} and data["tables"] == {"n": 2}
    assert report.missing_fields(data) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_command_names_the_script_its_arguments_and_the_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert records.command("x.py", ["--a", "1"]) == "OMP_NUM_THREADS=1 python benchmarks/x.py --a 1"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert records.command("x.py", []) == "python benchmarks/x.py"


def test_commit_says_when_the_code_measured_is_not_the_commits(tmp_path: Path) -> None:
    """A record's commit: the short hash, ``+uncommitted`` once a tracked file outside
    ``benchmarks/results/`` changes; the records themselves changing does not count."""
    import subprocess

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "lib.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "results" / "r.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    head = git("rev-parse", "--short", "HEAD")
    assert records.commit(tmp_path) == head
    (tmp_path / "benchmarks" / "results" / "r.json").write_text('{"records": []}\n')
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert records.commit(tmp_path) == head
    (tmp_path / "lib.py").write_text("x = 2\n")
    assert records.commit(tmp_path) == head + "+uncommitted"
    assert records.commit(tmp_path / "benchmarks" / "results" / "r.json") == "unknown"


def test_subsample_is_stratified() -> None:
    y = np.repeat([0, 1, 2], [60, 30, 10])
    x = np.arange(100.0)[:, None]
    x_kept, y_kept = exact_svm.subsample(x, y, 50)
    assert np.bincount(y_kept).tolist() == [30, 15, 5] and len(x_kept) == 50
    assert exact_svm.subsample(x, y, None)[0] is x


def test_exact_svm_record_is_the_svc_of_the_chosen_c(tmp_path: Path) -> None:
    write_covtype(tmp_path / "covtype.data.gz", n=300)
    out = tmp_path / "exact_svm.json"
    args = f"--dataset covtype --root {tmp_path} --train-rows 150 --cv-rows 90 --cs 1 10"
    new = exact_svm.main([*args.split(), "--output", str(out)])
    figures = new["figures"]
    assert new["name"] == "covtype_150" and figures["train_rows"] == 150
    assert figures["C"] in (1.0, 10.0) and figures["cv_rows"] == 90
    x_train, y_train, x_test, y_test = exact_svm.load("covtype", str(tmp_path))
    x_fit, y_fit = exact_svm.subsample(x_train, y_train, 150)
    svc = SVC(gamma=0.974, C=figures["C"]).fit(x_fit, y_fit)
    assert figures["test_acc"] == pytest.approx(100 * svc.score(x_test, y_test), abs=1e-9)
    table = report.render("exact_svm", results=tmp_path)
    assert "covtype" in table and f"{figures['test_acc']:.2f} %" in table


@pytest.mark.parametrize("dataset", ["mnist", "fashion"])
def test_exact_svm_loads_the_idx_data_sets_scaled_to_the_unit_interval(
    tmp_path: Path, dataset: str
) -> None:
    written = make_mnist_dir(tmp_path, gz=True, train_max=100, test_pixel=200)
    x_train, y_train, x_test, y_test = exact_svm.load(dataset, str(tmp_path))
    assert x_train.dtype == np.float64 and x_train.shape == (len(written["x_train"]), 784)
    reference = written["x_train"].reshape(len(x_train), -1).astype(np.float64) / 100.0
    np.testing.assert_allclose(x_train, reference, rtol=0, atol=1e-6)
    assert x_test.max() == pytest.approx(2.0, abs=1e-6)
    assert y_train.tolist() == written["y_train"].tolist()
    assert y_test.tolist() == written["y_test"].tolist()
