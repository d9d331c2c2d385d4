"""Regression at the same ``J``: exact ``KernelRidge``, ``Nystroem`` + ``RidgeCV``, the
untrained map with the ridge read-out, the DI-trained ``KernelRegressor`` and
``DIRegressor()``; a linear ``RidgeCV`` beside them, with no kernel.

Protocol, the same for every method: ``train_test_split(test_size=0.3,
random_state=0)``; features min-max scaled on the training rows (``MinMaxScaler``);
targets standardised on the training rows (``StandardScaler``) for fitting, and the
test ``R^2`` and RMSE computed in the targets' own units. ``J = min(200, rows // 3)``
of the training rows. The approximations share the kernel parameter
``gamma = 1 / (D * X_train.var())`` (scikit-learn's ``gamma="scale"``):

* ``linear_ridge``: ``RidgeCV`` (``alpha`` by leave-one-out over ``1e-4 .. 1e2``) on the
  scaled features themselves: how much of the target a linear model explains;
* ``kernel_ridge_cv``: exact RBF ``KernelRidge``, ``alpha`` and ``gamma`` chosen by
  3-fold cross-validation on the training rows (``GridSearchCV``: ``alpha`` in
  ``1e-3 .. 1``, ``gamma`` in ``{0.1, 0.3, 1, 3, 10} x`` the shared one); on data of
  more than ``KRR_ROWS`` training rows, on a seeded subset of that many (the figure
  ``krr_rows`` says how many);
* ``nystroem_ridge``: ``Nystroem(n_components=J)`` and ``RidgeCV`` (``alpha`` by
  leave-one-out over ``1e-4 .. 1e2``);
* ``untrained``: ``KernelRegressor`` with no epoch: a ``NystromLayer`` of ``J``
  landmarks drawn from the training rows and the ridge read-out;
* ``di_last``: the same map trained by DI (``KernelRegressor``, ``PlateauDecay`` and
  ``DISaturationStopping`` on ``train/di_epoch``, at most ``MAX_EPOCHS``), its last
  epoch. The Lightning methods refit their ridge read-out (penalty by GCV) on every
  training row at the end;
* ``di``: the same, trained on 90 % of the training rows and validated on the other
  ``HELD_OUT`` after each epoch, the best on ``val/r2`` kept, the untrained map
  included (``KernelRegressor(keep_best="val/r2")``);
* ``di_regressor``: ``DIRegressor()`` with its defaults (its own ``J`` and ``gamma``).

Each (data set, method) is a record of ``benchmarks/results/regression.json``, written
as soon as it is measured; a re-run skips those already there unless ``--force``.
``--components``, ``--lr``, ``--rho``, ``--ard`` (one learned bandwidth per feature,
``NystromLayer(ard=True)``) and ``--head-rho A`` (every read-out's penalty fixed at ``A``
instead of chosen: ``Ridge(alpha=A)`` after ``Nystroem``, ``KernelRegressor(head_rho=A)``,
which also sets DI's ``rho`` to ``A`` shared out over the batches unless ``--rho`` is
given; the maps compared at one
penalty; the methods with no such penalty, ``linear_ridge``, ``kernel_ridge_cv`` and
``di_regressor``, are not run) measure variants (records named
``DATA/METHOD@J30,lr0.001,...``, the table ``regression_variants``). ``--seed K`` draws the
landmarks, batches and held-out rows of the Lightning methods, ``Nystroem``'s components
and ``DIRegressor``'s state from ``K`` instead of 0 (the split stays the same; records
``DATA/METHOD@seedK``, or ``DATA/METHOD@VARIANT,seedK`` of a variant); each such run also
rewrites the record ``DATA/METHOD@mean of seeds`` (``DATA/METHOD@VARIANT,mean of
seeds``): the mean, least and largest R² over every seed stored, 0 included (the table
``regression_seeds``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/regression.py [--datasets diabetes boston] [--force]
    OMP_NUM_THREADS=1 python benchmarks/regression.py --datasets diabetes boston servo \
        --methods nystroem_ridge untrained di_last di --seed 1
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import records
import suite_data
import torch
from regression_goals import MEAN_TAG
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.kernel_approximation import Nystroem
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from suite_goals import SEED_TAG  # the classification suite's names of seed runs
from torch.utils.data import DataLoader, TensorDataset

from kernel_layers import KernelRegressor, NystromLayer
from kernel_layers.callbacks import DISaturationStopping, PlateauDecay
from kernel_layers.data.tensor import TensorDataModule

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "results" / "regression.json"
MLBENCH = suite_data.DATA / "mlbench"  # the CSVs of benchmarks/mlbench_data.py
DATASETS = ("diabetes", "friedman1", "boston", "servo")
METHODS = (
    "linear_ridge",
    "kernel_ridge_cv",
    "nystroem_ridge",
    "untrained",
    "di_last",
    "di",
    "di_regressor",
)
LABELS = {
    "linear_ridge": "linear `RidgeCV` (no kernel)",
    "kernel_ridge_cv": "exact `KernelRidge` (CV)",
    "nystroem_ridge": "`Nystroem` + `RidgeCV`",
    "untrained": "untrained map + ridge",
    "di_last": "DI-trained `KernelRegressor`, last epoch",
    "di": "DI-trained `KernelRegressor`, best on held-out rows",
    "di_regressor": "`DIRegressor()`",
}
#: The penalties ``RidgeCV`` chooses from by leave-one-out.
ALPHAS = np.logspace(-4, 2, 13)
#: Exact kernel ridge on at most this many training rows.
KRR_ROWS = 3000
#: Epochs of DI training at most (the stopping rule usually ends earlier).
MAX_EPOCHS = 60
#: Adam's learning rate of the DI-trained map.
LR = 1e-2
#: DI's ridge parameter (``None``: ``KernelRegressor``'s default, the read-out's penalty
#: on the untrained map shared out over the batches of an epoch).
RHO: float | None = None
#: Whether the Lightning methods' map learns one bandwidth per feature (``--ard``).
ARD = False
#: Every read-out's penalty, fixed (``--head-rho``); ``None``: each chooses its own.
HEAD_RHO: float | None = None
LR_DEFAULT, RHO_DEFAULT = LR, RHO
#: Share of the training rows the ``di`` method validates on to keep its best epoch.
HELD_OUT = 0.1
#: Seed of the random draws of a run (``--seed``): landmarks, batches, held-out rows,
#: ``Nystroem``'s components, ``DIRegressor``'s state.
SEED = 0
DESCRIPTION = (
    "Regression at the same J (min(200, training rows // 3)): test R^2, RMSE (target units) "
    "and fit seconds; 70/30 split random_state=0, features min-max scaled and targets "
    "standardised on the training rows; exact KernelRidge with alpha and gamma by 3-fold CV "
    f"on at most {KRR_ROWS} training rows; see benchmarks/regression.py."
)

#: The methods ``--head-rho`` fixes the read-out penalty of.
HEAD_RHO_METHODS = ("nystroem_ridge", "untrained", "di_last", "di")

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a data set (the mlbench CSVs from ``benchmarks/mlbench_data.py``)."""
    if name == "diabetes":
        x, y = load_diabetes(return_X_y=True)
        return x, y
    if name == "friedman1":
        x, y = make_friedman1(n_samples=20_000, noise=1.0, random_state=0)
        return x, y
    import pandas as pd

    if name == "boston":
        frame = pd.read_csv(MLBENCH / "BostonHousing.csv")
        return frame.drop(columns="medv").to_numpy(float), frame["medv"].to_numpy(float)
    if name == "servo":
        frame = pd.read_csv(MLBENCH / "Servo.csv")
        x = pd.get_dummies(frame.drop(columns="Class"), columns=["Motor", "Screw"], dtype=float)
        return x.to_numpy(float), frame["Class"].to_numpy(float)
    raise ValueError(f"unknown data set {name!r}")


def split(name: str) -> Split:
    """Scaled features and raw targets of the 70/30 split."""
    x, y = load(name)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    scale = MinMaxScaler().fit(x_train)
    return scale.transform(x_train), scale.transform(x_test), y_train, y_test


def components(rows: int) -> int:
    """The ``J`` shared by the approximations."""
    return min(200, rows // 3)


def _fit_sklearn(make: Callable[[], Any], data: Split) -> tuple[np.ndarray, float, Any]:
    """Fit on standardised targets; predictions in target units, fit seconds, model."""
    x_train, x_test, y_train, _ = data
    target = StandardScaler().fit(y_train[:, None])
    model = make()
    start = time.perf_counter()
    model.fit(x_train, target.transform(y_train[:, None])[:, 0])
    seconds = time.perf_counter() - start
    prediction = target.inverse_transform(np.reshape(model.predict(x_test), (-1, 1)))[:, 0]
    return prediction, seconds, model


def _kernel_regressor(
    data: Split, j: int, gamma: float, epochs: int, held_out: float
) -> tuple[np.ndarray, float, float | None]:
    """``KernelRegressor`` trained ``epochs`` at most (0: the untrained map); with
    ``held_out > 0`` that share of the training rows is validated on after each epoch and
    the best on ``val/r2`` is kept, the untrained map included (``keep_best``). The
    read-out is refitted on every training row at the end. Returns the test predictions,
    the seconds and DI's ``rho`` used (``None`` for the untrained map)."""
    x_train, x_test, y_train, y_test = data
    target = StandardScaler().fit(y_train[:, None])
    y_fit = target.transform(y_train[:, None])
    y_eval = target.transform(y_test[:, None])
    batch = min(max(1000, 2 * j), round(len(x_train) * (1 - held_out)))
    module = TensorDataModule(
        x_train,
        y_fit,
        x_test,
        y_eval,
        float_targets=True,
        batch_size=batch,
        val_fraction=held_out,
        seed=SEED,
    )
    torch.manual_seed(SEED)
    layer = NystromLayer(x_train.shape[1], j, gamma=gamma, ard=ARD)
    keep = "val/r2" if held_out else None
    model = KernelRegressor(layer, lr=LR, rho=RHO, keep_best=keep, head_rho=HEAD_RHO)
    trainer = L.Trainer(
        max_epochs=epochs,
        callbacks=[PlateauDecay(verbose=False), DISaturationStopping()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    rho: float | None = None
    if epochs:
        trainer.fit(model, module)
        rho = model.rho
    else:  # the untrained map: the test loop draws the landmarks
        trainer.test(model, module, verbose=False)
    every_row = TensorDataset(module.transform(x_train), torch.as_tensor(y_fit).float())
    model.refit_head(DataLoader(every_row, batch_size=4096))
    seconds = time.perf_counter() - start
    x = module.test_dataset.tensors[0]  # type: ignore[union-attr]
    model.eval()
    with torch.no_grad():
        standardised = model.predict(model(x)).double().numpy()
    return target.inverse_transform(standardised)[:, 0], seconds, rho


def measure(name: str, method: str, data: Split, width: int | None = None) -> dict[str, Any]:
    """The figures of ``method`` on data set ``name`` (``width``: J, else the default)."""
    x_train, _, _, y_test = data
    j = width or components(len(x_train))
    gamma = 1.0 / (x_train.shape[1] * x_train.var())
    extra: dict[str, Any] = {}
    trained = method in ("di", "di_last")  # the methods whose map DI trains
    fixed = HEAD_RHO is not None and method in HEAD_RHO_METHODS  # penalty given
    if method == "linear_ridge":
        prediction, seconds, _ = _fit_sklearn(lambda: RidgeCV(alphas=ALPHAS), data)
    elif method == "kernel_ridge_cv":
        rows = min(len(x_train), KRR_ROWS)
        pick = np.random.default_rng(0).permutation(len(x_train))[:rows]
        subset = (x_train[pick], data[1], data[2][pick], y_test)
        grid = {
            "alpha": [1e-3, 1e-2, 1e-1, 1.0],
            "gamma": [gamma * f for f in (0.1, 0.3, 1, 3, 10)],
        }
        prediction, seconds, model = _fit_sklearn(
            lambda: GridSearchCV(KernelRidge(kernel="rbf"), grid, cv=3), subset
        )
        extra = {"krr_rows": rows, **{k: float(v) for k, v in model.best_params_.items()}}
        j = rows
    elif method == "nystroem_ridge":
        readout = RidgeCV(alphas=ALPHAS) if HEAD_RHO is None else Ridge(alpha=HEAD_RHO)
        prediction, seconds, _ = _fit_sklearn(
            lambda: make_pipeline(
                Nystroem(gamma=gamma, n_components=j, random_state=SEED), readout
            ),
            data,
        )
    elif method in ("untrained", "di", "di_last"):
        epochs = 0 if method == "untrained" else MAX_EPOCHS
        held_out = HELD_OUT if method == "di" else 0.0
        prediction, seconds, rho = _kernel_regressor(data, j, gamma, epochs, held_out)
        extra = {"lr": LR, "rho": rho} if epochs else {}
    elif method == "di_regressor":
        from kernel_layers.sklearn import DIRegressor

        prediction, seconds, model = _fit_sklearn(lambda: DIRegressor(random_state=SEED), data)
        j = int(model.n_components_)
    else:
        raise ValueError(f"unknown method {method!r}")
    residual = y_test - prediction
    r2 = 1.0 - float((residual**2).sum() / ((y_test - y_test.mean()) ** 2).sum())
    rmse = float(np.sqrt((residual**2).mean()))
    return {
        "dataset": name,
        "method": (LABELS[method].replace("`RidgeCV`", "`Ridge`") if fixed else LABELS[method])
        + (", learned bandwidths (ARD)" if ARD and trained else "")
        + (f", Adam lr {LR:g}" if trained and LR != LR_DEFAULT else "")
        + (f", read-out penalty {HEAD_RHO:g}" if fixed else ""),
        "rows": len(x_train) + len(y_test),
        "J": None if method == "linear_ridge" else j,  # no kernel map
        "r2": r2,
        "rmse": rmse,
        "fit_s": seconds,
        **extra,
    }


def tables(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The tables ``regression`` (the defaults), ``regression_variants`` and
    ``regression_seeds``."""
    names = [record["name"] for record in records]
    rows = [f"{d}/{m}" for d in DATASETS for m in METHODS if f"{d}/{m}" in names]
    means = [mean_name(f"{d}/{m}") for d in DATASETS for m in METHODS]
    tags = (SEED_TAG, MEAN_TAG, _seed_tag("@"), _mean_tag("@"))  # of plain runs and variants
    seeded = [n for n in names if any(tag in n for tag in tags)]
    variants = sorted(
        (n for n in names if "@" in n and n not in seeded),
        key=lambda n: (DATASETS.index(n.split("/")[0]), n.split("@")[1], _method_index(n)),
    )
    variant_means = [
        mean_name(n) for n in variants if mean_name(n) in names
    ]  # in the variants' order
    columns = [
        ["data set", "{dataset}"],
        ["method", "{method}"],
        ["J", "{J}"],
        ["test R²", "{r2:.4f}"],
        ["test RMSE", "{rmse:.4g}"],
        ["fit", "{fit_s:.2f} s"],
    ]
    return {
        "regression": {"rows": rows, "columns": columns},
        "regression_variants": {
            "rows": variants,
            "columns": [*columns[:3], ["DI lr", "{lr:g}"], ["DI rho", "{rho:g}"], *columns[3:]],
        },
        "regression_goals": {"kind": "regression_goals"},
        "regression_seeds": {
            "rows": [n for n in means if n in names] + variant_means,
            "columns": [
                *columns[:3],
                ["seeds", "{seeds}"],
                ["mean test R²", "{r2:.4f}"],
                ["least", "{r2_min:.4f}"],
                ["largest", "{r2_max:.4f}"],
            ],
        },
    }


def _method_index(name: str) -> int:
    """The place of a record's method in :data:`METHODS` (``DATA/METHOD@...``)."""
    return METHODS.index(name.split("/")[1].split("@")[0])


def _joined(tag: str, key: str) -> str:
    """``tag`` (``@...``) as it follows ``key``: itself after ``DATA/METHOD``, with ``,``
    for ``@`` after a variant's ``DATA/METHOD@VARIANT``."""
    return "," + tag.removeprefix("@") if "@" in key else tag


def _seed_tag(key: str) -> str:
    """What joins ``key`` and a seed (``@seed`` or ``,seed``)."""
    return _joined(SEED_TAG, key)


def _mean_tag(key: str) -> str:
    """What joins ``key`` and the tag of its mean over seeds."""
    return _joined(MEAN_TAG, key)


def mean_name(key: str) -> str:
    """The name of the record of the mean over seeds of the run ``key``."""
    return key + _mean_tag(key)


def _seed_runs(stored: list[dict[str, Any]], key: str) -> dict[int, dict[str, Any]]:
    """The stored runs of ``key`` (``DATA/METHOD`` or ``DATA/METHOD@VARIANT``) by seed:
    ``key`` itself is seed 0, ``key@seedK`` (``key,seedK``) seed ``K``."""
    tag = key + _seed_tag(key)
    return {
        0 if r["name"] == key else int(r["name"].removeprefix(tag)): r["figures"]
        for r in stored
        if r["name"] == key or r["name"].startswith(tag)
    }


def seed_mean(stored: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The figures of the mean over seeds of the run ``key`` (``DATA/METHOD``, or a
    variant's ``DATA/METHOD@VARIANT``): the seed-0 record ``key`` and every seed run of it
    (:func:`_seed_runs`); ``None`` unless seed 0 and another are stored."""
    runs = _seed_runs(stored, key)
    if len(runs) < 2 or 0 not in runs:
        return None
    r2 = [float(f["r2"]) for f in runs.values()]
    first = runs[0]
    return {
        "dataset": first["dataset"],
        "method": first["method"],
        "J": first["J"],
        "seeds": len(runs),
        "r2": sum(r2) / len(r2),
        "r2_min": min(r2),
        "r2_max": max(r2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--force", action="store_true", help="re-measure existing records")
    parser.add_argument("--output", type=Path, default=RECORDS)
    parser.add_argument("--components", type=int, help="J (default: min(200, rows // 3))")
    parser.add_argument("--lr", type=float, default=LR, help="Adam's learning rate of DI")
    parser.add_argument(
        "--rho", type=float, default=RHO, help="DI's ridge parameter (default: chosen)"
    )
    parser.add_argument("--ard", action="store_true", help="learn one bandwidth per feature (ARD)")
    parser.add_argument(
        "--head-rho",
        type=float,
        help="fix every read-out's penalty at this value (default: each chooses its own)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random draws")
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"argument --seed: expected an integer >= 0, got {args.seed}")
    if args.head_rho is not None and not args.head_rho > 0:
        parser.error(f"argument --head-rho: expected a number > 0, got {args.head_rho}")
    globals().update(LR=args.lr, RHO=args.rho, ARD=args.ard, SEED=args.seed, HEAD_RHO=args.head_rho)
    changed = [f"J{args.components}"] if args.components else []
    changed += [f"lr{args.lr:g}"] if args.lr != LR_DEFAULT else []
    changed += [f"rho{args.rho:g}"] if args.rho != RHO_DEFAULT else []
    changed += ["ard"] if args.ard else []
    changed += [f"head{args.head_rho:g}"] if args.head_rho is not None else []
    variant = "@" + ",".join(changed) if changed else ""
    suffix = variant + (_seed_tag(variant) + str(args.seed) if args.seed else "")
    if args.head_rho is not None:
        args.methods = [m for m in args.methods if m in HEAD_RHO_METHODS]
        if not args.methods:
            parser.error(
                "argument --head-rho: none of the methods given has a read-out penalty to "
                f"fix; expected one of {', '.join(HEAD_RHO_METHODS)}"
            )
    for name in args.datasets:
        data = split(name)
        for method in args.methods:
            key = f"{name}/{method}{suffix}"
            done = {r["name"] for r in records.load_records(args.output)}
            if not args.force and key in done:
                continue
            figures = measure(name, method, data, args.components)
            print(key, {k: figures[k] for k in ("J", "r2", "rmse", "fit_s")}, flush=True)
            new = records.record(key, figures, "regression.py", argv)
            stored = records.store(args.output, new, DESCRIPTION, tables)
            if args.seed:
                store_seed_mean(args.output, stored, f"{name}/{method}{variant}")


def store_seed_mean(path: Path, stored: list[dict[str, Any]], key: str) -> None:
    """Rewrite the record :func:`mean_name` of ``key`` from the seed runs of ``key`` in
    ``stored``."""
    figures = seed_mean(stored, key)
    if figures is None:
        return
    others = sorted(_seed_runs(stored, key))[1:]
    mean = records.record(mean_name(key), figures, "regression.py", None)
    tag = _seed_tag(key)
    mean["command"] = f"the mean of the records {key} and {key}{tag}K, K in {others}"
    records.store(path, mean, DESCRIPTION, tables)


if __name__ == "__main__":
    main()
