"""The scikit-learn estimators: estimator checks, Pipeline and GridSearchCV."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernel_layers.sklearn import DIClassifier, DIFeatures

FAST = {"n_components": 8, "max_epochs": 2, "random_state": 0}


@parametrize_with_checks(
    [
        DIFeatures(**FAST),
        DIFeatures(map="fourier", **FAST),
        DIClassifier(**FAST),
        DIClassifier(map="fourier", **FAST),
    ]
)
def test_sklearn_compatible_estimator(estimator, check) -> None:
    check(estimator)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, ...]:
    x, y = load_digits(return_X_y=True)
    return tuple(train_test_split(x, y, test_size=0.25, stratify=y, random_state=0))


def test_pipeline_and_a_2x2_grid_search_on_digits(digits) -> None:
    x_train, x_test, y_train, y_test = digits
    pipe = make_pipeline(MinMaxScaler(), DIClassifier(max_epochs=5, random_state=0))
    grid = GridSearchCV(
        pipe,
        {"diclassifier__n_components": [50, 100], "diclassifier__map": ["nystrom", "fourier"]},
        cv=2,
    )
    grid.fit(x_train, y_train)
    assert len(grid.cv_results_["params"]) == 4
    assert grid.score(x_test, y_test) > 0.9
    proba = grid.predict_proba(x_test)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-9)
    assert (grid.classes_ == np.arange(10)).all()


@pytest.mark.parametrize("map_", ["nystrom", "fourier"])
def test_di_training_beats_the_untrained_map(digits, map_: str) -> None:
    x_train, x_test, y_train, y_test = digits
    scale = MinMaxScaler().fit(x_train)
    x_train, x_test = scale.transform(x_train), scale.transform(x_test)
    common = {"n_components": 50, "map": map_, "gamma": 0.02, "random_state": 0}
    untrained = DIClassifier(max_epochs=0, **common).fit(x_train, y_train)
    trained = DIClassifier(max_epochs=40, **common).fit(x_train, y_train)
    assert trained.features_.di_history_[-1] > trained.features_.di_history_[0]
    assert trained.score(x_test, y_test) > untrained.score(x_test, y_test)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"n_components": 0}, ValueError, "argument 'n_components' must be an integer >= 1"),
        ({"map": "rff"}, ValueError, r"argument 'map' must be one of \['nystrom', 'fourier'\]"),
        ({"lr": -1.0}, ValueError, "argument 'lr' must be a finite number > 0"),
        ({"max_epochs": 1.5}, TypeError, "argument 'max_epochs' must be an integer >= 0"),
        ({"gamma": 0.0}, ValueError, "argument 'gamma' must be a finite number > 0"),
        ({"batch_size": 1}, ValueError, "argument 'batch_size' must be an integer >= 2"),
    ],
)
def test_bad_parameters_are_named_at_fit(params, error, match) -> None:
    x, y = load_digits(return_X_y=True)
    with pytest.raises(error, match="DIFeatures: " + match):
        DIFeatures(**params).fit(x[:50], y[:50])
