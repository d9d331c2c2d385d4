"""``kernel-layers``: the LightningCLI over :class:`KernelClassifier` and the data modules.

Usage::

    kernel-layers fit --config quickstart                  # a shipped recipe, by name
    kernel-layers fit --config my_recipe.yaml              # or a path
    kernel-layers recipes                                  # list the shipped recipes
    kernel-layers test --config quickstart --ckpt_path last
    kernel-layers predict --config quickstart --ckpt_path last --predict_split test \\
        --predict_output predictions.csv                   # or --predict_input x.npy
    kernel-layers select-gamma --data digits               # the paper's gamma search

``fit`` ends with a test run on the data module's test split (``--test_after_fit false``
turns it off). ``num_classes`` and the data's ``num_features`` (the batch-size rule) are
linked from the model and the data: ``J`` is set once, as the kernel layer's
``out_features``. A ``--ckpt_path`` whose saved hyper-parameters differ from the
configuration is an error naming both values (the configuration is never silently
replaced by the checkpoint's). The configuration of a run is saved as ``config.yaml``
beside its logs (never over an existing file; not saved when the logger is off).
``fit`` / ``validate`` / ``test`` / ``predict`` keep freed host memory for reuse
(:func:`~kernel_layers.cli.allocator.keep_freed_host_memory`; ``KERNEL_LAYERS_HOST_MEMORY=default``
keeps glibc's defaults).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_info

from kernel_layers.cli.allocator import allocator_configured_by_user, keep_freed_host_memory
from kernel_layers.cli.recipe_files import list_recipes, recipe_path
from kernel_layers.data.base import PREDICT_SPLITS, ArrayDataModule
from kernel_layers.training.module import KernelClassifier
from kernel_layers.training.predictions import PredictionWriter

__all__ = [
    "KernelLayersCLI",
    "RunConfigSaver",
    "check_j_set_once",
    "list_recipes",
    "main",
    "recipe_path",
    "resolve_config_args",
]

#: Commands of ``kernel-layers`` besides LightningCLI's, shown in ``--help``.
EXTRA_COMMANDS = """other commands:
  kernel-layers recipes             list the shipped recipes (use one as --config NAME)
  kernel-layers plot RUN_DIR        draw a run's curves (and landmarks / bandwidths)
  kernel-layers export --config NAME --ckpt_path CKPT [--export_output model.onnx]
                                    the trained model, with the data's scaling, as ONNX
  kernel-layers select-gamma ...    the paper's gamma search (3-fold CV, Nystrom + linear SVM)

--ckpt_path: a checkpoint whose saved hyper-parameters differ from the configuration is an
error naming both values; the configuration is never silently replaced."""


def resolve_config_args(argv: Sequence[str]) -> list[str]:
    """``argv`` with every ``--config NAME`` that is not a file replaced by the recipe's path.

    Raises:
        ValueError: ``NAME`` is neither a file nor a shipped recipe.
    """
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--config" and i + 1 < len(out):
            if not Path(out[i + 1]).exists() and not out[i + 1].lstrip().startswith("{"):
                out[i + 1] = str(recipe_path(out[i + 1]))
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
            if not Path(value).exists() and not value.lstrip().startswith("{"):
                out[i] = f"--config={recipe_path(value)}"
    return out


def check_j_set_once(argv: Sequence[str]) -> None:
    """Refuse the data's ``num_features`` on the command line or in a config file.

    ``J`` is the kernel layer's ``out_features``; the data module's ``num_features`` is
    linked from it (a value given there would be replaced without a word).

    Raises:
        ValueError: naming where the second value was given.
    """
    given: list[str] = []
    for i, arg in enumerate(argv):
        key = arg.split("=", 1)[0]
        if key in ("--data.init_args.num_features", "--data.num_features"):
            given.append(f"{arg if '=' in arg else arg + ' ' + argv[i + 1]}")
        if key == "--config":
            value = arg.split("=", 1)[1] if "=" in arg else argv[i + 1]
            if Path(value).is_file():
                config = yaml.safe_load(Path(value).read_text()) or {}
                data = config.get("data") if isinstance(config, Mapping) else None
                args = data.get("init_args", data) if isinstance(data, Mapping) else None
                if isinstance(args, Mapping) and "num_features" in args:
                    given.append(f"data.init_args.num_features: {args['num_features']} in {value}")
    if given:
        raise ValueError(
            "kernel-layers: J is set once, as --model.kernel_layer.init_args.out_features "
            "(the data's num_features is linked from it); remove " + "; ".join(given)
        )


# ----------------------------------------------------------------------- config saving
class RunConfigSaver(SaveConfigCallback):
    """Save the run's configuration beside its logs, never over an existing file.

    With a logger, the configuration goes to ``<log_dir>/config.yaml`` (``config-1.yaml``,
    ``config-2.yaml``, ... if that exists). Without a logger there is no run directory:
    nothing is written (a file the user keeps in the working directory is never touched).
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.logger is None:
            rank_zero_info(
                "kernel-layers: no logger, so the run's configuration is not saved "
                "(enable --trainer.logger to keep it beside the logs)"
            )
            self.already_saved = True
            return
        log_dir = Path(trainer.log_dir or ".")
        if trainer.is_global_zero:
            log_dir.mkdir(parents=True, exist_ok=True)
            stem = Path(self.config_filename).stem
            path, n = log_dir / self.config_filename, 0
            while path.exists():
                n += 1
                path = log_dir / f"{stem}-{n}.yaml"
            with warnings.catch_warnings():  # skip_none: deprecated in newer jsonargparse,
                warnings.simplefilter("ignore")  # kept for the older ones we support
                self.parser.save(
                    self.config,
                    str(path),
                    skip_none=False,
                    overwrite=False,
                    multifile=self.multifile,
                )
            rank_zero_info(f"kernel-layers: configuration saved to {path}")
        self.already_saved = bool(trainer.strategy.broadcast(True))


# --------------------------------------------------------------------- ckpt_path check
def _differences(saved: object, configured: object, prefix: str) -> list[str]:
    """``key: checkpoint X, configuration Y`` for every leaf present in both that differs."""
    if isinstance(saved, Mapping) and isinstance(configured, Mapping):
        found: list[str] = []
        for key in saved:
            if key in configured and not str(key).startswith("_"):
                found += _differences(saved[key], configured[key], f"{prefix}.{key}")
        return found
    if isinstance(saved, Sequence) and isinstance(configured, Sequence):
        if not isinstance(saved, str) and not isinstance(configured, str):
            if len(saved) == len(configured):
                return [
                    d
                    for i, (a, b) in enumerate(zip(saved, configured, strict=True))
                    for d in _differences(a, b, f"{prefix}[{i}]")
                ]
    if saved != configured:
        return [f"{prefix}: checkpoint {saved!r}, configuration {configured!r}"]
    return []


def _plain(value: object) -> object:
    """Namespaces and dicts as plain nested dicts (jsonargparse's Namespace has as_dict)."""
    as_dict = getattr(value, "as_dict", None)
    if callable(as_dict):
        value = as_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class KernelLayersCLI(LightningCLI):
    """LightningCLI with linked sizes, a test after ``fit``, checked ``--ckpt_path`` and
    predictions written to a file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("save_config_callback", RunConfigSaver)
        kwargs.setdefault(
            "parser_kwargs",
            {"epilog": EXTRA_COMMANDS, "formatter_class": argparse.RawDescriptionHelpFormatter},
        )
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments(
            "data",
            "model.num_classes",
            compute_fn=lambda dm: dm.num_classes,
            apply_on="instantiate",
        )
        # J is set once, as the kernel layer's out_features; the data's batch-size rule
        # max(1000, 2 J) follows it.
        parser.link_arguments(
            "model.kernel_layer.init_args.out_features",
            "data.init_args.num_features",
            apply_on="parse",
        )
        parser.add_argument(
            "--test_after_fit", type=bool, default=True, help="run `test` when `fit` ends"
        )
        parser.add_argument(
            "--predict_output",
            type=str,
            default="predictions.csv",
            help="predict: file to write (.csv: index, prediction, scores; .pt: tensors)",
        )
        parser.add_argument(
            "--predict_split",
            type=str,
            default="test",
            help=f"predict: the data module's split to predict, one of {list(PREDICT_SPLITS)}",
        )
        parser.add_argument(
            "--predict_input",
            type=str,
            default=None,
            help="predict: a file of raw features (.npy / .csv) or a folder of images "
            "instead of a split (scaled like the training data)",
        )
        parser.add_argument(
            "--predict_scores",
            type=bool,
            default=True,
            help="predict: also write the per-class scores",
        )

    # Lightning's own handling replaces the configured hyper-parameters by the
    # checkpoint's without a word; here the two are compared instead (before_* hooks).
    def _parse_ckpt_path(self) -> None:
        return

    def resolve_ckpt_path(self, ckpt_path: str) -> Path:
        """``ckpt_path`` as a file: ``"last"`` is the checkpoint callback's ``last.ckpt``."""
        callback = self.trainer.checkpoint_callback
        if ckpt_path == "last" and isinstance(callback, ModelCheckpoint) and callback.dirpath:
            return Path(callback.dirpath) / "last.ckpt"
        return Path(ckpt_path)

    def check_ckpt_matches(self, path: Path, ckpt_path: str) -> None:
        """Raise when the checkpoint at ``path`` was saved with other hyper-parameters
        than the configuration sets, naming each difference."""
        saved = torch.load(path, map_location="cpu", weights_only=True).get("hyper_parameters", {})
        wrong = _differences(_plain(saved), _plain(dict(self.model.hparams)), "model")
        if wrong:
            raise ValueError(
                f"kernel-layers: argument '--ckpt_path' {str(ckpt_path)!r} was saved with "
                "other hyper-parameters than the configuration sets: "
                + "; ".join(wrong)
                + " (make the configuration match the checkpoint, or train anew without "
                "--ckpt_path)"
            )

    def _check_ckpt_path(self) -> None:
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path:
            return
        path = self.resolve_ckpt_path(ckpt_path)
        if path.is_file():  # else Lightning reports the missing checkpoint itself
            self.check_ckpt_matches(path, ckpt_path)

    def before_fit(self) -> None:
        self._check_ckpt_path()

    def before_validate(self) -> None:
        self._check_ckpt_path()

    def before_test(self) -> None:
        self._check_ckpt_path()

    def before_predict(self) -> None:
        self._check_ckpt_path()
        options = self.config["predict"]
        dm = self.datamodule
        if not isinstance(dm, ArrayDataModule):
            raise TypeError(
                "kernel-layers predict: the data module must be a kernel_layers.data "
                f"ArrayDataModule, got {type(dm).__name__}"
            )
        dm.set_predict_source(split=options["predict_split"], path=options["predict_input"])
        if isinstance(self.model, KernelClassifier):
            self.model.hparams["return_scores"] = True
        writer = PredictionWriter(options["predict_output"], scores=options["predict_scores"])
        self.trainer.callbacks.append(writer)  # type: ignore[attr-defined]  # a list property
        # that Lightning's Trainer stub does not declare

    def after_fit(self) -> None:
        """Report test accuracy of the fitted model (the quick start's last line)."""
        if self.config.get(self.subcommand, {}).get("test_after_fit", True):
            self.trainer.test(self.model, datamodule=self.datamodule)


# ------------------------------------------------------------------------ select-gamma
def _select_gamma(argv: list[str]) -> int:
    """``kernel-layers select-gamma``: grid search of gamma on a data module's training set."""
    from kernel_layers import data as data_modules
    from kernel_layers.selection.gamma import select_gamma

    names = {
        "digits": data_modules.DigitsDataModule,
        "mnist": data_modules.MNISTDataModule,
        "fashion-mnist": data_modules.FashionMNISTDataModule,
        "covtype": data_modules.CovTypeDataModule,
        "letter": data_modules.LetterDataModule,
    }
    parser = argparse.ArgumentParser(
        prog="kernel-layers select-gamma",
        description="The DI paper's gamma search: 3-fold cross-validated accuracy of a linear "
        "classifier on standard Nystrom features, over a grid of gammas.",
    )
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
    print(f"use it with: --model.kernel_layer.init_args.gamma={result.best_gamma:.6g}")
    return 0


def _plot_command(argv: list[str]) -> int:
    """``kernel-layers plot RUN_DIR [--ckpt PATH]``: the run's pictures as PNG files."""
    from kernel_layers.training.plots import draw_model, plot_curves

    parser = argparse.ArgumentParser(
        prog="kernel-layers plot",
        description="Draw a run's epoch DI, learning rate and validation accuracy "
        "(curves.png), and with --ckpt its landmarks as images (landmarks.png) or its "
        "learned bandwidths (bandwidths.png).",
    )
    parser.add_argument("run_dir", help="a CSVLogger version folder holding metrics.csv")
    parser.add_argument("--ckpt", default=None, help="a checkpoint of the run")
    parser.add_argument("--image-shape", default=None, help="H,W of image inputs (e.g. 28,28)")
    parser.add_argument("--out", default=None, help="output folder (default: RUN_DIR)")
    args = parser.parse_args(argv)
    out = Path(args.out or args.run_dir)
    try:
        written = [plot_curves(args.run_dir, out)]
    except ValueError as err:
        parser.error(str(err))
    if args.ckpt is not None:
        model = KernelClassifier.load_from_checkpoint(args.ckpt, map_location="cpu")
        shape = None
        if args.image_shape:
            shape = tuple(int(v) for v in args.image_shape.split(","))
        written += draw_model(model, out, shape, None)
    for path in written:
        print(f"wrote {path}")
    return 0


# ------------------------------------------------------------------------------ export
def _export_command(argv: list[str]) -> int:
    """``kernel-layers export --config NAME [...] --ckpt_path CKPT``: the checkpoint's model,
    with the data's scaling, as one ONNX file taking raw rows (:func:`export_onnx`)."""
    from kernel_layers.training.export import export_onnx, require_onnx

    parser = argparse.ArgumentParser(
        prog="kernel-layers export",
        description="Write a trained model as ONNX: raw rows in the units of the data files "
        "(the data's min-max scaling included) to classes and per-class scores. The other "
        "arguments are those of `kernel-layers fit` (--config and overrides), which name "
        "the data; the configuration must match the checkpoint's hyper-parameters.",
    )
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint file, or 'last'")
    parser.add_argument("--export_output", default="model.onnx", help="the .onnx file to write")
    parser.add_argument(
        "--export_dtype",
        choices=("float32", "float64"),
        default="float32",
        help="the dtype the exported model computes in (float64: no float32 round-off, "
        "for models without convolutions)",
    )
    args, rest = parser.parse_known_args(argv)
    if not args.export_output.endswith(".onnx"):
        parser.error(f"argument --export_output must end in .onnx, got {args.export_output!r}")
    try:
        require_onnx()
    except ImportError as err:
        parser.error(str(err))
    try:
        rest = resolve_config_args(rest)
        check_j_set_once(rest)
    except ValueError as err:
        parser.error(str(err))
    program, sys.argv = sys.argv, [sys.argv[0], *rest]  # LightningCLI reads the command line
    try:
        cli = KernelLayersCLI(
            KernelClassifier,
            ArrayDataModule,
            subclass_mode_data=True,
            run=False,
            save_config_callback=None,
        )
    finally:
        sys.argv = program
    path = cli.resolve_ckpt_path(args.ckpt_path)
    if not path.is_file():
        parser.error(f"argument --ckpt_path: no checkpoint file at {str(path)!r}")
    cli.check_ckpt_matches(path, args.ckpt_path)
    model = KernelClassifier.load_from_checkpoint(path, map_location="cpu")
    datamodule = cli.datamodule
    if not isinstance(datamodule, ArrayDataModule):  # guaranteed by the CLI's data class
        parser.error(f"the data module must be an ArrayDataModule, got {type(datamodule)}")
    predictor = model.predictor(datamodule, dtype=getattr(torch, args.export_dtype))
    assert predictor.scaling is not None  # a data module was given
    scaled = datamodule.test_dataset.tensors[0][:64]  # type: ignore[union-attr]
    # raw rows that scale to the first test rows (constant columns: their training value)
    raw = scaled.reshape(len(scaled), -1).double() * predictor.scaling.divisor
    raw = raw + predictor.scaling.shift
    check = export_onnx(predictor, args.export_output, raw.float().reshape(scaled.shape))
    print(
        f"wrote {args.export_output}: input x [batch, {', '.join(map(str, scaled.shape[1:]))}] "
        f"raw features; outputs classes [batch], scores [batch, {model.hparams['num_classes']}] "
        f"({args.export_dtype})"
        f"; onnxruntime on {len(raw)} test rows: classes agree {check.classes_agree:.1%}, "
        f"max |onnx - torch| {check.max_abs_gap:.1e}"
    )
    return 0


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``kernel-layers`` console script.

    Args:
        args: the command line without the program name (default: ``sys.argv[1:]``).
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["select-gamma"]:
        raise SystemExit(_select_gamma(argv[1:]))
    if argv[:1] == ["plot"]:
        raise SystemExit(_plot_command(argv[1:]))
    if argv[:1] == ["export"]:
        raise SystemExit(_export_command(argv[1:]))
    try:
        argv = resolve_config_args(argv)
        check_j_set_once(argv)
    except ValueError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    if not allocator_configured_by_user():  # reuse the steps' buffers (allocator.py)
        keep_freed_host_memory()
    if args is None:  # the console script: LightningCLI reads sys.argv itself (given
        sys.argv[1:] = argv  # both a list and a command line, it warns)
    KernelLayersCLI(
        KernelClassifier,
        ArrayDataModule,
        subclass_mode_data=True,
        args=None if args is None else argv,
    )


if __name__ == "__main__":
    main()
