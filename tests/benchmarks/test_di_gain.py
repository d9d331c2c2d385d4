"""benchmarks/di_gain.py: untrained vs DI-trained ridge accuracy per gamma, on digits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

di_gain = pytest.importorskip("di_gain")


def test_di_gain_reports_untrained_and_trained_accuracy_per_gamma(tmp_path: Path) -> None:
    out = tmp_path / "gain.jsonl"
    rows = di_gain.main(
        [
            *("--dataset", "digits", "--gammas", "0.005", "0.05", "--dims", "24"),
            *("--rows", "1000", "--batch", "200", "--epochs", "6", "--every", "3"),
            *("--lr", "0.05", "--json", str(out)),
        ]
    )
    assert [r["gamma"] for r in rows] == [0.005, 0.05]
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    for row in rows:
        assert row["rows"] == 1000 and row["J"] == 24
        assert [epoch for epoch, _ in row["trained"]] == [3, 6]
        assert row["gain"] == pytest.approx(row["trained"][-1][1] - row["untrained"], abs=1e-4)
        assert 0.3 < row["untrained"] < 1.0
    # On digits DI training of 24 landmarks helps at either bandwidth.
    assert all(row["gain"] > 0.01 for row in rows), rows


def test_ard_learns_bandwidths_from_the_same_untrained_map() -> None:
    args = [
        *("--dataset", "digits", "--gammas", "0.05", "--dims", "24", "--rows", "1000"),
        *("--batch", "200", "--epochs", "4", "--every", "4", "--lr", "0.05"),
    ]
    plain, ard = di_gain.main(args)[0], di_gain.main([*args, "--ard"])[0]
    assert ard["ard"] is True and plain["ard"] is False
    assert ard["untrained"] == plain["untrained"]  # every bandwidth starts at 1
    assert ard["trained"] != plain["trained"]  # the bandwidths trained
    assert ard["gain"] > 0.01
