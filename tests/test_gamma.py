"""Gamma selection: the ``1 / (D Var X)`` heuristic and the paper's grid search."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.linear_model import RidgeClassifier
from sklearn.svm import LinearSVC

import kernel_layers.selection.gamma as gamma_module
from kernel_layers.layers.nystrom import NystromLayer
from kernel_layers.selection.gamma import (
    GRID_BASE,
    GRID_EXPONENTS,
    GammaSearchResult,
    default_gammas,
    gamma_heuristic,
    select_gamma,
)

#: Small digits search of the acceptance test: landmarks and subsample size.
DIGITS_LANDMARKS = 200
DIGITS_SAMPLES = 600


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    return x / 16.0, y


def _blobs(n_per_class: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three overlapping Gaussian blobs in 4-D, labels 0..2."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, 4))
    x = np.concatenate([c + 0.8 * rng.normal(size=(n_per_class, 4)) for c in centres])
    return x, np.repeat(np.arange(3), n_per_class)


# --- gamma_heuristic ------------------------------------------------------------------


def test_heuristic_is_sklearn_scale_rule(digits: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = digits
    # scikit-learn's SVC(gamma="scale") sets ``_gamma = 1 / (n_features * X.var())``.
    want = 1.0 / (x.shape[1] * x.var())
    assert gamma_heuristic(x) == pytest.approx(want, rel=1e-12)
    assert gamma_heuristic(torch.tensor(x, dtype=torch.float32)) == pytest.approx(want, rel=1e-6)
    raw = (x * 16).astype(np.int64)  # integer pixels: the same rule, 256 times smaller
    assert gamma_heuristic(raw) == pytest.approx(want / 256, rel=1e-12)


@pytest.mark.parametrize(
    ("kernel", "power"), [("gaussian", 2), ("cauchy", 2), ("laplacian", 1), ("chi2", 1)]
)
def test_heuristic_in_the_unit_of_the_kernels_gamma(
    digits: tuple[np.ndarray, np.ndarray], kernel: str, power: int
) -> None:
    x, _ = digits
    # float64 reference: 1 / (D * Var ** (power / 2)); rows 1000 times larger give a
    # gamma 1000 ** power times smaller, so that gamma * distance is the same
    want = 1.0 / (x.shape[1] * x.var() ** (power / 2))
    assert gamma_heuristic(x, kernel) == pytest.approx(want, rel=1e-12)
    assert gamma_heuristic(x * 1e3, kernel) == pytest.approx(want / 1e3**power, rel=1e-12)


def test_heuristic_of_a_skewed_kernel_reads_its_log_inputs(
    digits: tuple[np.ndarray, np.ndarray],
) -> None:
    x, _ = digits
    logs = np.log(x + 1.0)  # the skewed kernels' default shift c = 1
    want = 1.0 / (x.shape[1] * logs.std())
    assert gamma_heuristic(x, "skewed_chi2") == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match=r"gamma_heuristic: argument 'x' must have all entries"):
        gamma_heuristic(x - 2.0, "skewed_chi2")
    with pytest.raises(ValueError, match=r"gamma_heuristic: .*'kernel'.*'rbf'"):
        gamma_heuristic(x, "rbf")


def test_default_grid_is_centred_on_heuristic(digits: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = digits
    grid = default_gammas(x)
    h = gamma_heuristic(x)
    assert len(grid) == len(GRID_EXPONENTS) == 7
    assert grid[len(grid) // 2] == pytest.approx(h)
    np.testing.assert_allclose(np.diff(np.log(grid)), 2 * math.log(GRID_BASE))
    assert grid[0] == pytest.approx(h / 64) and grid[-1] == pytest.approx(h * 64)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (np.ones((5, 3)), ValueError, r"gamma_heuristic: argument 'x' must have a positive var"),
        (np.array([[0.0, np.nan], [1.0, 2.0]]), ValueError, r"'x' must be finite, got 1 NaN"),
        (np.arange(4.0), ValueError, r"'x' must have shape \[N, D\], got \[4\]"),
        (np.zeros((2, 2, 2)), ValueError, r"'x' must have shape \[N, D\], got \[2, 2, 2\]"),
        (np.zeros((0, 3)), ValueError, r"'x' must have at least one row and one column"),
        (np.array([["a", "b"]]), TypeError, r"'x' must be a real-valued array or tensor"),
        (torch.ones(2, 2, dtype=torch.complex64), TypeError, r"'x' must be a real-valued tensor"),
    ],
)
def test_heuristic_errors(x: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        gamma_heuristic(x)


def test_default_gammas_error_names_itself() -> None:
    with pytest.raises(ValueError, match=r"default_gammas: argument 'x' must have a positive"):
        default_gammas(np.zeros((4, 2)))


# --- select_gamma ---------------------------------------------------------------------


@pytest.mark.parametrize("classifier", ["linear_svc", "ridge"])
def test_digits_search_picks_the_middle(
    digits: tuple[np.ndarray, np.ndarray], classifier: str
) -> None:
    x, y = digits
    grid = [1e-4, gamma_heuristic(x), 100.0]
    result = select_gamma(
        x,
        y,
        gammas=grid,
        num_landmarks=DIGITS_LANDMARKS,
        max_samples=DIGITS_SAMPLES,
        classifier=classifier,
    )
    assert isinstance(result, GammaSearchResult)
    assert result.gammas == grid
    assert result.best_gamma == grid[1] and result.best_index == 1
    assert result.best_score == result.scores[1] > 0.9
    # Near-linear kernel underfits; near-diagonal kernel gives chance-level features.
    assert result.scores[1] > result.scores[0] + 0.05
    assert result.scores[1] > result.scores[2] + 0.5
    assert len(result.stds) == 3 and all(0.0 <= s < 0.1 for s in result.stds)


def test_default_grid_is_used_when_no_gammas(digits: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = digits
    result = select_gamma(x, y, num_landmarks=50, max_samples=150, classifier="ridge")
    assert result.gammas == pytest.approx(default_gammas(x))
    assert result.best_gamma in result.gammas


def test_deterministic_given_seed() -> None:
    x, y = _blobs()
    kwargs = {"gammas": [0.01, 0.3, 3.0], "num_landmarks": 20}
    first = select_gamma(x, y, **kwargs)
    assert select_gamma(x, y, **kwargs) == first
    # Tensor inputs, float32 data and parallel threads change nothing.
    tensors = select_gamma(torch.tensor(x, dtype=torch.float32), torch.tensor(y), **kwargs)
    assert tensors.best_gamma == first.best_gamma
    np.testing.assert_allclose(tensors.scores, first.scores, atol=1 / 30)
    assert select_gamma(torch.tensor(x), torch.tensor(y), n_jobs=2, **kwargs) == first
    # Another seed draws other folds and landmarks.
    others = [select_gamma(x, y, seed=s, classifier="ridge", **kwargs).scores for s in (1, 2)]
    assert others[0] != others[1]


def test_landmarks_come_from_the_training_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _blobs()
    calls: list[tuple[int, int]] = []

    class Recorder(NystromLayer):
        @classmethod
        def from_data(cls, data: torch.Tensor, out_features: int, **kwargs: object):
            assert data.dtype == torch.float64
            assert kwargs["trainable"] is False
            calls.append((data.shape[0], out_features))
            return NystromLayer.from_data(data, out_features, **kwargs)

    monkeypatch.setattr(gamma_module, "NystromLayer", Recorder)
    select_gamma(x, y, gammas=[0.5, 1.0], num_landmarks=10_000, folds=3, classifier="ridge")
    # 2 gammas x 3 folds; each training fold holds 2/3 of the 90 rows; landmarks capped.
    assert calls == [(60, 60)] * 6
    calls.clear()
    select_gamma(x, y, gammas=[0.5], num_landmarks=7, folds=5, max_samples=45)
    assert calls == [(36, 7)] * 5


def test_stratified_subsample_keeps_proportions_and_rare_classes() -> None:
    codes = np.repeat(np.arange(3), [500, 300, 2])
    rows = gamma_module._stratified_subsample(codes, 80, 3, np.random.default_rng(0))
    assert np.all(np.diff(rows) > 0)
    assert np.bincount(codes[rows]).tolist() == [50, 30, 2]
    again = gamma_module._stratified_subsample(codes, 80, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(rows, again)


def test_custom_classifier_and_string_labels() -> None:
    x, y = _blobs()
    names = np.array(["cat", "dog", "emu"])[y]
    template = RidgeClassifier(alpha=0.1)
    result = select_gamma(x, names, gammas=[0.1, 1.0], num_landmarks=20, classifier=template)
    assert not hasattr(template, "coef_")  # cloned, never fitted itself
    assert len(result.scores) == 2 and all(0.0 <= s <= 1.0 for s in result.scores)
    floats = select_gamma(x, y.astype(np.float32), gammas=[0.1, 1.0], num_landmarks=20)
    assert floats == select_gamma(x, y, gammas=[0.1, 1.0], num_landmarks=20)


def test_convergence_warnings_are_silenced() -> None:
    x, y = _blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning, e.g. a ConvergenceWarning, fails
        result = select_gamma(
            x, y, gammas=[0.3], num_landmarks=20, classifier=LinearSVC(dual=True, max_iter=1)
        )
    assert 0.0 <= result.best_score <= 1.0


@pytest.mark.gpu
def test_cuda_input_matches_cpu() -> None:
    x, y = _blobs()
    kwargs = {"gammas": [0.01, 0.3, 3.0], "num_landmarks": 20, "classifier": "ridge"}
    cpu = select_gamma(x, y, **kwargs)
    cuda = select_gamma(torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda"), **kwargs)
    assert cuda.best_gamma == cpu.best_gamma
    np.testing.assert_allclose(cuda.scores, cpu.scores, atol=1 / 30)


_X, _Y = _blobs(n_per_class=6)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"folds": 1},
            ValueError,
            r"select_gamma: argument 'folds' must be an integer >= 2, got 1",
        ),
        ({"folds": 2.5}, TypeError, r"argument 'folds' must be an integer >= 2, got 2.5"),
        ({"folds": 7}, ValueError, r"'y' must have at least folds=7 rows in every class, got 6"),
        (
            {"num_landmarks": 0},
            ValueError,
            r"argument 'num_landmarks' must be an integer >= 1, got 0",
        ),
        ({"seed": -1}, ValueError, r"argument 'seed' must be an integer >= 0, got -1"),
        ({"max_samples": 5}, ValueError, r"argument 'max_samples' must be an integer >= 6, got 5"),
        ({"n_jobs": 0}, ValueError, r"'n_jobs' must be None or a non-zero integer, got 0"),
        ({"n_jobs": 1.5}, TypeError, r"'n_jobs' must be None or a non-zero integer, got 1.5"),
        ({"classifier": "svm"}, ValueError, r"'classifier' must be one of \['linear_svc', 'ri"),
        ({"classifier": 3}, TypeError, r"'classifier' must be one of .* classifier, got int"),
        ({"gammas": []}, ValueError, r"'gammas' must be a non-empty sequence of numbers > 0"),
        ({"gammas": "0.1"}, TypeError, r"'gammas' must be a sequence of numbers > 0, got str"),
        ({"gammas": 0.1}, TypeError, r"'gammas' must be a sequence of numbers > 0, got float"),
        ({"gammas": [0.1, -1.0]}, ValueError, r"'gammas\[1\]' must be a finite number > 0"),
        ({"gammas": [math.nan]}, ValueError, r"'gammas\[0\]' must be a finite number > 0"),
        ({"x": np.full((18, 4), 2.0), "gammas": None}, ValueError, r"select_gamma: .*'x' must hav"),
        ({"x": _X[:, 0]}, ValueError, r"select_gamma: argument 'x' must have shape \[N, D\]"),
        ({"x": np.where(_X > 1, np.inf, _X)}, ValueError, r"'x' must be finite, got \d+ NaN/Inf"),
        ({"y": _Y[:-1]}, ValueError, r"'y' must have shape \[N\] = \[18\] .*, got \[17\]"),
        ({"y": _Y[:, None]}, ValueError, r"'y' must have shape \[N\] = \[18\] .*, got \[18, 1\]"),
        ({"y": _Y + 0.5}, ValueError, r"'y' must hold class labels .* dtype float64"),
        ({"y": np.zeros(18)}, ValueError, r"'y' must hold at least 2 classes, got 1"),
        ({"y": np.r_[_Y[:-2], 5, 5]}, ValueError, r"at least folds=3 rows .*, got 2 for class 5"),
    ],
)
def test_select_gamma_errors(kwargs: dict, error: type[Exception], match: str) -> None:
    args = {"x": _X, "y": _Y, "gammas": [1.0], "num_landmarks": 5}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        select_gamma(args.pop("x"), args.pop("y"), **args)
