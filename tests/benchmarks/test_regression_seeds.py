"""benchmarks/regression.py: a run of another seed redraws the components, the mean
record over seeds is the mean of the stored runs, and the linear baseline is scikit-learn's
``RidgeCV``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import load_diabetes
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler

regression = pytest.importorskip("regression")
report = pytest.importorskip("report")


def _r2(seed: int, alpha: float | None = None) -> float:
    """``Nystroem`` + ``RidgeCV`` (``Ridge(alpha)`` if given) on diabetes drawn from
    ``seed``, computed here."""
    x_train, x_test, y_train, y_test = regression.split("diabetes")
    gamma = 1.0 / (x_train.shape[1] * x_train.var())
    width = regression.components(len(x_train))
    scale = StandardScaler().fit(y_train[:, None])
    model = make_pipeline(
        Nystroem(gamma=gamma, n_components=width, random_state=seed),
        RidgeCV(alphas=np.logspace(-4, 2, 13)) if alpha is None else Ridge(alpha=alpha),
    ).fit(x_train, scale.transform(y_train[:, None])[:, 0])
    predicted = scale.inverse_transform(model.predict(x_test)[:, None])[:, 0]
    return 1.0 - float(((y_test - predicted) ** 2).sum() / ((y_test - y_test.mean()) ** 2).sum())


def test_seed_runs_and_their_mean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "regression.json"
    args = ["--datasets", "diabetes", "--methods", "nystroem_ridge", "--output", str(out)]
    regression.main([*args, "--seed", "1"])
    regression.main([*args, "--seed", "2"])
    names = [r["name"] for r in json.loads(out.read_text())["records"]]
    assert "diabetes/nystroem_ridge@mean of seeds" not in names  # seed 0 is not stored yet
    regression.main(args)
    regression.main([*args, "--seed", "1", "--force"])  # the mean needs seed 0 too
    data = json.loads(out.read_text())
    by_name = {r["name"]: r for r in data["records"]}
    r2 = [
        by_name[f"diabetes/nystroem_ridge{tag}"]["figures"]["r2"]
        for tag in ("", "@seed1", "@seed2")
    ]
    assert r2 == pytest.approx([_r2(0), _r2(1), _r2(2)], abs=1e-9)
    assert len(set(r2)) == 3  # each seed draws other components
    mean = by_name["diabetes/nystroem_ridge@mean of seeds"]
    assert mean["figures"]["seeds"] == 3
    assert mean["figures"]["r2"] == pytest.approx(sum(r2) / 3, abs=1e-12)
    assert (mean["figures"]["r2_min"], mean["figures"]["r2_max"]) == (min(r2), max(r2))
    assert mean["command"].endswith("K in [1, 2]")
    assert data["tables"]["regression_seeds"]["rows"] == ["diabetes/nystroem_ridge@mean of seeds"]
    assert not any("seed" in n for n in data["tables"]["regression_variants"]["rows"])
    assert report.missing_fields(data) == []


def test_a_fixed_read_out_penalty_is_a_variant_with_its_own_seeds(tmp_path: Path) -> None:
    """``--head-rho A``: ``Nystroem`` read out by ``Ridge(alpha=A)``; its seed runs are
    named after the variant, and their mean sits in the seeds table, not the variants'."""
    out = tmp_path / "regression.json"
    args = ["--datasets", "diabetes", "--output", str(out), "--head-rho", "3"]
    regression.main([*args, "--methods", "nystroem_ridge", "linear_ridge"])
    regression.main([*args, "--methods", "nystroem_ridge", "--seed", "1"])
    data = json.loads(out.read_text())
    by_name = {r["name"]: r for r in data["records"]}
    assert sorted(by_name) == [
        "diabetes/nystroem_ridge@head3",
        "diabetes/nystroem_ridge@head3,mean of seeds",
        "diabetes/nystroem_ridge@head3,seed1",
    ]  # linear_ridge has no penalty to fix, so it is not run
    r2 = [by_name[f"diabetes/nystroem_ridge@head3{t}"]["figures"]["r2"] for t in ("", ",seed1")]
    assert r2 == pytest.approx([_r2(0, 3.0), _r2(1, 3.0)], abs=1e-9)
    assert r2[0] != pytest.approx(_r2(0), abs=1e-6)  # RidgeCV chooses another penalty
    mean = by_name["diabetes/nystroem_ridge@head3,mean of seeds"]
    assert mean["figures"]["r2"] == pytest.approx(sum(r2) / 2, abs=1e-12)
    assert mean["figures"]["method"] == "`Nystroem` + `Ridge`, read-out penalty 3"
    assert mean["command"].endswith("diabetes/nystroem_ridge@head3,seedK, K in [1]")
    tables = data["tables"]
    assert tables["regression_variants"]["rows"] == ["diabetes/nystroem_ridge@head3"]
    assert tables["regression_seeds"]["rows"] == ["diabetes/nystroem_ridge@head3,mean of seeds"]
    assert report.missing_fields(data) == []


def test_no_mean_without_seed_0_or_from_one_run() -> None:
    figures = {"dataset": "d", "method": "m", "J": 3, "r2": 0.5}
    seed0 = {"name": "d/m", "figures": figures}
    seed1 = {"name": "d/m@seed1", "figures": {**figures, "r2": 0.25}}
    other = {"name": "d/m_other@seed1", "figures": figures}
    assert regression.seed_mean([seed0, other], "d/m") is None
    assert regression.seed_mean([seed1, other], "d/m") is None
    mean = regression.seed_mean([seed0, seed1, other], "d/m")
    assert mean is not None and (mean["seeds"], mean["r2"]) == (2, 0.375)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "-1"], "argument --seed: expected an integer >= 0, got -1"),
        (["--head-rho", "0"], "argument --head-rho: expected a number > 0, got 0.0"),
        (
            ["--head-rho", "1", "--methods", "linear_ridge"],
            "argument --head-rho: none of the methods given has a read-out penalty",
        ),
    ],
)
def test_a_bad_argument_is_refused_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "regression.json"
    with pytest.raises(SystemExit):
        regression.main(["--datasets", "diabetes", *args, "--output", str(out)])
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_linear_baseline_is_ridgecv_on_the_scaled_features(tmp_path: Path) -> None:
    """``linear_ridge``: scikit-learn's ``RidgeCV`` on the min-max scaled features and
    standardised targets, built here from the raw data; no kernel, so no ``J``."""
    out = tmp_path / "regression.json"
    regression.main(["--datasets", "diabetes", "--methods", "linear_ridge", "--output", str(out)])
    data = json.loads(out.read_text())
    (record,) = data["records"]
    x, y = load_diabetes(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    model = TransformedTargetRegressor(
        make_pipeline(MinMaxScaler(), RidgeCV(alphas=np.logspace(-4, 2, 13))),
        transformer=StandardScaler(),
    ).fit(x_train, y_train)
    expected = r2_score(y_test, model.predict(x_test))
    assert record["figures"]["r2"] == pytest.approx(expected, abs=1e-9)
    assert record["figures"]["J"] is None
    assert (
        report.render("regression", tmp_path)
        .splitlines()[2]
        .startswith("| diabetes | linear `RidgeCV` (no kernel) | - | ")
    )


def test_a_trained_methods_label_names_a_learning_rate_other_than_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = regression.split("diabetes")
    monkeypatch.setattr(regression, "MAX_EPOCHS", 1)
    label = "DI-trained `KernelRegressor`, last epoch"
    assert regression.measure("diabetes", "di_last", data)["method"] == label
    monkeypatch.setattr(regression, "LR", 1e-3)
    assert regression.measure("diabetes", "di_last", data)["method"] == label + ", Adam lr 0.001"
    # the untrained map has no learning rate
    assert regression.measure("diabetes", "untrained", data)["method"] == "untrained map + ridge"
