"""The commands of ``kernel-layers`` besides LightningCLI's: ``select-gamma``, ``plot`` and
``export`` (:mod:`kernel_layers.cli.entry` dispatches to them)."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import torch

from kernel_layers._files import cannot_write
from kernel_layers.cli.app import KernelLayersCLI, check_j_set_once, resolve_config_args
from kernel_layers.cli.output import configure_output
from kernel_layers.data.base import ArrayDataModule
from kernel_layers.training.module import KernelClassifier

__all__ = ["export_command", "plot_command", "select_gamma_command"]


def _is_positive_int(text: str) -> bool:
    return text.strip().isdecimal() and int(text) >= 1


def _positive_int(text: str) -> int:
    """An integer ``>= 1`` (argparse names the option when it is not)."""
    if not _is_positive_int(text):
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(text)


def _image_shape(text: str) -> tuple[int, int]:
    """``H,W`` as two integers ``>= 1`` (argparse names the option when it is not)."""
    fields = text.split(",")
    if len(fields) != 2 or not all(_is_positive_int(field) for field in fields):
        raise argparse.ArgumentTypeError(f"must be H,W (two integers >= 1), got {text!r}")
    return int(fields[0]), int(fields[1])


# ------------------------------------------------------------------------ select-gamma
def select_gamma_command(argv: list[str]) -> int:
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
    parser.add_argument("--landmarks", type=_positive_int, default=1000)
    parser.add_argument("--max-samples", type=_positive_int, default=10000)
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
    try:
        dm = cls(**kwargs)
        result = select_gamma(
            dm.train_features().flatten(1),
            dm.train_targets(),
            num_landmarks=args.landmarks,
            max_samples=args.max_samples,
            classifier=args.classifier,
        )
    except ValueError as err:  # the data, or a setting the data does not allow
        parser.error(str(err))
    for gamma, score in zip(result.gammas, result.scores, strict=True):
        print(f"gamma={gamma:.6g}  cv_accuracy={score:.4f}")
    print(f"best gamma: {result.best_gamma:.6g}")
    print(f"use it with: --model.kernel_layer.init_args.gamma={result.best_gamma:.6g}")
    return 0


def plot_command(argv: list[str]) -> int:
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
    parser.add_argument(
        "--image-shape", type=_image_shape, default=None, help="H,W of image inputs (e.g. 28,28)"
    )
    parser.add_argument("--out", default=None, help="output folder (default: RUN_DIR)")
    args = parser.parse_args(argv)
    out = Path(args.out or args.run_dir)
    try:
        written = [plot_curves(args.run_dir, out)]
        if args.ckpt is not None:
            model = KernelClassifier.load_from_checkpoint(args.ckpt, map_location="cpu")
            written += draw_model(model, out, args.image_shape, None)
    except ValueError as err:  # the run's files, or an --image-shape that does not fit
        parser.error(str(err))
    for path in written:
        print(f"wrote {path}")
    return 0


# ------------------------------------------------------------------------------ export
def export_command(argv: list[str]) -> int:
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
        help="the dtype the exported model computes in (float64: for models without "
        "convolutions; the exporter stores scalar constants such as gamma to float32 "
        "precision, so scores agree with PyTorch to about 1e-7 relative, not 1e-15)",
    )
    args, rest = parser.parse_known_args(argv)
    if not args.export_output.endswith(".onnx"):
        parser.error(f"argument --export_output must end in .onnx, got {args.export_output!r}")
    if Path(args.export_output).is_dir():
        parser.error(f"argument --export_output is a folder, got {args.export_output!r}")
    why = cannot_write(Path(args.export_output).parent)  # before the model is loaded
    if why is not None:
        parser.error(
            f"argument --export_output must be a file in a folder that can be written, got "
            f"{args.export_output!r} ({why})"
        )
    try:
        require_onnx()
    except ImportError as err:
        parser.error(str(err))
    try:
        rest = resolve_config_args(rest)
        check_j_set_once(rest)
    except ValueError as err:
        parser.error(str(err))
    configure_output()  # no Lightning start-up notes
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
    if path is None:
        parser.error(f"argument --ckpt_path: {args.ckpt_path!r} names no checkpoint")
    try:
        cli.check_ckpt_matches(path, args.ckpt_path)
    except FileNotFoundError:
        parser.error(f"argument --ckpt_path: no checkpoint file at {path!r}")
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
    replaced = Path(args.export_output).exists()  # said, so that no file is lost silently
    check = export_onnx(predictor, args.export_output, raw.float().reshape(scaled.shape))
    print(
        f"wrote {args.export_output}"
        + (" (it replaced the file that was there)" if replaced else "")
        + f": input x [batch, {', '.join(map(str, scaled.shape[1:]))}] "
        f"raw features; outputs classes [batch], scores [batch, {model.hparams['num_classes']}] "
        f"({args.export_dtype})"
        f"; onnxruntime on {len(raw)} test rows: classes agree {check.classes_agree:.1%}, "
        f"max |onnx - torch| {check.max_abs_gap:.1e}"
    )
    return 0
