"""The estimators' training loop: held-out rows, the best epoch kept, stopping on them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.sklearn import DIClassifier, DIFeatures
from kernel_layers.sklearn.features import HeldOutAccuracy
from kernel_layers.sklearn.readout import fit_loo_ridge
from kernel_layers.sklearn.training import split_rows, train_map


def _digits(rows: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    return x[:rows] / 16.0, y[:rows]


def _layer(x: torch.Tensor, width: int = 20) -> NystromLayer:
    return NystromLayer.from_data(x, width, gamma=0.05, seed=0, dtype=torch.float64)


def _train(layer: NystromLayer, x: torch.Tensor, y: torch.Tensor, **kwargs: object):
    options: dict = dict(num_classes=10, batch=100, max_epochs=6, lr=1e-2, rho=1e-4)
    options.update(kwargs)
    return train_map(layer, x, y, generator=torch.Generator().manual_seed(0), **options)


def test_split_rows_is_stratified_sized_and_disjoint() -> None:
    labels = np.repeat(np.arange(4), 25)
    train, held = split_rows(100, 0.2, seed=0, labels=labels)
    assert len(held) == 20 and len(train) == 80
    assert sorted(np.concatenate([train, held]).tolist()) == list(range(100))
    assert np.bincount(labels[held]).tolist() == [5, 5, 5, 5]
    assert len(split_rows(100, None, seed=0)[1]) == 0
    assert len(split_rows(3, 0.1, seed=0)[1]) == 0  # fewer than 2 rows would be held out


def test_a_score_that_falls_keeps_the_untrained_map_exactly() -> None:
    x_np, y_np = _digits(300)
    x, y = torch.tensor(x_np), torch.tensor(y_np)
    layer = _layer(x)
    start = layer.landmarks.detach().clone()
    calls: list[int] = []

    def falling(_: object) -> tuple[float]:
        calls.append(1)
        return (-float(len(calls)),)

    result = _train(layer, x, y, score=falling, n_iter_no_change=3)
    assert result.best_epoch == 0
    assert len(result.di_history) == 3  # stopped after 3 epochs without a better score
    assert len(result.score_history) == 4
    torch.testing.assert_close(layer.landmarks, start, rtol=0, atol=0)


def test_the_best_epoch_is_kept_and_the_later_ones_dropped() -> None:
    x_np, y_np = _digits(300)
    x, y = torch.tensor(x_np), torch.tensor(y_np)
    layer = _layer(x)
    seen: list[torch.Tensor] = []
    values = iter([0.0, 1.0, 3.0, 2.0, 2.5, 1.0, 0.5])

    def peaked(map_: NystromLayer) -> tuple[float]:
        seen.append(map_.landmarks.detach().clone())
        return (next(values),)

    result = _train(layer, x, y, score=peaked, max_epochs=6, n_iter_no_change=10)
    assert result.best_epoch == 2 and len(result.di_history) == 6
    torch.testing.assert_close(layer.landmarks, seen[2], rtol=0, atol=0)
    assert not torch.equal(layer.landmarks, seen[-1])


def test_without_a_score_the_last_epoch_is_kept() -> None:
    x_np, y_np = _digits(300)
    x, y = torch.tensor(x_np), torch.tensor(y_np)
    result = _train(_layer(x), x, y, max_epochs=4)
    assert result.best_epoch == len(result.di_history) and result.score_history == []


def test_ridge_score_is_the_readouts_held_out_accuracy() -> None:
    x_np, y_np = _digits(400)
    x = torch.tensor(x_np)
    layer = _layer(x, 30)
    score = HeldOutAccuracy(x[:300], y_np[:300], x[300:], y_np[300:])
    with torch.no_grad():
        accuracy, error = score(layer)
        readout = fit_loo_ridge(layer(x[:300]).numpy(), y_np[:300], 10)
        scores = readout.scores(layer(x[300:]).numpy())
    assert accuracy == pytest.approx(float((scores.argmax(1) == y_np[300:]).mean()), abs=0)
    targets = np.eye(10)[y_np[300:]] * 2 - 1
    assert error == pytest.approx(-float(((scores - targets) ** 2).mean()), rel=1e-12)


def test_difeatures_keeps_the_map_of_its_best_held_out_score() -> None:
    x, y = _digits(600)
    fitted = DIFeatures(60, gamma=0.05, max_epochs=8, random_state=0).fit(x, y)
    scores = fitted.validation_scores_
    assert len(scores) == len(fitted.di_history_) + 1
    assert scores[fitted.best_epoch_] == max(scores)  # ties: the smaller held-out error
    if fitted.best_epoch_ == 0:
        untrained = DIFeatures(60, gamma=0.05, max_epochs=0, random_state=0)
        assert untrained.fit(x, y).n_components_ == fitted.n_components_


def test_the_classifier_passes_the_held_out_options_and_refits_on_all_rows() -> None:
    x, y = _digits(500)
    clf = DIClassifier(
        40, gamma=0.05, max_epochs=3, validation_fraction=0.2, n_iter_no_change=2, random_state=0
    ).fit(x, y)
    assert len(clf.features_.validation_scores_) == len(clf.features_.di_history_) + 1
    assert clf.readout_.coef.shape == (40, 10)
    plain = DIClassifier(40, gamma=0.05, max_epochs=3, validation_fraction=None, random_state=0)
    assert plain.fit(x, y).features_.validation_scores_ == []


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        (
            {"validation_fraction": 1.5},
            ValueError,
            r"DIFeatures: argument 'validation_fraction' must be in \(0, 1\), got 1.5",
        ),
        (
            {"validation_fraction": "0.1"},
            TypeError,
            r"argument 'validation_fraction' must be a number in \(0, 1\), got '0.1'",
        ),
        (
            {"validation_fraction": True},
            TypeError,
            r"argument 'validation_fraction' must be a number in \(0, 1\), got True",
        ),
        ({"n_iter_no_change": 0}, ValueError, r"DIFeatures: argument 'n_iter_no_change'"),
        ({"n_iter_no_change": 2.5}, TypeError, r"DIFeatures: argument 'n_iter_no_change'"),
    ],
)
def test_bad_held_out_options_are_named(params: dict, error: type, match: str) -> None:
    x, y = _digits(100)
    with pytest.raises(error, match=match):
        DIFeatures(10, **params).fit(x, y)


@pytest.mark.parametrize(
    ("rows", "batch", "expected"),
    [(300, None, 0.1), (900, 100, 1e-4)],  # 1 batch an epoch; 810 // 100 = 8 batches
)
def test_rho_none_is_chosen_from_the_batches_of_an_epoch(
    rows: int, batch: int | None, expected: float
) -> None:
    x, y = _digits(rows)
    common: dict = dict(n_components=20, batch_size=batch, max_epochs=3, random_state=0)
    chosen = DIFeatures(**common).fit(x, y)
    given = DIFeatures(rho=expected, **common).fit(x, y)
    assert chosen.rho_ == expected and given.rho_ == expected
    assert torch.equal(chosen.layer_.landmarks, given.layer_.landmarks)
    assert chosen.di_history_ == given.di_history_


def test_rho_is_none_for_an_untrained_map() -> None:
    x, y = _digits(100)
    assert DIFeatures(20, max_epochs=0, random_state=0).fit(x, y).rho_ is None
    assert DIFeatures(20, max_epochs=0, rho=0.5, random_state=0).fit(x, y).rho_ is None
