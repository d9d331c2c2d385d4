"""The scikit-learn estimators on a user's ``X``: the default ``gamma`` in the kernel's
unit, checks of ``X`` that name the estimator, and warnings given once, for a reason."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.metrics.pairwise import chi2_kernel, laplacian_kernel

from kernel_layers.kernels import Kernel, gaussian_kernel
from kernel_layers.sklearn import DIClassifier, DIFeatures, DIRegressor


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_iris(return_X_y=True)
    return x, y


@pytest.mark.parametrize(
    ("kernel", "exact"), [("laplacian", laplacian_kernel), ("chi2", chi2_kernel)]
)
def test_default_gamma_gives_the_same_kernel_in_any_unit(iris, kernel, exact) -> None:
    x, y = iris
    features = {}
    for unit in (1.0, 1e-4):  # the same rows in a unit 10^4 times larger
        est = DIFeatures(kernel=kernel, max_epochs=0, random_state=0).fit(x * unit, y)
        features[unit] = est.transform(x * unit)
        landmarks = est.layer_.landmarks.detach().numpy()
        # float64 reference: scikit-learn's kernel at gamma = 1 / (D * std(X))
        gamma = 1.0 / (x.shape[1] * (x * unit).std())
        assert est.layer_.gamma == pytest.approx(gamma, rel=1e-12)
        # Nystrom features: Phi Phi^T = K_XZ K_ZZ^-1 K_ZX of the exact kernel
        cross = exact(x * unit, landmarks, gamma=gamma)
        want = cross @ np.linalg.solve(exact(landmarks, landmarks, gamma=gamma), cross.T)
        np.testing.assert_allclose(features[unit] @ features[unit].T, want, atol=1e-6)
    np.testing.assert_allclose(features[1.0], features[1e-4], atol=1e-8)


def test_kernel_refuses_a_gamma_power_other_than_1_or_2() -> None:
    for wrong in (3, 1.0, True):
        with pytest.raises(ValueError, match=rf"'gamma_power' must be 1 or 2, got {wrong!r}"):
            Kernel("mine", gaussian_kernel, gamma_power=wrong)


@pytest.mark.parametrize(
    ("make", "call", "match"),
    [
        (
            lambda: DIClassifier(kernel="chi2", max_epochs=1),
            lambda est, x, y: est.fit(x - 3.0, y),
            r"DIClassifier: argument 'X' must have all entries >= 0 \(chi2 kernel\), "
            r"got minimum -2.9",
        ),
        (
            lambda: DIClassifier(kernel="chi2", max_epochs=0),
            lambda est, x, y: est.fit(x, y).predict(x - 3.0),
            r"DIClassifier: argument 'X' must have all entries >= 0",
        ),
        (
            lambda: DIRegressor(max_epochs=0),
            lambda est, x, y: est.fit(x * 1e300, y),
            r"DIRegressor: argument 'X' must have entries with \|value\| <= 3.\d+e\+153 in "
            r"torch.float64 \(larger ones overflow squared distances\), "
            r"got max \|value\| = 7.9e\+300",
        ),
        (
            lambda: DIRegressor(max_epochs=0),
            lambda est, x, y: est.fit(x, y).predict(x * 1e300),
            r"DIRegressor: argument 'X' must have entries with \|value\| <= ",
        ),
        (
            lambda: DIFeatures(map="fourier", max_epochs=0),
            lambda est, x, y: est.fit(x, y).transform(x * 1e300),
            r"DIFeatures: argument 'X' must have entries with \|value\| <= ",
        ),
    ],
)
def test_x_the_map_cannot_take_is_refused_naming_the_estimator_and_x(
    iris, make, call, match
) -> None:
    x, y = iris
    with pytest.raises(ValueError, match=match):
        call(make(), x, y)


def _user_warnings(fit) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_a_default_j_lowered_to_the_batch_is_not_warned_about(iris) -> None:
    x, y = iris
    quiet = DIClassifier(validation_fraction=0.5, max_epochs=1, random_state=0)
    assert _user_warnings(lambda: quiet.fit(x, y)) == []
    assert (
        quiet.features_.n_components_ == 37 and quiet.features_.batch_size_ == 75
    )  # half the 75 rows trained on
    chosen = DIClassifier(n_components=50, validation_fraction=0.5, max_epochs=1, random_state=0)
    (message,) = _user_warnings(lambda: chosen.fit(x, y))
    assert "n_components=50 with a batch of 75 rows" in message
    assert chosen.features_.n_components_ == 37


def test_many_classes_are_warned_about_once() -> None:
    x = np.random.default_rng(0).normal(size=(30, 3))
    messages = _user_warnings(lambda: DIClassifier(max_epochs=1).fit(x, np.arange(30)))
    assert sum("unique classes is greater than 50%" in m for m in messages) == 1


def test_a_numerical_warning_of_fit_names_the_users_line() -> None:
    x = np.repeat(np.eye(3), 40, axis=0)  # 3 distinct rows: a singular landmark Gram
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DIRegressor(random_state=0).fit(x, x @ np.array([1.0, 2.0, 3.0]))
    jitter = [w for w in caught if "succeeded after adding a jitter" in str(w.message)]
    assert jitter and {w.filename for w in jitter} == {__file__}
