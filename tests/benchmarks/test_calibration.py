"""benchmarks/calibration.py: predict_proba's log-loss over five folds, against SVC."""

from __future__ import annotations

import json
from pathlib import Path

import calibration
import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import log_loss


def test_figures_are_the_folds_log_losses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two fixed "estimators" whose probabilities are known: the figures must be their
    # folds' log-losses, least true-class probabilities and accuracies.
    y = np.arange(40) % 2
    x = y[:, None].astype(float)  # standardised to -1 / +1: its sign is the class

    class Fixed(ClassifierMixin, BaseEstimator):
        def __init__(self, confidence: float = 0.5) -> None:
            self.confidence = confidence

        def fit(self, x: np.ndarray, y: np.ndarray) -> Fixed:
            self.classes_ = np.array([0, 1])
            return self

        def predict_proba(self, x: np.ndarray) -> np.ndarray:
            parity = (x[:, 0] > 0).astype(int)
            proba = np.full((len(x), 2), 1 - self.confidence)
            proba[np.arange(len(x)), parity] = self.confidence
            return proba

        def predict(self, x: np.ndarray) -> np.ndarray:
            return self.predict_proba(x).argmax(1)

    monkeypatch.setattr(
        calibration, "ESTIMATORS", {"di": lambda: Fixed(0.9), "svc": lambda: Fixed(0.3)}
    )
    figures = calibration.evaluate(x, y)
    assert figures["di_log_loss"] == pytest.approx(-np.log(0.9), rel=1e-12)
    assert figures["di_worst_log_loss"] == pytest.approx(-np.log(0.9), rel=1e-12)
    assert figures["di_least_p"] == pytest.approx(0.9) and figures["di_acc"] == 100.0
    assert figures["svc_log_loss"] == pytest.approx(log_loss([0, 1], [[0.3, 0.7], [0.7, 0.3]]))
    assert figures["svc_acc"] == 0.0 and (figures["rows"], figures["folds"]) == (40, 5)


def test_a_run_writes_one_record_per_data_set(tmp_path: Path) -> None:
    output = tmp_path / "calibration.json"
    calibration.main(["--datasets", "iris", "--output", str(output)])
    data = json.loads(output.read_text())
    (record,) = data["records"]
    assert record["name"] == "iris" and record["figures"]["rows"] == 150
    assert data["tables"]["calibration"]["rows"] == ["iris"]
    figures = record["figures"]
    assert figures["di_worst_log_loss"] >= figures["di_log_loss"] > 0
    assert 0 < figures["di_least_p"] < 1 and 80 < figures["di_acc"] <= 100
