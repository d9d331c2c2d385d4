"""``kernel-layers``: the LightningCLI over :class:`KernelClassifier` and the data modules.

Usage::

    kernel-layers fit --config recipes/quickstart.yaml      # trains, then tests
    kernel-layers test --config recipes/quickstart.yaml --ckpt_path last   # recipes keep
                                                      # checkpoints in checkpoints/<name>/
    kernel-layers select-gamma --data digits               # the paper's gamma search

``fit`` ends with a test run on the data module's test split (``--test_after_fit false``
turns it off). ``num_classes`` is taken from the data module.
"""

from __future__ import annotations

import argparse
import inspect
import sys

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from kernel_layers.data import ArrayDataModule
from kernel_layers.training.module import KernelClassifier

__all__ = ["KernelLayersCLI", "main"]


class KernelLayersCLI(LightningCLI):
    """LightningCLI with ``num_classes`` linked from the data and a test after ``fit``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments(
            "data",
            "model.num_classes",
            compute_fn=lambda dm: dm.num_classes,
            apply_on="instantiate",
        )
        parser.add_argument(
            "--test_after_fit", type=bool, default=True, help="run `test` when `fit` ends"
        )

    def after_fit(self) -> None:
        """Report test accuracy of the fitted model (the quick start's last line)."""
        if self.config.get(self.subcommand, {}).get("test_after_fit", True):
            self.trainer.test(self.model, datamodule=self.datamodule)


def _select_gamma(argv: list[str]) -> int:
    """``kernel-layers select-gamma``: grid search of gamma on a data module's training set."""
    from kernel_layers import data as data_modules
    from kernel_layers.gamma import select_gamma

    names = {
        "digits": data_modules.DigitsDataModule,
        "mnist": data_modules.MNISTDataModule,
        "fashion-mnist": data_modules.FashionMNISTDataModule,
        "covtype": data_modules.CovTypeDataModule,
        "letter": data_modules.LetterDataModule,
    }
    parser = argparse.ArgumentParser(prog="kernel-layers select-gamma")
    parser.add_argument("--data", choices=sorted(names), default="digits")
    parser.add_argument("--root", default=None, help="root / data_home of the data module")
    parser.add_argument("--landmarks", type=int, default=1000)
    parser.add_argument("--max-samples", type=int, default=10000)
    parser.add_argument("--classifier", choices=["linear_svc", "ridge"], default="linear_svc")
    args = parser.parse_args(argv)
    cls = names[args.data]
    kwargs = {}
    if args.root is not None:
        params = inspect.signature(cls).parameters
        key = next((k for k in ("root", "data_home") if k in params), None)
        if key is None:
            parser.error(f"--root does not apply to --data {args.data} (it needs no files)")
        kwargs[key] = args.root
    dm = cls(**kwargs)
    result = select_gamma(
        dm.train_features().flatten(1),
        dm.train_targets(),
        num_landmarks=args.landmarks,
        max_samples=args.max_samples,
        classifier=args.classifier,
    )
    for gamma, score in zip(result.gammas, result.scores, strict=True):
        print(f"gamma={gamma:.6g}  cv_accuracy={score:.4f}")
    print(f"best gamma: {result.best_gamma:.6g}")
    return 0


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``kernel-layers`` console script."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["select-gamma"]:
        raise SystemExit(_select_gamma(argv[1:]))
    KernelLayersCLI(
        KernelClassifier,
        ArrayDataModule,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=argv,
    )


if __name__ == "__main__":
    main()
