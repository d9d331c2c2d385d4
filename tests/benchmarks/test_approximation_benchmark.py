"""benchmarks/approximation.py --quick on digits: records in report.py's format, the
table and figure, and a second run that resumes (skips what is recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

approximation = pytest.importorskip("approximation")
report = pytest.importorskip("report")


def test_quick_run_writes_records_table_and_figure_and_resumes(tmp_path: Path) -> None:
    new = approximation.main(["--quick", "--out", str(tmp_path)])
    path = tmp_path / "approximation.json"
    data = json.loads(path.read_text())
    names = [f"digits J {j} {m}" for j in (20, 40) for m in approximation.METHODS]
    assert [r["name"] for r in data["records"]] == names == [r["name"] for r in new]
    assert report.missing_fields(data) == []
    by_name = {r["name"]: r["figures"] for r in data["records"]}
    for figures in by_name.values():
        assert 0 < figures["kernel_error"] < 1.5 and 0 < figures["kernel_error_spectral"] < 1.5
        assert 10 < figures["test_acc"] <= 100 and figures["rows"] == 200
        assert figures["epochs"] == (1 if figures["method"].startswith("di-") else 0)
    for method in ("standard-nystrom", "standard-fourier", "fastfood"):
        wide, narrow = by_name[f"digits J 40 {method}"], by_name[f"digits J 20 {method}"]
        assert wide["kernel_error"] < narrow["kernel_error"], method
    table = report.render("approximation_digits", results=tmp_path)
    assert len(table.splitlines()) == 2 + len(names)
    assert "| 40 | kmeans-nystrom |" in table
    assert (tmp_path / "approximation.png").stat().st_size > 0
    # The same command again: everything is recorded, nothing runs.
    assert approximation.main(["--quick", "--out", str(tmp_path)]) == []
    assert json.loads(path.read_text()) == data
