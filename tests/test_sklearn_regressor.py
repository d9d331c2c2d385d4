"""DIRegressor: scikit-learn's estimator checks and what the regressor adds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernel_layers.sklearn import DIRegressor
from kernel_layers.sklearn import features as features_module
from kernel_layers.sklearn.readout import (
    ALPHAS,
    fit_loo_ridge_targets,
    held_out_alpha,
    scale_of,
)

#: Quick fits; J from the rows (the default), as the checks score the fit on 200 rows.
FAST = {"max_epochs": 2, "random_state": 0}


@parametrize_with_checks([DIRegressor(**FAST), DIRegressor(map="fourier", **FAST)])
def test_sklearn_compatible_estimator(estimator, check) -> None:
    check(estimator)


def _friedman(rows: int = 900) -> tuple[np.ndarray, ...]:
    x, y = make_friedman1(n_samples=rows, noise=0.5, random_state=0)
    cut = rows * 2 // 3
    return x[:cut], x[cut:], y[:cut], y[cut:]


def test_trained_map_beats_the_untrained_one_and_nystroem_ridge() -> None:
    x_train, x_test, y_train, y_test = _friedman()
    options = {"n_components": 60, "random_state": 0, "lr": 1e-2, "max_epochs": 15}
    trained = DIRegressor(**options).fit(x_train, y_train)
    untrained = DIRegressor(**{**options, "max_epochs": 0}).fit(x_train, y_train)
    baseline = make_pipeline(
        Nystroem(gamma=trained.layer_.gamma, n_components=60, random_state=0),
        RidgeCV(alphas=np.logspace(-4, 2, 13)),
    ).fit(x_train, y_train)
    assert trained.best_epoch_ > 0 and len(trained.validation_scores_) > 1
    assert trained.score(x_test, y_test) > untrained.score(x_test, y_test) + 0.02
    assert trained.score(x_test, y_test) > baseline.score(x_test, y_test)


def test_targets_near_the_float64_limit_predict_in_their_units() -> None:
    # their squares overflow: the targets' moments are taken on targets / max |target|
    x_train, x_test, y_train, _ = _friedman(300)
    common = {"n_components": 20, "max_epochs": 2, "random_state": 0}
    unit = DIRegressor(**common).fit(x_train, y_train)
    huge = DIRegressor(**common).fit(x_train, 1e300 * y_train)
    assert np.isfinite(huge.target_scale_).all()
    np.testing.assert_allclose(huge.predict(x_test) / 1e300, unit.predict(x_test), rtol=1e-6)


def test_a_constant_subnormal_target_is_predicted_as_itself() -> None:
    x_train, x_test, y_train, _ = _friedman(100)
    constant = np.full(len(y_train), 5e-324)
    model = DIRegressor(n_components=10, max_epochs=1, random_state=0).fit(x_train, constant)
    np.testing.assert_array_equal(model.predict(x_test), np.full(len(x_test), 5e-324))


def test_two_targets_predict_two_columns_in_their_units() -> None:
    x_train, x_test, y_train, _ = _friedman(300)
    y2 = np.stack([y_train, 1000.0 * y_train + 5.0], 1)
    model = DIRegressor(n_components=20, max_epochs=2, random_state=0).fit(x_train, y2)
    prediction = model.predict(x_test)
    assert prediction.shape == (len(x_test), 2)
    # the targets are standardised: the second column is the first in other units
    np.testing.assert_allclose(prediction[:, 1], 1000.0 * prediction[:, 0] + 5.0, rtol=1e-9)
    np.testing.assert_allclose(model.target_scale_, [y_train.std(), 1000.0 * y_train.std()])


def test_loo_read_out_matches_the_explicit_leave_one_out() -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 5))
    targets = features[:, :1] * 2.0 + rng.normal(size=(40, 1))
    readout = fit_loo_ridge_targets(features, targets)
    errors = []
    for i in range(40):  # the chosen penalty, refitted without row i
        keep = np.arange(40) != i
        fold = fit_loo_ridge_targets(features[keep], targets[keep], readout.alpha)
        errors.append(float(((fold.scores(features[i : i + 1]) - targets[i]) ** 2).sum()))
    total = float(((targets - targets.mean()) ** 2).sum())
    assert readout.loo_accuracy == pytest.approx(1 - sum(errors) / total, rel=1e-9)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"rho": 0.0}, ValueError, "rho"),
        ({"validation_fraction": 1.5}, ValueError, "validation_fraction"),
        ({"max_epochs": -1}, ValueError, "max_epochs"),
        ({"map": "spline"}, ValueError, "map"),
    ],
)
def test_bad_parameters_are_named(params: dict, error: type, match: str) -> None:
    x, _, y, _ = _friedman(60)
    with pytest.raises(error, match=match):
        DIRegressor(**params).fit(x, y)


def test_bad_targets_are_refused() -> None:
    x, _, y, _ = _friedman(60)
    with pytest.raises(ValueError, match="NaN"):
        DIRegressor(max_epochs=1).fit(x, np.where(np.arange(len(y)) == 3, np.nan, y))
    with pytest.raises(ValueError, match="could not convert string to float"):
        DIRegressor(max_epochs=1).fit(x, np.array(["a"] * len(y)))


def test_held_out_penalty_matches_scikit_learn_ridge_over_the_grid() -> None:
    """``held_out_alpha`` against scikit-learn's ``Ridge`` (with intercept) fitted on the
    fit rows at each penalty of the grid, scored on the held-out rows."""
    rng = np.random.default_rng(1)
    features = rng.normal(size=(120, 30))
    targets = features[:, :3] @ np.array([[1.0], [-2.0], [0.5]]) + 2.0 * rng.normal(size=(120, 1))
    fit, held = features[:90], features[90:]
    relative = held_out_alpha(fit, targets[:90], held, targets[90:])
    scale = ((fit - fit.mean(0)) ** 2).sum() / fit.shape[1]
    y_fit, y_held = targets[:90, 0], targets[90:, 0]  # one target, as a vector
    errors = [
        float(((Ridge(alpha=a * scale).fit(fit, y_fit).predict(held) - y_held) ** 2).sum())
        for a in ALPHAS
    ]
    assert relative == ALPHAS[int(np.argmin(errors))]
    assert ALPHAS[0] < relative < ALPHAS[-1]  # an inner choice: the grid's ends are not it


def test_a_trained_map_is_read_out_with_the_penalty_of_its_held_out_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The penalty of a trained map's read-out is the one its held-out rows choose (on
    the others' read-out), rescaled to the features of every row; the untrained map keeps
    leave-one-out's."""
    calls: list[tuple[np.ndarray, ...]] = []
    baselines: list[float | None] = []

    def spy(*args: np.ndarray, baseline: float | None = None) -> float:
        calls.append(args)
        baselines.append(baseline)
        return held_out_alpha(*args, baseline=baseline)

    monkeypatch.setattr(features_module, "held_out_alpha", spy)
    x_train, _, y_train, _ = _friedman()
    model = DIRegressor(n_components=60, random_state=0, max_epochs=15).fit(x_train, y_train)
    assert model.best_epoch_ > 0 and len(calls) == 1
    fit, _, held, _ = calls[0]
    assert (len(fit), len(held)) == (540, 60)  # 10 % of the 600 rows held out
    with torch.no_grad():
        features = model.layer_(torch.tensor(x_train, dtype=torch.float64)).numpy()
    z = (y_train[:, None] - model.target_mean_) / model.target_scale_
    assert baselines[0] is not None and baselines[0] > 0  # the penalty epochs were scored with
    expected = held_out_alpha(*calls[0], baseline=baselines[0]) * scale_of(features)
    assert model.readout_.alpha == pytest.approx(expected, rel=1e-12)
    untrained = DIRegressor(n_components=60, random_state=0, max_epochs=0).fit(x_train, y_train)
    assert len(calls) == 1  # not asked for the untrained map
    with torch.no_grad():
        plain = untrained.layer_(torch.tensor(x_train, dtype=torch.float64)).numpy()
    assert untrained.readout_.alpha == fit_loo_ridge_targets(plain, z).alpha


def test_a_trained_map_on_few_noisy_rows_keeps_a_sound_read_out() -> None:
    """scikit-learn's diabetes, 70/30 split: at ``random_state=1`` the map kept is a
    trained one, and leave-one-out on the rows it was trained on chose a penalty that
    read out their noise (test ``R^2`` below 0); the held-out rows' penalty keeps the
    test ``R^2`` near the untrained map's."""
    x, y = load_diabetes(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    scale = MinMaxScaler().fit(x_train)
    x_train, x_test = scale.transform(x_train), scale.transform(x_test)
    model = DIRegressor(random_state=1).fit(x_train, y_train)
    untrained = DIRegressor(random_state=1, max_epochs=0).fit(x_train, y_train)
    assert model.best_epoch_ > 0
    assert model.score(x_test, y_test) > untrained.score(x_test, y_test) - 0.1


def test_di_trains_with_the_untrained_read_outs_leave_one_out_penalty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``rho=None``: DI's ridge parameter is the penalty scikit-learn's leave-one-out
    ``RidgeCV`` chooses over the same grid for the untrained map's features of the rows
    trained on, over the batches of an epoch; a given ``rho`` is kept."""
    seen: dict = {}
    original = features_module.train_map

    def spy(layer, x, targets, **options):  # type: ignore[no-untyped-def]
        with torch.no_grad():
            seen["features"] = layer(x).numpy()
        seen.update(targets=targets.numpy(), batch=options["batch"], rho=options["rho"])
        return original(layer, x, targets, **options)

    monkeypatch.setattr(features_module, "train_map", spy)
    x_train, _, y_train, _ = _friedman()
    options: dict = dict(n_components=60, batch_size=180, max_epochs=2, random_state=0)
    model = DIRegressor(**options).fit(x_train, y_train)
    features = seen["features"]
    reference = RidgeCV(alphas=ALPHAS * scale_of(features)).fit(features, seen["targets"])
    batches = len(features) // seen["batch"]
    assert batches == 3  # 540 rows trained on, batches of 180
    assert model.rho_ == seen["rho"]
    assert model.rho_ == pytest.approx(reference.alpha_ / batches, rel=1e-12)
    assert DIRegressor(rho=0.5, **options).fit(x_train, y_train).rho_ == 0.5


def test_a_held_out_penalty_must_beat_the_scoring_one_by_its_standard_error() -> None:
    """With a ``baseline``, the grid's best penalty on the held-out rows is kept only
    where its per-row gains over the baseline average more than their standard error
    (float64 reference: scikit-learn's ``Ridge`` fitted at both penalties)."""
    rng = np.random.default_rng(3)
    features = rng.normal(size=(120, 30))
    scale = ((features[:100] - features[:100].mean(0)) ** 2).sum() / features.shape[1]

    def gains(targets: np.ndarray, best: float, baseline: float) -> np.ndarray:
        fitted = [
            Ridge(alpha=a * scale).fit(features[:100], targets[:100, 0]).predict(features[100:])
            for a in (baseline, best)
        ]
        return np.array([(f - targets[100:, 0]) ** 2 for f in fitted])

    for signal, kept in ((1.0, "best"), (0.0, "baseline")):
        targets = signal * features[:, :1] + 0.3 * rng.normal(size=(120, 1))
        best = held_out_alpha(features[:100], targets[:100], features[100:], targets[100:])
        baseline = float(ALPHAS[-1])  # the largest penalty: nearly the targets' mean
        got = held_out_alpha(
            features[:100], targets[:100], features[100:], targets[100:], baseline=baseline
        )
        errors = gains(targets, best, baseline)
        difference = errors[0] - errors[1]
        wins = difference.mean() > difference.std(ddof=1) / np.sqrt(len(difference))
        assert wins == (kept == "best"), (signal, difference.mean())
        assert got == (best if kept == "best" else baseline)


def test_pure_noise_targets_end_near_the_mean_not_far_below() -> None:
    """A fold of pure-noise targets where a trained epoch won by 0.0004 held-out R^2 and
    the held-out rows' penalty, searched alone, read out noise (test R^2 -1.19)."""
    rng = np.random.RandomState(2)
    x, y = rng.randn(200, 5), rng.randn(200)
    fit, test = np.r_[0:120, 160:200], np.r_[120:160]
    model = DIRegressor(random_state=0).fit(x[fit], y[fit])
    assert model.best_epoch_ > 0
    assert model.score(x[test], y[test]) > -0.3
