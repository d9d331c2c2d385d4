"""The paper's read-out on a trained checkpoint: a linear SVM (``C`` by 3-fold CV) and the
ridge head on the learned features.

``kernel-layers test`` reports the model's own read-out (the ridge head, or the softmax /
least-squares head trained with CE / LS). The DI paper reads the learned features out
with a linear SVM whose ``C`` is chosen by cross-validation; this script does that for a
checkpoint of any recipe, on the recipe's own splits (the data module the recipe builds,
with the extra CLI arguments given after ``--``):

* the features ``model(x)`` (backbone, if any, then the kernel layer; eval mode) of the
  training split (validation rows excluded, as in the fit) and the test split;
* ``LinearSVC`` on standardised features, ``C`` chosen among ``--svm-c`` by stratified
  3-fold cross-validation on at most ``--svm-max-samples`` stratified training rows, then
  fit on those rows;
* the closed-form ridge head (the model's ``head_rho``) fit on all training rows.

Usage::

    python benchmarks/svm_readout.py covtype_nystrom_ce CKPT -- \\
        --data.init_args.data_home DIR/covtype
    python benchmarks/svm_readout.py mnist_nystrom_di CKPT --svm-c 0.01 0.1 1 10 \\
        --svm-max-samples 20000 -- --data.init_args.root DIR/mnist

It prints one line per read-out and, with ``--json FILE``, appends the result as one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from typing import Any

import torch
from section5_readouts import EVAL_BATCH, evaluate  # the grid's read-outs (script directory)
from torch import Tensor

from kernel_layers import KernelClassifier
from kernel_layers.cli.app import KernelLayersCLI, resolve_config_args
from kernel_layers.data import ArrayDataModule

__all__ = ["features", "load_matching", "main"]


def features(model: KernelClassifier, x: Tensor) -> Tensor:
    """``model(x)`` in eval mode, without gradients, in chunks.

    Args:
        model: a trained classifier.
        x (Tensor[N, ...]): inputs as the data module serves them.

    Returns:
        Tensor[N, J]: the learned features (float32).
    """
    model.eval()
    with torch.no_grad():
        return torch.cat([model(chunk).float() for chunk in x.split(EVAL_BATCH)])


def load_matching(ckpt: str, configured: KernelClassifier) -> KernelClassifier:
    """The checkpoint's model, checked against the recipe's (same layer type and width).

    Raises:
        ValueError: the checkpoint's kernel layer differs from the recipe's in type or
            number of features (the message names both).
    """
    model = KernelClassifier.load_from_checkpoint(ckpt, map_location="cpu")
    ours = (type(configured.kernel_layer).__name__, configured.kernel_layer.out_features)
    theirs = (type(model.kernel_layer).__name__, model.kernel_layer.out_features)
    if ours != theirs:
        raise ValueError(
            f"svm_readout: argument 'ckpt' must hold the recipe's kernel layer "
            f"{ours[0]}(out_features={ours[1]}), got {theirs[0]}(out_features={theirs[1]}) "
            f"in {ckpt!r}"
        )
    return model


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, read the checkpoint out, print (and append) the result."""
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="recipe name or YAML path (gives the data and splits)")
    parser.add_argument("ckpt", help="a checkpoint of that recipe (e.g. last.ckpt)")
    parser.add_argument(
        "--svm-c",
        type=float,
        nargs="+",
        default=[0.01, 0.1, 1.0, 10.0],
        help="candidate C values (one value: no cross-validation)",
    )
    parser.add_argument("--svm-max-samples", type=int, default=20000, help="SVM training rows")
    parser.add_argument("--seed", type=int, default=0, help="SVM subsample and solver seed")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--json", default=None, help="append the result as one JSON line")
    args = parser.parse_args(argv[:cut])
    extra = argv[cut + 1 :]
    ckpt = os.path.abspath(args.ckpt)
    if not os.path.isfile(ckpt):
        parser.error(f"argument 'ckpt' must be an existing checkpoint file, got {args.ckpt!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    json_path = os.path.abspath(args.json) if args.json else None
    here = os.getcwd()
    os.chdir(tempfile.mkdtemp(prefix="svm_readout_"))  # the trainer's logs go there
    try:
        cli = KernelLayersCLI(
            KernelClassifier,
            ArrayDataModule,
            subclass_mode_data=True,
            run=False,
            args=resolve_config_args(["--config", args.recipe, *extra]),
        )
    finally:
        os.chdir(here)
    assert isinstance(cli.model, KernelClassifier) and isinstance(cli.datamodule, ArrayDataModule)
    model, dm = load_matching(ckpt, cli.model), cli.datamodule
    dm.setup("fit")
    dm.setup("test")
    x_train, y_train = dm.train_dataset.tensors
    x_test, y_test = dm.test_dataset.tensors
    start = time.perf_counter()
    f_train, f_test = features(model, x_train), features(model, x_test)
    res = evaluate(
        f_train,
        y_train,
        f_test,
        y_test,
        dm.num_classes,
        head_rho=float(model.hparams["head_rho"]),
        svm_max_samples=args.svm_max_samples,
        svm_c=args.svm_c,
        seed=args.seed,
    )
    row = {
        "recipe": args.recipe,
        "ckpt": ckpt,
        "extra": extra,
        "train_rows": len(x_train),
        "test_rows": len(x_test),
        "svm_rows": min(args.svm_max_samples, len(x_train)),
        "svm_c_candidates": args.svm_c,
        **vars(res),
        "seconds": time.perf_counter() - start,
    }
    how = f"by 3-fold CV among {args.svm_c}" if len(args.svm_c) > 1 else "given"
    print(
        f"{args.recipe}: LinearSVC (C = {res.svm_c:g} {how}, "
        f"{row['svm_rows']} rows) test {100 * res.svm_test_acc:.2f} %, train "
        f"{100 * res.svm_train_acc:.2f} %; ridge head test {100 * res.test_acc:.2f} %, "
        f"train {100 * res.train_acc:.2f} % ({row['seconds']:.0f} s)"
    )
    if json_path:
        with open(json_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
    return row


if __name__ == "__main__":
    main()
