"""Reproduce Section 5 of the DI paper: seven kernel maps, read out linearly, over ``J``.

Methods (``--methods``; ``ls`` and ``ce`` expand to both maps, ``incumbent`` is
scikit-learn's ``Nystroem`` + ``LinearSVC``, timed like the rest):

========================  ==========  ========================================
name                      map         what is trained
========================  ==========  ========================================
``standard-nystrom``      nystrom     nothing (random training rows as landmarks)
``kmeans-nystrom``        nystrom     nothing (k-means centres as landmarks)
``standard-fourier``      fourier     nothing (random Fourier features)
``di-nystrom``            nystrom     landmarks, by NysDI (eq. 10)
``di-fourier``            fourier     frequencies and phases, by DI (RFDI)
``ls-nystrom/-fourier``   both        the map and a ridge read-out, jointly (LS)
``ce-nystrom/-fourier``   both        the map and a softmax read-out, jointly (CE)
``sklearn-nystroem``      nystrom     scikit-learn ``Nystroem`` + ``LinearSVC``
========================  ==========  ========================================

Resumable: ``--append`` skips the ``(method, J, repeat)`` rows already in the CSV, so a
grid cut short continues with the same command. ``--replace`` (with ``--append``) runs the
grid's rows again, each new row taking the place of its old one as it finishes (a run
cut short keeps the old rows it had not reached).

Protocol (the DI paper's; benchmarks/README.md): features min-max scaled on train;
Gaussian kernel with ``gamma = kernel_layers.selection.gamma.gamma_heuristic(train)``
unless ``--gamma``; ``rho = 1e-4``; Adam at ``--lr`` (1e-3), multiplied by 0.1 by
:class:`kernel_layers.callbacks.PlateauDecay` when the epoch objective saturates
(``train/di_epoch`` for DI, ``train/loss_epoch`` for LS / CE) and stopped by
:class:`kernel_layers.callbacks.DISaturationStopping` when it fails to improve after a
decay, or at ``--max-epochs``; batch ``max(1000, 2J)`` capped at the training-set size;
landmarks start as a random subset of the training rows.

Read-outs, identical for every method, on the final features of the whole training set:

* the closed-form ridge head (:class:`kernel_layers.training.heads.RidgeHead`, one-hot targets):
  train / test accuracy, and train / test ridge MSE
  ``||Y - Phi W - 1 b^T||_F^2 / N`` (kernel ridge regression of the one-hot targets on the
  learned features, the paper's Figure 1 view);
* a linear SVM (scikit-learn ``LinearSVC`` on standardised features, as in the paper),
  fitted on at most ``--svm-max-samples`` stratified training rows (all rows by default).

LS and CE also report the accuracy of their own jointly trained read-out
(``readout_test_acc``).

Outputs under ``--out``: ``<dataset>.csv`` (one row per method, map, J, repeat) and two
figures, ``<dataset>_accuracy.png`` (test accuracy vs J per method, the paper's Figure 2)
and ``<dataset>_mse.png`` (ridge train / test MSE vs J, DI vs LS, its Figure 1), with
error bars = standard deviation over repeats. The script ends by printing two markdown
tables: ridge accuracy ``method x J`` and the long per-``(method, J)`` table of
``benchmarks/README.md`` (``--plot-only`` / ``--merge`` reprint them from CSVs).

Usage::

    python benchmarks/reproduce.py --dataset digits --dims 100 300 1000 --repeats 3
    python benchmarks/reproduce.py --dataset fashion-mnist \\
        --root /tmp/fmnist/x/usr/share/datasets/fashion-mnist --dims 100 300 \\
        --repeats 3 --max-epochs 10 --svm-max-samples 5000
    # parallel runs write their own CSVs (--tag), merged afterwards:
    python benchmarks/reproduce.py --dataset fashion-mnist --tag fashion-mnist \\
        --merge /tmp/a.csv /tmp/b.csv
    python benchmarks/reproduce.py --dataset mnist --root data --gamma 0.01   # network
    python benchmarks/reproduce.py --dataset digits --quick                   # smoke test
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from section5_grid import DATASETS, expand_methods, make_datamodule, run_one
from section5_results import markdown_table, plot, read_csv, results_table, row_key, write_csv

from kernel_layers.selection.gamma import gamma_heuristic

#: ``--quick`` settings (a smoke test, not a result).
QUICK = {"dims": [20], "repeats": 1, "max_epochs": 3, "svm_max_samples": 300}


def quiet_lightning() -> None:
    """Silence Lightning's per-fit banners and tips (the script prints its own rows)."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*(treespec|num_workers|LeafSpec).*")


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--root", default=None, help="data directory (IDX files / sklearn home)")
    p.add_argument("--dims", type=int, nargs="+", default=[100, 300, 1000], help="values of J")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--first-repeat", type=int, default=0, help="seed of the first repeat (to add repeats)"
    )
    p.add_argument("--methods", nargs="+", default=["all"], help="names or all/untrained/di/ls/ce")
    p.add_argument("--gamma", type=float, default=None, help="default: gamma_heuristic(train)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-epochs", type=int, default=500)
    p.add_argument("--decay-patience", type=int, default=5, help="PlateauDecay patience")
    p.add_argument("--svm-max-samples", type=int, default=None, help="LinearSVC fit subsample")
    p.add_argument(
        "--kmeans-max-rows", type=int, default=None, help="k-means on a random subset (cap)"
    )
    p.add_argument(
        "--svm-c",
        type=float,
        nargs="+",
        default=[1.0],
        help="LinearSVC C; several values: chosen by 3-fold CV on the SVM's training rows",
    )
    p.add_argument("--no-svm", action="store_true", help="skip the LinearSVC read-out")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument("--tag", default=None, help="file stem (default: the dataset name)")
    p.add_argument("--append", action="store_true", help="append to an existing CSV")
    p.add_argument(
        "--replace",
        action="store_true",
        help="with --append: run the grid's rows again, replacing those in the CSV",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="CSV",
        help="concatenate CSVs of parallel runs into <out>/<tag>.csv, then plot",
    )
    p.add_argument("--plot-only", action="store_true", help="re-plot the existing CSV")
    p.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    return p


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the protocol; write the CSV and figures; return the rows."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:  # quick settings become defaults; explicit options still win
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    quiet_lightning()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.tag or args.dataset
    csv_path = out / f"{stem}.csv"
    if args.merge:
        rows = [row for path in args.merge for row in read_csv(Path(path))]
        write_csv(csv_path, rows)
    elif args.plot_only:
        rows = read_csv(csv_path)
    if args.plot_only or args.merge:
        plot(rows, out, stem)
        print(markdown_table(rows), results_table(rows), sep="\n\n")
        return rows
    methods = expand_methods(args.methods)
    if args.replace and not args.append:
        parser.error("--replace needs --append (it replaces rows of an existing CSV)")
    # The CSV's rows as they stand, rewritten whole after each new row: with --append a
    # grid cut short continues with the same command (rows already there are not run
    # again); with --replace too they are, each new row taking its old one's place.
    table = read_csv(csv_path) if args.append and csv_path.exists() else []
    done = set() if args.replace else {row_key(r) for r in table}
    write_csv(csv_path, table)  # the header, or an older layout in the current one
    rows: list[dict[str, Any]] = []
    for j in args.dims:
        dm = make_datamodule(args.dataset, j, root=args.root)
        dm.setup("fit")
        x_train, y_train = dm.train_dataset.tensors
        x_test, y_test = dm.test_dataset.tensors
        if j >= len(x_train):
            print(f"# skip J={j}: needs more than {len(x_train)} training rows")
            continue
        gamma = args.gamma if args.gamma is not None else gamma_heuristic(x_train)
        for repeat in range(args.first_repeat, args.first_repeat + args.repeats):
            for method in methods:
                if (method, j, repeat) in done:
                    continue
                row = run_one(method, dm, x_train, y_train, x_test, y_test, j, repeat, args, gamma)
                old = [i for i, r in enumerate(table) if row_key(r) == row_key(row)]
                if old:
                    table[old[0]] = row
                else:
                    table.append(row)
                write_csv(csv_path, table)
                rows.append(row)
                print(
                    f"{args.dataset} J={j} r={repeat} {method:17s} "
                    f"ridge {100 * row['test_acc']:6.2f}% "
                    f"svm {100 * row['svm_test_acc']:6.2f}% "
                    f"mse {row['train_mse']:.3f}/{row['test_mse']:.3f} "
                    f"ep {row['epochs']} ({row['stop_reason']}) {row['seconds']:.1f}s "
                    f"+{row['eval_seconds']:.1f}s",
                    flush=True,
                )
    plot(table, out, stem)
    print(markdown_table(table), results_table(table), sep="\n\n")
    return rows


if __name__ == "__main__":
    main()
