"""The regression benchmark's goal, computed from its records (``regression.py``).

The goal: the DI-trained map's test R² above both the untrained map's (``untrained``)
and ``Nystroem`` + ``RidgeCV``'s (``nystroem_ridge``) at the same ``J`` on every data
set. It is checked for each DI-trained method (the last epoch ``di_last``; the best
epoch on held-out rows ``di``) on the seed-0 records ``<data set>/<method>`` and on the
means over seeds ``<data set>/<method>@mean of seeds``; each record's figures hold
``r2``.
"""

from __future__ import annotations

from typing import Any

from suite_goals import datasets  # the data sets of records named DATA/METHOD

__all__ = ["BASELINES", "MEAN_TAG", "TRAINED", "goal_rows", "goals_table"]

Record = dict[str, Any]

#: The name's tag of a mean over seeds (``<data set>/<method>@mean of seeds``).
MEAN_TAG = "@mean of seeds"
#: The DI-trained methods and their columns' names.
TRAINED = {"di_last": "DI, last epoch", "di": "DI, best on held-out rows"}
#: The baselines a DI-trained R² must be above, and their columns' names.
BASELINES = {"untrained": "untrained map", "nystroem_ridge": "`Nystroem` + `RidgeCV`"}


def goal_rows(records: list[Record]) -> list[dict[str, Any]]:
    """One row per data set with both baselines: first the seed-0 runs, then the means
    over seeds. A row holds ``dataset``, ``runs`` (``"seed 0"`` or ``"mean of K seeds"``),
    each baseline's and each present DI-trained method's ``r2`` by method, and ``above``:
    ``{DI method: whether its R² is above every baseline's}``."""
    figures = {r["name"]: r["figures"] for r in records}
    rows = []
    for tag in ("", MEAN_TAG):
        for dataset in datasets(records):
            found = {m: figures.get(f"{dataset}/{m}{tag}") for m in (*BASELINES, *TRAINED)}
            if any(found[m] is None for m in BASELINES):
                continue
            r2 = {m: float(f["r2"]) for m, f in found.items() if f is not None}
            best_baseline = max(r2[m] for m in BASELINES)
            seeds = found["untrained"].get("seeds") if tag else None  # type: ignore[union-attr]
            rows.append(
                {
                    "dataset": dataset,
                    "runs": f"mean of {seeds} seeds" if tag else "seed 0",
                    "r2": r2,
                    "above": {m: r2[m] > best_baseline for m in TRAINED if m in r2},
                }
            )
    return rows


def goals_table(records: list[Record]) -> str:
    """The goal as a markdown table: a row per data set and runs, each baseline's R², and
    each DI-trained method's R² marked above both baselines or not."""
    header = ["data set", "runs", *BASELINES.values(), *TRAINED.values()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in goal_rows(records):
        cells = [row["dataset"], row["runs"]]
        cells += [f"{row['r2'][m]:.4f}" for m in BASELINES]
        for method in TRAINED:
            if method not in row["r2"]:
                cells.append("-")
                continue
            verdict = "above both" if row["above"][method] else "not above both"
            cells.append(f"{row['r2'][method]:.4f} ({verdict})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
