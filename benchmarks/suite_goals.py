"""The goals of the small-data suite, computed from its records (``suite.py``).

A record is named ``<data set>/<method>`` and its figures hold ``acc`` (test accuracy,
%) and ``fit_s`` (fit seconds); the ``di_trained`` record also holds ``untrained_acc``,
the test accuracy of the same map before training (``UntrainedBaseline``). The goals:

1. ``di_trained`` >= the untrained map on every data set (against the same run's
   ``untrained_acc``, else the ``untrained`` record); and again on the mean over seeds
   where the data set has runs of other seeds too (records ``di_trained@seed<k>``); the
   same two for ``di_trained_last`` (the last epoch) and ``di_trained_keep_best`` (the
   best epoch on validation on every data set); a data set below
   on the mean says by how much and the standard error of that difference over its seeds;
2. ``diclassifier`` >= ``svc`` on at least three quarters of the data sets;
3. ``diclassifier`` at most 1 point below ``svc_cv`` on average (data sets with both);
4. ``diclassifier``'s fit at most 10 x ``svc``'s where ``svc`` takes over 1 s (data sets
   where both trained on the same number of rows, ``train_rows``).
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["SEED_TAG", "datasets", "goals", "goals_table", "matrix", "seed_method"]

Record = dict[str, Any]


def matrix(records: list[Record]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{data set: {method: figures}}`` of records named ``<data set>/<method>``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for record in records:
        dataset, _, method = record["name"].partition("/")
        if method:
            out.setdefault(dataset, {})[method] = record["figures"]
    return out


def datasets(records: list[Record]) -> list[str]:
    """The data sets of the records, in the order they first appear."""
    return list(matrix(records))


#: The DI-trained methods held against their untrained map, and their goals' names.
TRAINED = {
    "di_trained": "DI-trained",
    "di_trained_last": "DI-trained, last epoch,",
    "di_trained_keep_best": "DI-trained, best on validation,",
}


def _untrained(methods: dict[str, dict[str, Any]], method: str) -> float | None:
    trained = methods.get(method, {})
    if trained.get("untrained_acc") is not None:
        return float(trained["untrained_acc"])
    if "untrained" in methods:
        return float(methods["untrained"]["acc"])
    return None


#: Joins a method and a seed other than 0 in a record's name: ``di_trained@seed1``.
SEED_TAG = "@seed"


def seed_method(method: str, seed: int) -> str:
    """The method part of a record's name for a run of ``seed``: ``method`` for seed 0,
    ``method@seed<k>`` for the others (``suite.py --seeds``)."""
    return method if seed == 0 else f"{method}{SEED_TAG}{seed}"


def _seed_runs(methods: dict[str, dict[str, Any]], method: str) -> list[dict[str, Any]]:
    """The figures of the runs of ``method`` of every seed that hold ``untrained_acc``."""
    return [
        figures
        for name, figures in methods.items()
        if name.partition(SEED_TAG)[0] == method and figures.get("untrained_acc") is not None
    ]


def _below(trained: float, untrained: float, rows: int | None) -> bool:
    """Whether the DI-trained accuracy is below the untrained one: in correctly
    classified test rows when ``rows`` is known (a float32 metric and an exact ratio of
    the same count are a tie), else as numbers."""
    if rows:
        return round(trained * rows / 100) < round(untrained * rows / 100)
    return trained < untrained


def _seed_means(runs: list[dict[str, Any]]) -> tuple[float, float, int, float]:
    """Mean DI-trained and untrained accuracy over the runs of :func:`_seed_runs`, their
    number ``k``, and the standard error of the mean of the seeds' differences (trained
    minus untrained, each seed against its own map): their sample standard deviation over
    ``sqrt(k)``."""
    trained = [float(f["acc"]) for f in runs]
    untrained = [float(f["untrained_acc"]) for f in runs]
    k = len(runs)
    error = statistics.stdev(t - u for t, u in zip(trained, untrained, strict=True)) / k**0.5
    return sum(trained) / k, sum(untrained) / k, k, error


def _trained_goals(
    table: dict[str, dict[str, dict[str, Any]]], method: str
) -> list[dict[str, Any]]:
    """Goal 1 for ``method``: at or above the untrained map on every data set, and on
    the mean of its seeds."""
    label = TRAINED[method]
    pairs = [
        (name, m[method]["acc"], _untrained(m, method), m[method].get("test_rows"))
        for name, m in table.items()
        if method in m and _untrained(m, method) is not None
    ]
    below = [f"{n} ({t:.2f} < {u:.2f})" for n, t, u, rows in pairs if _below(t, u, rows)]
    out = [
        {
            "goal": f"{label} >= untrained map on every data set",
            "held": None if not pairs else not below,
            "detail": f"{len(pairs) - len(below)}/{len(pairs)}"
            + (f"; below: {', '.join(below)}" if below else ""),
        }
    ]
    runs = {name: _seed_runs(m, method) for name, m in table.items()}
    seeded = [(name, *_seed_means(r)) for name, r in runs.items() if len(r) > 1]
    rows = {name: runs[name][0].get("test_rows") for name, *_ in seeded}  # any seed's
    below = [
        f"{n} ({t:.2f} < {u:.2f}, {k} seeds; difference {t - u:+.2f}, standard error {e:.2f})"
        for n, t, u, k, e in seeded
        if _below(t * k, u * k, rows[n])  # the seeds' total correct rows
    ]
    out.append(
        {
            "goal": f"{label} >= untrained map on the mean of its seeds",
            "held": None if not seeded else not below,
            "detail": f"{len(seeded) - len(below)}/{len(seeded)}"
            + (f"; below: {', '.join(below)}" if below else ""),
        }
    )
    return out


def goals(records: list[Record]) -> list[dict[str, Any]]:
    """Each goal: ``{"goal", "held" (bool, or None with no data), "detail"}``."""
    table = matrix(records)
    out = _trained_goals(table, "di_trained")
    for method in ("di_trained_last", "di_trained_keep_best"):
        if any(method in m for m in table.values()):
            out += _trained_goals(table, method)

    duels = [
        (n, m["diclassifier"]["acc"], m["svc"]["acc"])
        for n, m in table.items()
        if "diclassifier" in m and "svc" in m
    ]
    wins = sum(di >= svc for _, di, svc in duels)
    out.append(
        {
            "goal": "DIClassifier() >= SVC() on at least 3/4 of the data sets",
            "held": None if not duels else 4 * wins >= 3 * len(duels),
            "detail": f"{wins}/{len(duels)}",
        }
    )

    gaps = [
        m["diclassifier"]["acc"] - m["svc_cv"]["acc"]
        for m in table.values()
        if "diclassifier" in m and "svc_cv" in m
    ]
    mean = sum(gaps) / len(gaps) if gaps else 0.0
    out.append(
        {
            "goal": "DIClassifier() within 1 point of CV-tuned SVC on average",
            "held": None if not gaps else mean >= -1.0,
            "detail": f"mean difference {mean:+.2f} points over {len(gaps)} data sets",
        }
    )

    slow = [
        (n, m["diclassifier"]["fit_s"] / m["svc"]["fit_s"])
        for n, m in table.items()
        if "diclassifier" in m
        and "svc" in m
        and m["svc"]["fit_s"] > 1.0
        and m["svc"].get("train_rows") == m["diclassifier"].get("train_rows")
    ]
    over = [f"{n} ({ratio:.1f}x)" for n, ratio in slow if ratio > 10.0]
    out.append(
        {
            "goal": "DIClassifier() fit <= 10x SVC()'s where SVC() takes over 1 s",
            "held": None if not slow else not over,
            "detail": (
                f"{len(slow) - len(over)}/{len(slow)} data sets"
                + (f"; over: {', '.join(over)}" if over else "")
                + (
                    "; ratios: " + ", ".join(f"{n} {r:.1f}x" for n, r in slow)
                    if slow and not over
                    else ""
                )
            ),
        }
    )
    return out


def goals_table(records: list[Record]) -> str:
    """The goals as a markdown table: goal, held / not held, detail."""
    lines = ["| goal | held | detail |", "|---|---|---|"]
    for goal in goals(records):
        held = {True: "held", False: "not held", None: "no data"}[goal["held"]]
        lines.append(f"| {goal['goal']} | {held} | {goal['detail']} |")
    return "\n".join(lines)
