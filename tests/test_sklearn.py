"""The scikit-learn estimators: estimator checks, Pipeline and GridSearchCV."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernel_layers.sklearn import DIClassifier, DIFeatures, DIRegressor

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


# ------------------------------------------------------------------ small data, parameters
def _digits(rows: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    return x[:rows] / 16.0, y[:rows]


@pytest.mark.parametrize("map_", ["nystrom", "fourier"])
def test_small_data_gets_a_j_and_batch_that_train_and_says_so(map_: str) -> None:
    x, y = _digits(50)
    classes = len(np.unique(y))
    with pytest.warns(
        UserWarning,
        match=r"DIFeatures: n_components=100 with a batch of 50 rows: DI saturates .*"
        r"n_components_=25 and batch_size_=50 are used",
    ):
        fitted = DIFeatures(
            100, map=map_, gamma=0.05, max_epochs=30, validation_fraction=None, random_state=0
        ).fit(x, y)
    assert fitted.n_components_ == 25 and fitted.batch_size_ == 50
    with pytest.warns(UserWarning, match="n_components=100 with a batch") as caught:
        DIClassifier(100, map=map_, max_epochs=1, validation_fraction=None).fit(x, y)
    assert caught[0].filename == __file__  # the user's line, through DIClassifier
    assert fitted.transform(x).shape == (50, 25)
    history = fitted.di_history_
    assert history[0] < classes - 1 - 0.5  # not saturated at L - 1 from the start
    assert history[-1] > history[0] + 0.1  # training moves DI ...
    start = DIFeatures(25, map=map_, gamma=0.05, max_epochs=0, random_state=0).fit(x, y)
    assert not np.allclose(fitted.transform(x), start.transform(x))  # ... and the map


def test_enough_data_keeps_the_requested_j_without_a_warning() -> None:
    x, y = _digits(400)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = DIFeatures(
            100, gamma=0.05, max_epochs=1, validation_fraction=None, random_state=0
        ).fit(x, y)
    assert fitted.n_components_ == 100 and fitted.batch_size_ == 400


def test_a_batch_not_larger_than_j_is_refused_like_kernel_classifier() -> None:
    x, y = _digits(200)
    with pytest.raises(
        ValueError,
        match=r"DIFeatures: argument 'batch_size' must be larger than n_components=30 "
        r"\(DI saturates when batch_size <= n_components\), got 20",
    ):
        DIFeatures(30, batch_size=20).fit(x, y)
    DIFeatures(30, batch_size=40, max_epochs=1).fit(x, y)  # larger than J: fine


def test_a_batch_is_compared_only_with_a_given_j() -> None:
    # n_components=None takes min(400, rows // 3): J = 100 on 300 rows, so a batch of
    # 200 trains; only a given n_components is compared with the batch
    x, y = _digits(300)
    fitted = DIFeatures(batch_size=200, max_epochs=1, random_state=0).fit(x, y)
    assert (fitted.n_components_, fitted.batch_size_) == (100, 200)


@pytest.mark.parametrize("cls", [DIFeatures, DIClassifier, DIRegressor])
def test_numpy_integer_sizes_train_as_the_same_python_integers(cls) -> None:
    # a grid over np.array([...]) hands NumPy integers to set_params
    x, y = _digits(300)
    sizes = {"n_components": 20, "batch_size": 100, "max_epochs": 2}
    plain = cls(random_state=0, **sizes).fit(x, y)
    numpy_sizes = {name: np.int64(value) for name, value in sizes.items()}
    fitted = cls(random_state=0, **numpy_sizes).fit(x, y)
    sizes_of = fitted.features_ if cls is DIClassifier else fitted
    assert (sizes_of.n_components_, sizes_of.batch_size_) == (20, 100)
    assert type(sizes_of.batch_size_) is int and type(sizes_of.n_components_) is int
    out = "transform" if cls is DIFeatures else "predict"
    np.testing.assert_array_equal(getattr(fitted, out)(x), getattr(plain, out)(x))


def test_a_numpy_random_state_is_accepted_as_scikit_learn_does() -> None:
    x, y = _digits(300)
    common = {"n_components": 20, "max_epochs": 2}
    by_int = DIFeatures(random_state=0, **common).fit(x, y).transform(x)
    by_state = DIFeatures(random_state=np.random.RandomState(0), **common).fit(x, y).transform(x)
    np.testing.assert_array_equal(by_state, by_int)
    DIClassifier(random_state=np.random.RandomState(0), **common).fit(x, y)


@pytest.mark.parametrize("cls", [DIFeatures, DIClassifier])
@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        (
            {"random_state": -1},
            ValueError,
            r"argument 'random_state' must be None, an integer in \[0, 2\*\*32 - 1\] or a "
            r"numpy RandomState, got -1",
        ),
        ({"random_state": "seed"}, TypeError, r"argument 'random_state' must be None, .*'seed'"),
        ({"device": "bogus"}, ValueError, r"argument 'device' must be a device .*'bogus'"),
        ({"device": 3}, TypeError, r"argument 'device' must be a device string .*got 3"),
    ],
)
def test_random_state_and_device_are_checked_at_fit(cls, params, error, match) -> None:
    estimator = cls(**params)  # __init__ only stores (scikit-learn's convention)
    assert all(estimator.get_params()[key] is value for key, value in params.items())
    x, y = _digits(100)
    with pytest.raises(error, match=f"{cls.__name__}: " + match):
        estimator.fit(x, y)


# ------------------------------------------------------------------ defaults and read-out
def _split_digits() -> tuple[np.ndarray, ...]:
    """The issue's split: 70/30, ``random_state=0``, min-max scaled on the training rows."""
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    scale = MinMaxScaler().fit(x_train)
    return scale.transform(x_train), scale.transform(x_test), y_train, y_test


def test_default_classifier_matches_svc_on_the_digits_split() -> None:
    from sklearn.svm import SVC

    x_train, x_test, y_train, y_test = _split_digits()
    svc = SVC().fit(x_train, y_train).score(x_test, y_test)
    clf = DIClassifier(random_state=0).fit(x_train, y_train)
    assert clf.features_.n_components_ == 400  # min(400, 1257 // 3)
    assert clf.features_.layer_.gamma == pytest.approx(1 / (64 * x_train.var()), rel=1e-12)
    assert clf.score(x_test, y_test) >= svc


@pytest.mark.parametrize(("rows", "j"), [(60, 20), (300, 100), (1500, 400)])
def test_default_j_follows_the_rows_without_a_warning(rows: int, j: int) -> None:
    x, y = _digits(rows)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = DIFeatures(max_epochs=1, random_state=0).fit(x, y)
    assert fitted.n_components_ == j
    assert fitted.batch_size_ >= 2 * j


def test_training_stops_by_the_di_rule_before_max_epochs() -> None:
    x, y = _digits(200)
    fitted = DIFeatures(20, max_epochs=300, lr=5e-2, validation_fraction=None, random_state=0).fit(
        x, y
    )
    assert fitted.lr_decay_epochs_  # PlateauDecay divided the lr by 10 at least once
    assert len(fitted.di_history_) < 300  # DISaturationStopping ended training
    assert len(fitted.di_history_) > fitted.lr_decay_epochs_[0] + 1


def test_closed_form_leave_one_out_equals_refitting_ridge_without_each_row() -> None:
    from sklearn.linear_model import Ridge

    from kernel_layers.sklearn.readout import loo_ridge_scores

    rng = np.random.default_rng(0)
    features, codes = rng.normal(size=(25, 6)), np.arange(25) % 3
    targets = np.eye(3)[codes] * 2 - 1
    alphas = np.array([1e-3, 0.5, 20.0])
    loo = loo_ridge_scores(features, codes, 3, alphas)
    for a, alpha in enumerate(alphas):
        for i in range(25):
            keep = np.arange(25) != i
            ridge = Ridge(alpha=alpha).fit(features[keep], targets[keep])
            np.testing.assert_allclose(loo[a, i], ridge.predict(features[i : i + 1])[0], rtol=1e-9)


def test_ridge_readout_is_ridge_at_the_penalty_chosen() -> None:
    from sklearn.linear_model import Ridge

    x, y = _digits(300)
    clf = DIClassifier(50, max_epochs=0, random_state=0).fit(x, y)
    features = clf.features_.transform(x)
    reference = Ridge(alpha=clf.readout_.alpha).fit(features, np.eye(10)[y] * 2 - 1)
    np.testing.assert_allclose(clf.decision_function(x), reference.predict(features), atol=1e-8)


def test_a_trained_maps_penalty_is_not_chosen_by_the_rows_it_was_trained_on() -> None:
    # 10 % of the labels flipped: leave-one-out on the rows the map moved to fit chose a
    # penalty about 1000x below the untrained map's, and scored 3 points below it
    from sklearn.datasets import make_classification

    from kernel_layers.sklearn.readout import scale_of

    x, y = make_classification(1000, 20, n_informative=8, flip_y=0.1, random_state=0)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.5, random_state=0)
    trained = DIClassifier(random_state=0).fit(x_train, y_train)
    untrained = DIClassifier(max_epochs=0, random_state=0).fit(x_train, y_train)
    assert trained.features_.best_epoch_ > 0

    def relative(clf: DIClassifier) -> float:
        return clf.readout_.alpha / scale_of(clf.features_.transform(x_train))

    assert relative(trained) > 0.1 * relative(untrained)
    assert trained.score(x_test, y_test) >= untrained.score(x_test, y_test) - 0.01


def test_predict_proba_is_the_tempered_softmax_minimising_loo_log_loss() -> None:
    from scipy.special import softmax

    x, y = _digits(300)
    clf = DIClassifier(50, max_epochs=0, random_state=0).fit(x, y)
    proba = clf.predict_proba(x)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-12)
    temperature = clf.readout_.temperature
    np.testing.assert_allclose(
        proba, softmax(clf.decision_function(x) / temperature, axis=1), rtol=1e-9
    )
    assert (proba.argmax(1) == clf.predict(x)).all()


def test_temperature_of_separable_rows_minimises_the_smoothed_loo_log_loss() -> None:
    from scipy.special import log_softmax
    from sklearn.datasets import make_blobs
    from sklearn.linear_model import Ridge

    x, y = make_blobs(60, centers=[[0, 0], [6, 0], [0, 6]], cluster_std=0.5, random_state=0)
    clf = DIClassifier(20, max_epochs=0, random_state=0).fit(x, y)
    assert clf.readout_.loo_accuracy == 1.0  # one-hot targets would send T to its bound
    features, targets = clf.features_.transform(x), np.eye(3)[y] * 2 - 1
    loo = np.stack([
        Ridge(alpha=clf.readout_.alpha).fit(np.delete(features, i, 0), np.delete(targets, i, 0))
        .predict(features[i : i + 1])[0]
        for i in range(len(y))
    ])  # fmt: skip
    spared = 1.0 / (np.bincount(y)[y] + 2.0)
    soft = np.where(np.eye(3)[y] == 1, 1.0 - spared[:, None], spared[:, None] / 2)
    grid = np.exp(np.linspace(np.log(1e-2), np.log(1e2), 40001))
    losses = [-(soft * log_softmax(loo / t, axis=1)).sum(1).mean() for t in grid]
    expected = grid[int(np.argmin(losses))]
    assert 0.05 < expected < 50.0
    assert clf.readout_.temperature == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("map_", ["nystrom", "fourier"])
@pytest.mark.parametrize("unit", [1e-9, 1e-3, 1e4])
def test_inputs_in_another_unit_train_the_same_map_in_that_unit(map_: str, unit: float) -> None:
    # Adam's steps follow the range of X: landmarks scale with it, frequencies inversely,
    # so every held-out score, prediction and probability is the same in any unit.
    x, y = _digits(300)
    options = {"map": map_, "max_epochs": 4, "n_iter_no_change": 10, "random_state": 0}
    base = DIClassifier(40, **options).fit(x, y)
    scaled = DIClassifier(40, **options).fit(x * unit, y)
    assert scaled.features_.best_epoch_ == base.features_.best_epoch_ > 0
    np.testing.assert_allclose(
        scaled.features_.validation_scores_, base.features_.validation_scores_, rtol=1e-9
    )
    if map_ == "nystrom":
        moved, expected = scaled.features_.layer_.landmarks, base.features_.layer_.landmarks * unit
    else:
        moved, expected = (
            scaled.features_.layer_.frequencies,
            base.features_.layer_.frequencies / unit,
        )
    np.testing.assert_allclose(moved.detach().numpy(), expected.detach().numpy(), rtol=1e-6, atol=0)
    np.testing.assert_allclose(scaled.predict_proba(x * unit), base.predict_proba(x), atol=1e-6)


def test_string_labels_come_back_as_strings() -> None:
    x, y = _digits(300)
    names = np.array(list("abcdefghij"))[y]
    clf = DIClassifier(30, max_epochs=2, random_state=0).fit(x, names)
    assert list(clf.classes_) == list("abcdefghij")
    assert set(clf.predict(x)) <= set("abcdefghij")
    assert clf.score(x, names) > 0.8
    assert clf.decision_function(x).shape == (300, 10)
    assert clf.predict_proba(x).shape == (300, 10)


def test_two_classes_give_one_decision_column_as_scikit_learn() -> None:
    x, y = _digits(300)
    keep = y < 2
    names = np.where(y[keep] == 0, "zero", "one")
    clf = DIClassifier(20, max_epochs=2, random_state=0).fit(x[keep], names)
    scores = clf.decision_function(x[keep])
    assert scores.shape == (keep.sum(),)
    assert (clf.predict(x[keep]) == clf.classes_[(scores > 0).astype(int)]).all()
    assert clf.predict_proba(x[keep]).shape == (keep.sum(), 2)


@pytest.mark.parametrize("cls", [DIFeatures, DIClassifier])
def test_feature_names_in_from_a_data_frame(cls) -> None:
    pandas = pytest.importorskip("pandas")
    x, y = _digits(200)
    columns = [f"pixel{i}" for i in range(64)]
    fitted = cls(20, max_epochs=1, random_state=0).fit(pandas.DataFrame(x, columns=columns), y)
    assert list(fitted.feature_names_in_) == columns
    with pytest.warns(UserWarning, match="fitted with feature names"):
        fitted.predict(x) if cls is DIClassifier else fitted.transform(x)


def test_features_name_their_outputs_and_take_set_output() -> None:
    x, y = _digits(200)
    fitted = DIFeatures(12, max_epochs=1, random_state=0).set_output(transform="default")
    out = fitted.fit(x, y).transform(x)
    assert isinstance(out, np.ndarray) and out.shape == (200, 12)
    assert list(fitted.get_feature_names_out()) == [f"difeatures{i}" for i in range(12)]
    pandas = pytest.importorskip("pandas")
    frame = fitted.set_output(transform="pandas").transform(x)
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame.columns) == [f"difeatures{i}" for i in range(12)]


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        (
            {"readout": "svm"},
            ValueError,
            r"argument 'readout' must be one of \['ridge', 'logistic'\]",
        ),
        ({"C": 0.0}, ValueError, "argument 'C' must be a finite number > 0"),
        ({"n_components": 0}, ValueError, "argument 'n_components' must be an integer >= 1"),
        ({"kernel": "gausian"}, ValueError, r"argument 'kernel' must be one of \['cauchy'"),
        (
            {"kernel": "linear", "map": "fourier"},
            ValueError,
            r"argument 'kernel' must have a spectral law .*got 'linear'",
        ),
    ],
)
def test_bad_classifier_parameters_are_named_at_fit(params, error, match) -> None:
    x, y = _digits(100)
    with pytest.raises(error, match="DIClassifier: " + match):
        DIClassifier(**params).fit(x, y)


def test_the_logistic_readout_is_kept_as_an_option() -> None:
    x, y = _digits(300)
    clf = DIClassifier(30, max_epochs=2, readout="logistic", C=10.0, random_state=0).fit(x, y)
    assert clf.readout_.C == 10.0
    np.testing.assert_allclose(clf.predict_proba(x).sum(1), 1.0, rtol=1e-12)
    assert clf.score(x, y) > 0.9


def test_a_classifiers_warnings_name_the_classifier() -> None:
    # They named DIFeatures, the map DIClassifier fits inside, which the user never built.
    x, y = _digits(50)
    with pytest.warns(UserWarning, match=r"^DIClassifier: n_components=100 with a batch of 50"):
        DIClassifier(100, gamma=0.05, max_epochs=1, validation_fraction=None).fit(x, y)


@pytest.mark.parametrize("value", [0.0, 2.0])
def test_identical_rows_are_predicted_alike_from_features_that_differ_by_rounding(
    value: float,
) -> None:
    # the map's features of identical rows differ in their last bits; a read-out along
    # those differences scored 100 % on labels that carry nothing, as Ridge and SVC do not
    # (identical training rows are given one feature row)
    from kernel_layers.sklearn import DIRegressor

    x = np.full((100, 3), value)
    labels = np.arange(100) % 2
    clf = DIClassifier(random_state=0).fit(x, labels)
    np.testing.assert_array_equal(clf.predict_proba(x), np.full((100, 2), 0.5))
    targets = np.random.default_rng(0).normal(size=100)
    reg = DIRegressor(random_state=0).fit(x, targets)
    np.testing.assert_allclose(reg.predict(x), targets.mean(), rtol=1e-12)


def test_features_of_small_spread_far_from_zero_are_read_out() -> None:
    # rows 1e6 + 0.1 x: the map's features vary by a relative 1e-7, which float64
    # resolves; a read-out that treated that spread as round-off explained nothing
    from sklearn.datasets import make_regression

    from kernel_layers.sklearn import DIRegressor

    x, y = make_regression(400, 4, noise=1.0, random_state=0)
    near = DIRegressor(kernel="linear", max_epochs=0, random_state=0).fit(x * 0.1, y)
    far = DIRegressor(kernel="linear", max_epochs=0, random_state=0).fit(x * 0.1 + 1e6, y)
    assert near.score(x * 0.1, y) > 0.999
    assert far.score(x * 0.1 + 1e6, y) > 0.999
