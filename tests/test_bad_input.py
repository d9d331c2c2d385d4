"""A standing table of bad inputs against every public constructor and function.

Each case calls one entry point with one argument replaced by a bad value (wrong type,
shape, dtype, empty, NaN/Inf, huge, tiny, wrong device) and expects either a clear error
(the right exception type, naming the argument) or a correct, finite result. The table
is generated from a few lists per argument kind, so a new entry point gets the whole
battery by adding one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import scipy.sparse
import torch
from torch.utils.data import DataLoader

from kernel_layers import (
    MLP,
    DILoss,
    EnsembleNystrom,
    FastfoodLayer,
    FeatureCentering,
    FeatureNormalization,
    FourierLayer,
    Kernel,
    KernelClassifier,
    KernelRegressor,
    NystromLayer,
    RidgeHead,
    SmallCNN,
    available_kernels,
    discriminant_information,
    gamma_heuristic,
    get_kernel,
    greedy_landmarks,
    kmeans,
    kmeans_plus_plus,
    least_squares_loss,
    nystrom_discriminant_information,
    random_landmarks,
    register_kernel,
    select_gamma,
)
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data import DigitsDataModule, TensorDataModule, default_batch_size
from kernel_layers.objectives import (
    di_statistics,
    encode_targets,
    merge_statistics,
    unit_norm_columns,
)

GEN = torch.Generator().manual_seed(0)
X = torch.rand(40, 4, generator=GEN)  # a valid [N, D] input, D = 4
Y = torch.arange(40) % 3  # valid labels, 3 classes
Z = torch.rand(6, 4, generator=GEN)  # valid landmarks
NAN = float("nan")
INF = float("inf")


@dataclass
class Entry:
    """One entry point: a call with valid keyword arguments to perturb one at a time."""

    name: str
    call: Callable[..., Any]
    valid: dict[str, Any]
    #: argument name -> the kinds of bad values to try
    kinds: dict[str, list[str]] = field(default_factory=dict)
    #: values that are valid although a kind lists them: argument -> [(value, check)]
    fine: dict[str, list[tuple[Any, Callable[[Any], bool]]]] = field(default_factory=dict)


def _tensor_values(width: int = 4, rows: int = 40) -> list[tuple[str, Any, type]]:
    return [
        ("list", [[0.0] * width] * rows, TypeError),
        ("numpy", np.zeros((rows, width)), TypeError),
        ("int dtype", torch.zeros(rows, width, dtype=torch.long), TypeError),
        ("1-D", torch.zeros(rows), ValueError),
        ("NaN", torch.full((rows, width), NAN), ValueError),
        ("Inf", torch.full((rows, width), INF), ValueError),
        ("huge", torch.full((rows, width), 3e38), ValueError),
        ("meta", torch.zeros(rows, width, device="meta"), ValueError),
        ("complex", torch.zeros(rows, width, dtype=torch.complex64), TypeError),
    ]


#: kind -> [(label, value, expected exception or None for "valid")]
KINDS: dict[str, list[tuple[str, Any, type | None]]] = {
    "int>=1": [
        ("str", "3", TypeError),
        ("float", 2.5, TypeError),
        ("bool", True, TypeError),
        ("None", None, TypeError),
        ("zero", 0, ValueError),
        ("negative", -1, ValueError),
        ("nan", NAN, TypeError),
        ("beyond int64", 10**400, ValueError),
    ],
    "int>=0": [
        ("str", "3", TypeError),
        ("float", 2.5, TypeError),
        ("bool", True, TypeError),
        ("negative", -1, ValueError),
    ],
    "positive": [
        ("str", "1", TypeError),
        ("None", None, TypeError),
        ("bool", True, TypeError),
        ("zero", 0.0, ValueError),
        ("negative", -1.0, ValueError),
        ("nan", NAN, ValueError),
        ("inf", INF, ValueError),
        ("beyond float", 10**400, ValueError),
        ("complex", 1j, TypeError),
    ],
    "bool": [("int", 1, TypeError), ("str", "yes", TypeError), ("None", None, TypeError)],
    "fraction[0,1)": [
        ("str", "0.5", TypeError),
        ("bool", True, TypeError),
        ("negative", -0.1, ValueError),
        ("one", 1.0, ValueError),
        ("nan", NAN, ValueError),
    ],
    "choice": [("unknown", "bogus", ValueError), ("int", 3, TypeError)],
    "seed": [
        ("float", 1.5, TypeError),
        ("str", "1", TypeError),
        ("bool", True, TypeError),
        ("negative", -2, ValueError),
    ],
    # any width is fine ("data"), or the width is fixed by the layer ("input")
    "data": _tensor_values(),
    "input": [*_tensor_values(), ("wrong width", torch.rand(40, 5), ValueError)],
    "labels": [
        ("float", torch.rand(40), ValueError),
        ("2-D wrong rows", torch.zeros(39, 3), ValueError),
        ("negative", torch.full((40,), -1), ValueError),
        ("list", list(range(40)), TypeError),
    ],
    "kernel_params": [
        ("list", [1.0], TypeError),
        ("unknown key", {"bogus": 1.0}, ValueError),
    ],
    "dtype": [
        ("int", torch.long, TypeError),
        ("str", "float64", TypeError),
        ("complex", torch.complex64, TypeError),
    ],
    "device": [("unknown", "gpu", ValueError), ("float", 1.5, TypeError)],
    "weight [4, 3]": [
        ("NaN", torch.full((4, 3), NAN), ValueError),
        ("wrong shape", torch.zeros(4, 2), ValueError),
        ("int", torch.zeros(4, 3, dtype=torch.long), TypeError),
        ("numpy", np.zeros((4, 3)), TypeError),
    ],
    "bias [3]": [
        ("NaN", torch.full((3,), NAN), ValueError),
        ("wrong shape", torch.zeros(2), ValueError),
        ("per row", torch.zeros(40, 3), ValueError),
        ("list", [0.0] * 3, TypeError),
    ],
    "rows": [("no rows", torch.zeros(0, 4), ValueError)],
    "statistics": [
        ("int", 3, TypeError),
        ("other widths", di_statistics(torch.rand(30, 5), torch.rand(30, 3)), ValueError),
    ],
    "float matrix [40, 3]": [
        ("labels", Y, ValueError),
        ("complex", torch.zeros(40, 3, dtype=torch.complex64), TypeError),
        ("1-D", torch.rand(40), ValueError),
        ("other rows", torch.rand(39, 3), ValueError),
    ],
}


def _layer_input_entry(name: str, layer: torch.nn.Module, argument: str = "x") -> Entry:
    def forward(**kwargs: Any) -> Any:
        return layer(kwargs[argument])

    return Entry(f"{name}.forward", forward, {argument: X}, {argument: ["input"]})


ENTRIES: list[Entry] = [
    Entry(
        "FourierLayer",
        FourierLayer,
        {"in_features": 4, "out_features": 8},
        {
            "in_features": ["int>=1"],
            "out_features": ["int>=1"],
            "gamma": ["positive"],
            "kernel": ["choice"],
            "features": ["choice"],
            "ard": ["bool"],
            "trainable": ["bool"],
            "seed": ["seed"],
            "kernel_params": ["kernel_params"],
            "dtype": ["dtype"],
            "device": ["device"],
        },
    ),
    Entry(
        "NystromLayer",
        NystromLayer,
        {"in_features": 4, "out_features": 6},
        {
            "in_features": ["int>=1"],
            "out_features": ["int>=1"],
            "gamma": ["positive"],
            "kernel": ["choice"],
            "jitter": ["positive"],
            "seed": ["seed"],
            "kernel_params": ["kernel_params"],
            "landmarks": ["input"],
            "trainable": ["bool"],
            "dtype": ["dtype"],
            "device": ["device"],
        },
    ),
    Entry(
        "NystromLayer.from_data",
        NystromLayer.from_data,
        {"x": X, "out_features": 5},
        {"x": ["data"], "out_features": ["int>=1"], "init": ["choice"], "seed": ["seed"]},
    ),
    Entry(
        "EnsembleNystrom",
        EnsembleNystrom,
        {"in_features": 4, "out_features": 8, "num_maps": 2},
        {
            "in_features": ["int>=1"],
            "gamma": ["positive"],
            "seed": ["seed"],
            "trainable": ["bool"],
            "dtype": ["dtype"],
            "device": ["device"],
        },
    ),
    Entry(
        "FastfoodLayer",
        FastfoodLayer,
        {"in_features": 4, "out_features": 8},
        {
            "in_features": ["int>=1"],
            "out_features": ["int>=1"],
            "gamma": ["positive"],
            "trainable": ["bool"],
            "seed": ["seed"],
            "dtype": ["dtype"],
            "device": ["device"],
        },
    ),
    Entry(
        "FeatureCentering",
        FeatureCentering,
        {"num_features": 4},
        {"num_features": ["int>=1"], "momentum": ["positive"]},
    ),
    Entry("FeatureNormalization", FeatureNormalization, {}, {"eps": ["positive"]}),
    Entry(
        "RidgeHead",
        RidgeHead,
        {"in_features": 4, "num_outputs": 3},
        {"in_features": ["int>=1"], "num_outputs": ["int>=1"], "rho": ["positive"]},
    ),
    Entry(
        "MLP",
        MLP,
        {"in_features": 4, "hidden_features": [8], "out_features": 3},
        {
            "in_features": ["int>=1"],
            "out_features": ["int>=1"],
            "dropout": ["fraction[0,1)"],
            "batch_norm": ["bool"],
        },
    ),
    Entry(
        "SmallCNN",
        SmallCNN,
        {"in_channels": 1, "out_features": 8},
        {
            "in_channels": ["int>=1"],
            "out_features": ["int>=1"],
            "width": ["int>=1"],
            "dropout": ["fraction[0,1)"],
            "batch_norm": ["bool"],
        },
    ),
    Entry(
        "discriminant_information",
        discriminant_information,
        {"features": X, "targets": Y},
        {"features": ["data"], "targets": ["labels"], "rho": ["positive"], "form": ["choice"]},
    ),
    Entry(
        "nystrom_discriminant_information",
        nystrom_discriminant_information,
        {"x": X, "targets": Y, "landmarks": Z, "gamma": 0.5},
        {
            "x": ["data"],
            "targets": ["labels"],
            "gamma": ["positive"],
            "rho": ["positive"],
            "jitter": ["positive"],
            "landmarks": ["rows"],
        },
    ),
    Entry(
        "least_squares_loss",
        least_squares_loss,
        {"features": X, "targets": Y, "weight": torch.zeros(4, 3)},
        {
            "features": ["data"],
            "rho": ["positive"],
            "weight": ["weight [4, 3]"],
            "bias": ["bias [3]"],
        },
    ),
    Entry(
        "di_statistics",
        di_statistics,
        {"features": X, "targets": torch.rand(40, 3)},
        {"targets": ["float matrix [40, 3]"]},
    ),
    Entry(
        "merge_statistics",
        merge_statistics,
        {"a": di_statistics(X, torch.rand(40, 3)), "b": di_statistics(X, torch.rand(40, 3))},
        {"b": ["statistics"]},
    ),
    Entry(
        "unit_norm_columns",
        unit_norm_columns,
        {"targets": torch.rand(40, 3)},
        {"targets": ["data"]},
    ),
    Entry("encode_targets", encode_targets, {"targets": Y, "batch": 40}, {"targets": ["labels"]}),
    Entry(
        "default_batch_size", default_batch_size, {"num_features": 10}, {"num_features": ["int>=1"]}
    ),
    Entry(
        "register_kernel",
        register_kernel,
        {"kernel": get_kernel("gaussian"), "overwrite": True},
        {"overwrite": ["bool"]},
    ),
    Entry("available_kernels", available_kernels, {}, {"spectral": ["bool"]}),
    Entry("get_kernel", get_kernel, {"name": "gaussian"}, {"spectral": ["bool"]}),
    Entry(
        "DILoss",
        DILoss,
        {"num_classes": 3},
        {"num_classes": ["int>=1"], "rho": ["positive"]},
    ),
    Entry(
        "KernelClassifier",
        KernelClassifier,
        {"kernel_layer": NystromLayer(4, 6), "num_classes": 3},
        {
            "num_classes": ["int>=1"],
            "objective": ["choice"],
            "rho": ["positive"],
            "lr": ["positive"],
            "head_rho": ["positive"],
            "backbone_lr": ["positive"],
            "init_landmarks": ["bool"],
            "return_scores": ["bool"],
        },
    ),
    Entry(
        "KernelRegressor",
        KernelRegressor,
        {"kernel_layer": NystromLayer(4, 6)},
        {"num_targets": ["int>=1"], "lr": ["positive"], "init_landmarks": ["bool"]},
    ),
    Entry(
        "random_landmarks",
        random_landmarks,
        {"x": X, "k": 5},
        {"x": ["data"], "k": ["int>=1"], "seed": ["seed"]},
    ),
    Entry(
        "kmeans_plus_plus",
        kmeans_plus_plus,
        {"x": X, "k": 5},
        {"x": ["data"], "k": ["int>=1"], "seed": ["seed"]},
    ),
    Entry(
        "kmeans",
        kmeans,
        {"x": X, "k": 5},
        {"x": ["data"], "k": ["int>=1"], "iters": ["int>=1"], "init": ["choice"]},
    ),
    Entry(
        "greedy_landmarks",
        greedy_landmarks,
        {"data": X},
        {
            "data": ["rows"],
            "gamma": ["positive"],
            "eta": ["positive"],
            "batch_size": ["int>=1"],
            "relative": ["bool"],
            "return_indices": ["bool"],
        },
    ),
    Entry("gamma_heuristic", gamma_heuristic, {"x": X}, {}),
    Entry(
        "select_gamma",
        select_gamma,
        {"x": X, "y": Y, "num_landmarks": 5, "classifier": "ridge"},
        {"num_landmarks": ["int>=1"], "folds": ["int>=1"], "seed": ["int>=0"]},
    ),
    Entry(
        "TensorDataModule",
        TensorDataModule,
        {"x_train": X, "y_train": Y, "x_test": X, "y_test": Y},
        {
            "batch_size": ["int>=1"],
            "num_workers": ["int>=0"],
            "seed": ["int>=0"],
            "scaling": ["choice"],
            "clip": ["bool"],
            "shuffle": ["bool"],
            "drop_last": ["bool"],
            "pin_memory": ["bool"],
        },
    ),
    Entry(
        "DigitsDataModule",
        DigitsDataModule,
        {},
        {"batch_size": ["int>=1"], "num_features": ["int>=1"], "flatten": ["bool"]},
    ),
    Entry(
        "PlateauDecay",
        PlateauDecay,
        {},
        {
            "mode": ["choice"],
            "patience": ["int>=1"],
            "cooldown": ["int>=0"],
            "threshold_mode": ["choice"],
            "strict": ["bool"],
            "verbose": ["bool"],
        },
    ),
    Entry(
        "DISaturationStopping",
        DISaturationStopping,
        {},
        {
            "mode": ["choice"],
            "patience": ["int>=1"],
            "min_decays": ["int>=0"],
            "check_finite": ["bool"],
            "strict": ["bool"],
        },
    ),
    _layer_input_entry("FourierLayer", FourierLayer(4, 8, seed=0)),
    _layer_input_entry("NystromLayer", NystromLayer(4, 6, seed=0)),
    _layer_input_entry("FastfoodLayer", FastfoodLayer(4, 8, seed=0)),
    _layer_input_entry("NystromLayer(rank=3)", NystromLayer(4, 6, seed=0, rank=3)),
    _layer_input_entry("EnsembleNystrom", EnsembleNystrom(4, 8, num_maps=2, seed=0)),
    _layer_input_entry("FeatureCentering", FeatureCentering(4), "features"),
    _layer_input_entry("FeatureNormalization", FeatureNormalization(), "features"),
]

#: Values a kind lists that are in fact valid for one argument (with a check).
ALLOWED: dict[tuple[str, str, str], Callable[[Any], bool]] = {
    # None means "not given" for optional arguments
    ("NystromLayer", "jitter", "None"): lambda layer: layer.jitter > 0,
    ("FeatureCentering", "momentum", "None"): lambda module: module.momentum is None,
    ("KernelClassifier", "backbone_lr", "None"): lambda model: model.hparams["backbone_lr"] is None,
    ("KernelClassifier", "rho", "None"): lambda model: (
        model.hparams["rho"] is None and model.rho == 1e-4
    ),  # chosen when a fit starts; the paper's until then
    ("KernelClassifier", "head_rho", "None"): lambda model: (
        model.hparams["head_rho"] is None and model.head.rho == model.rho
    ),  # DI's rho
    ("nystrom_discriminant_information", "jitter", "None"): lambda di: bool(torch.isfinite(di)),
    ("TensorDataModule", "batch_size", "None"): lambda dm: dm.batch_size == 1000,
    ("DigitsDataModule", "batch_size", "None"): lambda dm: dm.batch_size == 1000,
    ("DigitsDataModule", "num_features", "None"): lambda dm: dm.num_features is None,
    ("DILoss", "num_classes", "None"): lambda loss: loss.num_classes is None,
    ("default_batch_size", "num_features", "None"): lambda size: size == 1000,
    # equal huge columns: centred, nothing is left
    ("unit_norm_columns", "targets", "huge"): lambda out: bool((out == 0).all()),
    # huge features with a zero read-out: the loss is ||Y||^2-sized and exact
    ("least_squares_loss", "features", "huge"): lambda loss: bool(torch.isfinite(loss)),
    # selecting rows computes nothing from their values
    ("random_landmarks", "x", "huge"): lambda index: index.shape == (5,),
    # any width and rank are rows to normalise; huge rows come out of unit norm
    ("FeatureNormalization.forward", "features", "1-D"): lambda out: out.shape == (40,),
    ("FeatureNormalization.forward", "features", "wrong width"): lambda out: torch.allclose(
        out.norm(dim=-1), torch.ones(40)
    ),
    ("FeatureNormalization.forward", "features", "huge"): lambda out: torch.allclose(
        out, torch.full((40, 4), 0.5)
    ),
}


def _cases() -> list[Any]:
    cases = []
    for entry in ENTRIES:
        for argument, kinds in entry.kinds.items():
            for kind in kinds:
                for label, value, error in KINDS[kind]:
                    key = (entry.name, argument, label)
                    allowed = ALLOWED.get(key)
                    cases.append(
                        pytest.param(
                            entry,
                            argument,
                            value,
                            None if allowed else error,
                            allowed,
                            id=f"{entry.name}-{argument}-{label}",
                        )
                    )
    return cases


CASES = _cases()


def test_the_table_has_at_least_300_cases() -> None:
    assert len(CASES) >= 300, len(CASES)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("entry", "argument", "value", "error", "check"), CASES)
def test_bad_input(
    entry: Entry,
    argument: str,
    value: Any,
    error: type[Exception] | None,
    check: Callable[[Any], bool] | None,
) -> None:
    kwargs = {**entry.valid, argument: value}
    if error is None:
        result = entry.call(**kwargs)
        assert check is not None and check(result)
        return
    with pytest.raises(error) as info:
        entry.call(**kwargs)
    message = str(info.value)
    assert f"'{argument}'" in message or f"'{argument}." in message, message


# ---------------------------------------------------------------- correct results
@pytest.mark.parametrize(
    ("call", "check"),
    [
        # tiny and huge but representable values give finite, correct results
        (lambda: FourierLayer(4, 8, gamma=1e-30, seed=0)(X), lambda out: torch.isfinite(out).all()),
        (lambda: NystromLayer(4, 6, gamma=1e-30, seed=0)(X), lambda out: torch.isfinite(out).all()),
        (lambda: NystromLayer(4, 6, gamma=1e30, seed=0)(X), lambda out: torch.isfinite(out).all()),
        (lambda: discriminant_information(X, Y, rho=1e-30), lambda di: 0 <= float(di) <= 2 + 1e-4),
        (lambda: discriminant_information(X, Y, rho=1e30), lambda di: 0 <= float(di) < 1e-20),
        (lambda: discriminant_information(X * 1e-20, Y), lambda di: float(di) < 1e-6),
        (lambda: FourierLayer(4, 8, seed=0)(X[:0]), lambda out: out.shape == (0, 8)),
        (lambda: FastfoodLayer(4, 8, seed=0)(X[:0]), lambda out: out.shape == (0, 8)),
        (
            lambda: FastfoodLayer(4, 8, seed=0)(X[:0].expand(3, 0, 4)),
            lambda out: out.shape == (3, 0, 8),
        ),
        (
            lambda: NystromLayer(4, 6, seed=0)(X.double().float()[:1]),
            lambda out: out.shape == (1, 6),
        ),
        (lambda: FourierLayer(4, 8, seed=0)(X.half()), lambda out: out.dtype == torch.float32),
        (lambda: FourierLayer(4, 8, seed=0)(X.T.contiguous().T), lambda out: out.shape == (40, 8)),
    ],
)
def test_edge_values_give_correct_results(
    call: Callable[[], Any], check: Callable[[Any], bool]
) -> None:
    assert check(call())


def test_every_case_names_a_real_argument() -> None:
    """The table's argument names exist in the signatures (no typo hides a case)."""
    import inspect

    for entry in ENTRIES:
        if entry.name.endswith(".forward"):
            continue
        target = entry.call
        params = set(inspect.signature(target).parameters)
        if "kwargs" in params:  # data modules pass options on to ArrayDataModule
            from kernel_layers.data.base import ArrayDataModule

            params |= set(inspect.signature(ArrayDataModule).parameters)
        assert set(entry.kinds) <= params, (entry.name, set(entry.kinds) - params)


def test_labels_without_rows_are_named() -> None:
    with pytest.raises(ValueError, match=r"argument 'targets' must hold at least one label"):
        encode_targets(Y[:0], 0)


def test_ridge_head_shapes_are_named() -> None:
    head = RidgeHead(4, 3)
    with pytest.raises(ValueError, match=r"RidgeHead: argument 'targets' must have one row per"):
        head.update(X, Y[:39])
    head.update(X, Y)
    head.fit()
    with pytest.raises(
        ValueError, match=r"RidgeHead: argument 'features' must have shape \[B, 4\]"
    ):
        head(torch.rand(3, 5))


def test_seeds_take_the_generators_whole_range() -> None:
    first = NystromLayer(4, 6, seed=2**64 - 1).landmarks
    assert torch.equal(first, NystromLayer(4, 6, seed=2**64 - 1).landmarks)
    with pytest.raises(
        ValueError, match=r"argument 'seed' must be an integer <= 18446744073709551615"
    ):
        NystromLayer(4, 6, seed=2**64)


def test_least_squares_loss_under_autocast() -> None:
    # bfloat16 features from autocast, a float32 read-out: the loss as in float32
    weight = torch.rand(4, 3, generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = torch.nn.functional.linear(X, torch.eye(4))
        assert features.dtype == torch.bfloat16
        loss = least_squares_loss(features, Y, weight)
    want = least_squares_loss(features.float(), Y, weight)
    assert float(loss) == pytest.approx(float(want), rel=2e-2)


def test_di_statistics_take_integer_one_hot_targets() -> None:
    one_hot = torch.nn.functional.one_hot(Y, 3)
    got = di_statistics(X.double(), one_hot)
    want = di_statistics(X.double(), one_hot.double())
    for name, value in got._asdict().items():
        assert torch.equal(torch.as_tensor(value), torch.as_tensor(getattr(want, name))), name


def test_a_batch_that_is_not_a_tuple_is_named(make_trainer: Callable[..., Any]) -> None:
    model = KernelClassifier(NystromLayer(4, 6, seed=0), num_classes=3)
    with pytest.raises(TypeError, match=r"a batch must be a tuple \(x, y, \.\.\.\).*got 'dict'"):
        model.training_step({"x": X, "y": Y}, 0)
    with pytest.raises(TypeError, match=r"a batch must be a tuple \(x, y, \.\.\.\).*got 1"):
        model.validation_step((X,), 0)
    # fit draws the landmarks from the first batches before any step: named there too
    rows = [{"x": X[i], "y": int(Y[i])} for i in range(len(Y))]
    with pytest.raises(TypeError, match=r"a batch must be a tuple \(x, \.\.\.\).*got 'dict'"):
        make_trainer(max_epochs=1).fit(model, DataLoader(rows, batch_size=20))
    regressor = KernelRegressor(NystromLayer(4, 6, seed=0))
    with pytest.raises(TypeError, match=r"KernelRegressor: a batch must be a tuple \(x, \.\.\.\)"):
        regressor.predict_step({"x": X}, 0)


# ---------------------------------------------------------------- data arguments and files
def _data_arrays(**changes: Any) -> dict[str, Any]:
    x = np.random.default_rng(0).random((40, 4))
    arrays: dict[str, Any] = {
        "x_train": x[:30],
        "y_train": np.arange(30) % 3,
        "x_test": x[30:],
        "y_test": np.arange(10) % 3,
    }
    return {**arrays, **changes}


def _huge_rows() -> np.ndarray:
    rows = np.random.default_rng(0).random((30, 4))
    rows[0, 0], rows[1, 0] = 1e308, -1e308
    return rows


#: (changed arguments, exception, the argument the message names)
DATA_CASES = [
    ({"x_train": _huge_rows()}, ValueError, "x_train"),
    ({"x_test": -_huge_rows()[:10]}, ValueError, "x_test"),
    ({"x_train": np.zeros((30, 4)) + 1j}, TypeError, "x_train"),
    ({"x_train": np.zeros((30, 4), dtype="datetime64[D]")}, TypeError, "x_train"),
    ({"x_train": np.zeros((30, 4), dtype="timedelta64[s]")}, TypeError, "x_train"),
    ({"x_train": np.full((30, 4), "0.5", dtype=object)}, TypeError, "x_train"),
    ({"x_test": np.full((10, 4), "0.5")}, TypeError, "x_test"),
    ({"x_train": torch.zeros(30, 4, device="meta")}, ValueError, "x_train"),
    ({"x_train": torch.zeros(30, 4).to_sparse()}, ValueError, "x_train"),
    ({"x_test": scipy.sparse.csr_matrix(np.zeros((10, 4)))}, ValueError, "x_test"),
    ({"x_train": torch.zeros(30, 4, dtype=torch.complex128)}, TypeError, "x_train"),
    ({"y_train": np.array(["a", "b", "c"] * 10)}, TypeError, "y_train"),
    ({"y_test": np.array(["a"] * 10, dtype=object)}, TypeError, "y_test"),
    ({"y_train": torch.zeros(30, dtype=torch.long, device="meta")}, ValueError, "y_train"),
    ({"y_train": np.r_[np.arange(29) % 3, 255]}, ValueError, "num_classes"),
    ({"y_test": np.r_[np.arange(9) % 3, 1e9]}, ValueError, "num_classes"),
    ({"y_test": np.r_[np.arange(9) % 3, 1e9], "num_classes": 3}, ValueError, "y_test"),
    ({"y_train": np.arange(30) % 3 + 0.5}, ValueError, "y_train"),
    ({"pixel_max": -1.0}, ValueError, "pixel_max"),
    ({"pixel_max": "255"}, TypeError, "pixel_max"),
]


@pytest.mark.parametrize(
    ("changes", "error", "argument"),
    DATA_CASES,
    ids=[f"TensorDataModule-{'-'.join(map(str, c))}-{i}" for i, (c, _, _) in enumerate(DATA_CASES)],
)
def test_tensor_data_module_bad_arguments(changes: dict, error: type, argument: str) -> None:
    with pytest.raises(error, match=rf"^TensorDataModule: argument '{argument}'"):
        TensorDataModule(**_data_arrays(**changes), val_fraction=0.0)


def _write_file(folder: Any, kind: str) -> Any:
    """A damaged or ambiguous user file of one kind; returns its path."""
    from PIL import Image

    from kernel_layers.data.idx import write_idx

    if kind == "csv-ambiguous-header":
        path = folder / "rows.csv"
        path.write_text("0,1\n2,3\n")
    elif kind == "idx-trailing-bytes":
        path = folder / "data-idx1-ubyte"
        write_idx(path, np.arange(5, dtype=np.uint8))
        path.write_bytes(path.read_bytes() + b"\0")
    else:  # an image folder
        path = folder / "images"
        path.mkdir()
        rgba = np.zeros((8, 8, 4), dtype=np.uint8)
        rgba[..., 3] = np.arange(64).reshape(8, 8)  # content only in the alpha channel
        Image.fromarray(rgba, mode="RGBA").save(path / "a.png")
    return path


def _read_rows(shape: tuple[int, ...], pixel_max: float | None = None) -> Callable[[Any], Any]:
    from kernel_layers.data.user_files import read_feature_rows

    return lambda path: read_feature_rows(path, shape, pixel_max=pixel_max)


def _read_idx(path: Any) -> Any:
    from kernel_layers.data.idx import read_idx

    return read_idx(path)


@pytest.mark.parametrize(
    ("kind", "call", "pattern"),
    [
        (
            "csv-ambiguous-header",
            _read_rows((2,)),
            r"the first row of '.*rows.csv' is 0,1, which may be pandas' column names or data",
        ),
        ("idx-trailing-bytes", _read_idx, r"'.*data-idx1-ubyte' is longer than its header"),
        ("image-alpha", _read_rows((1, 8, 8), 16.0), r"image '.*a.png' has transparent pixels"),
        (
            "image-unknown-range",
            _read_rows((1, 8, 8)),
            r"cannot read the image folder '.*images': the range of the training data's "
            r"pixels is unknown",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else "",
)
def test_damaged_or_ambiguous_data_files_are_refused_by_name(tmp_path, kind, call, pattern) -> None:
    path = _write_file(tmp_path, kind)
    with pytest.raises(ValueError, match=pattern):
        call(path)


def test_predictions_are_never_written_over_an_input(tmp_path) -> None:
    from kernel_layers.training.predictions import check_not_an_input

    source = tmp_path / "rows.csv"
    source.write_text("1,2,3\n")
    (tmp_path / "link.csv").symlink_to(source)
    for output in (source, tmp_path / "link.csv", tmp_path / "." / "rows.csv"):
        with pytest.raises(ValueError, match=r"argument 'output' .* is the input file"):
            check_not_an_input(output, [None, source])
    check_not_an_input(tmp_path / "out.csv", [source, tmp_path])  # another file: fine
    assert source.read_text() == "1,2,3\n"


# ---------------------------------------------------------------- training and estimator inputs
def _training_cases() -> list[Any]:
    from kernel_layers._validation import check_labels, check_torch_device
    from kernel_layers.sklearn import DIClassifier, DIFeatures

    digits_x = np.random.default_rng(0).random((60, 4))
    digits_y = np.arange(60) % 3

    def step(objective: str, labels: torch.Tensor) -> Callable[[], Any]:
        def call() -> Any:
            model = KernelClassifier(FourierLayer(4, 8, seed=0), num_classes=3, objective=objective)
            return model.training_step((X, labels), 0)

        return call

    def fit(cls: type, **params: Any) -> Callable[[], Any]:
        return lambda: cls(n_components=8, max_epochs=1, **params).fit(digits_x, digits_y)

    out_of_range, negative = Y.clone(), Y.clone()
    out_of_range[5], negative[5] = 3, -1
    cases = []
    for objective in ("di", "ls", "ce"):
        for label, labels, error in [
            ("label 3 of 3 classes", out_of_range, ValueError),
            ("label -1", negative, ValueError),
            ("float labels", Y.float(), TypeError),
            ("2-D labels", Y[:, None], ValueError),
        ]:
            cases.append(
                (f"training_step[{objective}]-{label}", step(objective, labels), error, "y")
            )
    for cls in (DIFeatures, DIClassifier):
        name = cls.__name__
        cases += [
            (f"{name}-random_state=-1", fit(cls, random_state=-1), ValueError, "random_state"),
            (
                f"{name}-random_state=2**32",
                fit(cls, random_state=2**32),
                ValueError,
                "random_state",
            ),
            (f"{name}-random_state='0'", fit(cls, random_state="0"), TypeError, "random_state"),
            (f"{name}-random_state=0.5", fit(cls, random_state=0.5), TypeError, "random_state"),
            (f"{name}-device='bogus'", fit(cls, device="bogus"), ValueError, "device"),
            (f"{name}-device=None", fit(cls, device=None), TypeError, "device"),
            (f"{name}-batch_size=8", fit(cls, batch_size=8), ValueError, "batch_size"),
            (f"{name}-batch_size=4", fit(cls, batch_size=4), ValueError, "batch_size"),
        ]
    cases += [
        (
            "RidgeHead.update-label 3",
            lambda: RidgeHead(4, 3).update(X, out_of_range),
            ValueError,
            "targets",
        ),
        (
            "RidgeHead.update-float [B]",
            lambda: RidgeHead(4, 3).update(X, Y.float()),
            TypeError,
            "targets",
        ),
        ("check_labels-list", lambda: check_labels("f", "y", [0, 1], 3), TypeError, "y"),
        ("check_labels-bool", lambda: check_labels("f", "y", Y > 0, 3), TypeError, "y"),
        (
            "check_torch_device-'gpu0'",
            lambda: check_torch_device("f", "device", "gpu0"),
            ValueError,
            "device",
        ),
    ]
    return [pytest.param(call, error, argument, id=name) for name, call, error, argument in cases]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("call", "error", "argument"), _training_cases())
def test_training_and_estimator_inputs(
    call: Callable[[], Any], error: type[Exception], argument: str
) -> None:
    with pytest.raises(error) as info:
        call()
    assert f"argument '{argument}'" in str(info.value), str(info.value)


# ---------------------------------------------------------------- damaged or edited checkpoints
@pytest.fixture(scope="module")
def fitted_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The folder holding ``good.ckpt``, a one-epoch ``NystromLayer(4, 6)`` model's
    checkpoint."""
    import lightning as L

    folder = tmp_path_factory.mktemp("ckpt")
    model = KernelClassifier(NystromLayer(4, 6, gamma=0.5, seed=0), num_classes=3)
    dm = TensorDataModule(X, Y, X, Y, batch_size=20, val_fraction=0.0)
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, dm)
    trainer.save_checkpoint(folder / "good.ckpt")
    return folder


def _hparams(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda checkpoint: edit(checkpoint["hyper_parameters"])


def _layer(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return _hparams(lambda h: h["kernel_layer"]["init_args"].__setitem__(key, value))


def _state(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(checkpoint: dict[str, Any]) -> None:
        if value is None:
            del checkpoint["state_dict"][key]
        else:
            checkpoint["state_dict"][key] = checkpoint["state_dict"][key] * value

    return edit


CHECKPOINT_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "layer-in-features-huge": _layer("in_features", 10**9),
    "layer-out-features-other": _layer("out_features", 7),
    "layer-class-not-a-module": _hparams(
        lambda h: h["kernel_layer"].__setitem__("class_path", "os.system")
    ),
    "layer-dtype-int8": _hparams(lambda h: h["kernel_layer"].__setitem__("dtype", "int8")),
    "backbone-huge": _hparams(
        lambda h: h.__setitem__(
            "backbone",
            {
                "class_path": "torch.nn.Linear",
                "init_args": {"in_features": 10**7, "out_features": 9},
            },
        )
    ),
    "num-classes-huge": _hparams(lambda h: h.__setitem__("num_classes", 10**9)),
    "num-classes-string": _hparams(lambda h: h.__setitem__("num_classes", "3")),
    "landmarks-nan": _state("kernel_layer.landmarks", float("nan")),
    "landmarks-inf": _state("kernel_layer.landmarks", float("inf")),
    "head-weight-nan": _state("head.weight", float("nan")),
    "head-bias-missing": _state("head.bias", None),
    "landmarks-missing": _state("kernel_layer.landmarks", None),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", sorted(CHECKPOINT_EDITS))
def test_an_edited_checkpoint_is_refused_naming_it(fitted_checkpoint: Any, name: str) -> None:
    checkpoint = torch.load(fitted_checkpoint / "good.ckpt", weights_only=True)
    CHECKPOINT_EDITS[name](checkpoint)
    path = fitted_checkpoint / f"{name}.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises((ValueError, TypeError)) as info:
        KernelClassifier.load_from_checkpoint(path)
    assert f"{name}.ckpt" in str(info.value) or "argument 'kernel_layer" in str(info.value), str(
        info.value
    )


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00" * 64, b"PK\x03\x04 not a zip", b"just text\n"],
    ids=["empty", "zeros", "bad-zip", "text"],
)
def test_an_unreadable_checkpoint_is_refused_naming_it(tmp_path: Any, content: bytes) -> None:
    path = tmp_path / "unreadable.ckpt"
    path.write_bytes(content)
    with pytest.raises(
        ValueError,
        match=r"checkpoint '.*unreadable\.ckpt' (is not a readable checkpoint|refused: .* or "
        r"is no checkpoint at all)",
    ):
        KernelClassifier.load_from_checkpoint(path)


def test_a_truncated_checkpoint_is_refused_naming_it(fitted_checkpoint: Any) -> None:
    data = (fitted_checkpoint / "good.ckpt").read_bytes()
    for fraction in (0.1, 0.5, 0.9):
        path = fitted_checkpoint / "truncated.ckpt"
        path.write_bytes(data[: int(len(data) * fraction)])
        with pytest.raises(ValueError, match=r"checkpoint '.*truncated\.ckpt' is not a readable"):
            KernelClassifier.load_from_checkpoint(path)


# ---------------------------------------------------------------- hostile or mismatched sources
def test_a_checkpoint_that_would_run_code_is_refused_unread(tmp_path: Any) -> None:
    from hostile import write_code_running_checkpoint

    path, marker = tmp_path / "evil.ckpt", tmp_path / "ran"
    write_code_running_checkpoint(path, marker)
    with pytest.raises(ValueError, match=r"checkpoint '.*evil\.ckpt' refused: it holds Python"):
        KernelClassifier.load_from_checkpoint(path)
    assert not marker.exists()


def test_an_unreachable_checkpoint_url_is_named() -> None:
    url = "http://127.0.0.1:9/none.ckpt"  # the discard port: nothing listens there
    with pytest.raises(OSError, match=r"could not read the checkpoint URL 'http://127\.0\.0\.1:9"):
        KernelClassifier.load_from_checkpoint(url)


@pytest.mark.filterwarnings("ignore")
def test_a_layer_other_than_the_checkpoints_is_refused_in_both_loads(
    fitted_checkpoint: Any, make_trainer: Callable[..., Any]
) -> None:
    path = fitted_checkpoint / "good.ckpt"
    with pytest.raises(
        ValueError, match=r"kernel_layer\.init_args\.gamma: checkpoint 0\.5, argument 2"
    ):
        KernelClassifier.load_from_checkpoint(path, kernel_layer=NystromLayer(4, 6, gamma=2.0))
    other = KernelClassifier(NystromLayer(4, 6, gamma=2.0, seed=0), num_classes=3)
    dm = TensorDataModule(X, Y, X, Y, batch_size=20, val_fraction=0.0)
    with pytest.raises(
        ValueError, match=r"kernel_layer\.init_args\.gamma: checkpoint 0\.5, model 2"
    ):
        make_trainer().test(other, dm, ckpt_path=path, verbose=False)


def _matrix(x: torch.Tensor, z: torch.Tensor, gamma: float) -> torch.Tensor:
    return x @ z.T


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Kernel(3, _matrix), r"Kernel: argument 'name' must be a non-empty str, got 3"),
        (lambda: Kernel("", _matrix), r"argument 'name' must be a non-empty str, got ''"),
        (lambda: Kernel("x", None), r"argument 'matrix' must be callable, got NoneType"),
        (lambda: Kernel("x", _matrix, 5), r"'quantile' must be callable or None, got int"),
        (
            lambda: register_kernel(_matrix),
            r"register_kernel: argument 'kernel' must be a kernel_layers Kernel .*got function",
        ),
    ],
)
def test_a_malformed_kernel_is_refused_before_the_registry(
    make: Callable[[], object], match: str
) -> None:
    # Accepted, Kernel(3, fn) broke available_kernels() and every misspelt get_kernel
    # for the session (sorting an int among the names).
    before = available_kernels()
    with pytest.raises(TypeError, match=match):
        make()
    assert available_kernels() == before
