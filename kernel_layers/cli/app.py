"""The LightningCLI of ``kernel-layers``: :class:`KernelClassifier` and the data modules.

``fit`` ends with a test run on the data module's test split (``--test_after_fit false``
turns it off) and a summary. ``num_classes`` and the data's ``num_features`` (the
batch-size rule) are linked from the model and the data: ``J`` is set once, as the kernel
layer's ``out_features``. A ``--ckpt_path`` whose saved hyper-parameters differ from the
configuration is an error naming both values (the configuration is never silently
replaced by the checkpoint's); so is one whose data settings change the split or the
scaling. The checkpoint is read with ``weights_only=True`` (a file or a URL), and
``--ckpt_path last`` is resolved as Lightning resolves it (the newest ``last*.ckpt``)
before it is checked, so that the file checked is the file loaded. The configuration of
a run is saved as ``config.yaml`` beside its logs (never over an existing file; not
saved when the logger is off).
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.trainer.states import TrainerFn

from kernel_layers.cli.config_saver import RunConfigSaver
from kernel_layers.cli.help_text import help_parser_kwargs
from kernel_layers.cli.output import (
    CLI_LOGGER,
    EpochLine,
    configure_output,
    fit_keep_best,
    fit_summary,
)
from kernel_layers.cli.recipe_files import (
    COMMAND_OPTIONS,
    check_command_options,
    check_j_set_once,
    list_recipes,
    recipe_path,
    resolve_config_args,
)
from kernel_layers.data.base import PREDICT_SPLITS, ArrayDataModule
from kernel_layers.data.network import DatasetNotFoundError
from kernel_layers.training.checkpoint_checks import configuration_differences
from kernel_layers.training.checkpoint_io import check_weights_only, load_checkpoint_file
from kernel_layers.training.module import KernelClassifier
from kernel_layers.training.predictions import PredictionWriter, check_not_an_input

__all__ = [
    "KernelLayersCLI",
    "RunConfigSaver",
    "check_j_set_once",
    "close_process_group",
    "list_recipes",
    "num_classes_of",
    "recipe_path",
    "resolve_config_args",
    "run_lightning_cli",
]

log = logging.getLogger(CLI_LOGGER)

#: The LightningCLI commands that score a trained model: they need ``--ckpt_path``.
SCORES_A_CHECKPOINT = ("test", "validate", "predict")


# --------------------------------------------------------------------- ckpt_path check
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


def num_classes_of(data: Any) -> int:
    """The data module's number of classes (the model's ``num_classes`` is linked to it)."""
    return int(data.num_classes)


class KernelLayersCLI(LightningCLI):
    """LightningCLI with linked sizes, a test after ``fit``, checked ``--ckpt_path`` and
    predictions written to a file."""

    def __init__(self, *args: Any, console: bool = False, **kwargs: Any) -> None:
        # from a console, the checks before a command report usage errors (status 2)
        self.console = console
        kwargs.setdefault("save_config_callback", RunConfigSaver)
        kwargs.setdefault("trainer_defaults", {"enable_model_summary": False})
        kwargs.setdefault("parser_kwargs", help_parser_kwargs())
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments(
            "data",
            "model.num_classes",
            compute_fn=num_classes_of,
            apply_on="instantiate",
        )
        # J is set once, as the kernel layer's out_features; the data's batch-size rule
        # max(1000, 2 J) follows it.
        parser.link_arguments(
            "model.kernel_layer.init_args.out_features",
            "data.init_args.num_features",
            apply_on="parse",
        )
        fit, predict = COMMAND_OPTIONS["fit"], COMMAND_OPTIONS["predict"]
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=fit["test_after_fit"],
            help="fit: run `test` when `fit` ends",
        )
        parser.add_argument(
            "--predict_output",
            type=str,
            default=predict["predict_output"],
            help="predict: file to write (.csv: index, the file of an image folder's row, "
            "prediction, scores; .pt: tensors and the files' names)",
        )
        parser.add_argument(
            "--predict_split",
            type=str,
            default=predict["predict_split"],
            help=f"predict: the data module's split to predict, one of {list(PREDICT_SPLITS)}",
        )
        parser.add_argument(
            "--predict_input",
            type=str,
            default=predict["predict_input"],
            help="predict: a file of raw features (.npy / .csv; a first row with text or "
            "0,1,...,D-1 is a header) or a folder of images (converted to the training "
            "data's pixel range) instead of a split (scaled like the training data)",
        )
        parser.add_argument(
            "--predict_scores",
            type=bool,
            default=predict["predict_scores"],
            help="predict: write the per-class scores beside the classes (default: true; "
            "false writes the classes only)",
        )

    # Lightning's own handling replaces the configured hyper-parameters by the
    # checkpoint's without a word; here the two are compared instead (before_* hooks).
    def _parse_ckpt_path(self) -> None:
        return

    def resolve_ckpt_path(self, ckpt_path: str) -> str | None:
        """``ckpt_path`` as the file Lightning loads: ``"last"`` the newest ``last*.ckpt``
        of the checkpoint callbacks (``last-v1.ckpt`` after a second fit in one folder),
        ``"best"`` / ``"hpc"`` as Lightning resolves them; ``None``: no such checkpoint."""
        if ckpt_path not in ("last", "best", "hpc"):
            return ckpt_path
        fn = TrainerFn.FITTING if self.subcommand == "fit" else TrainerFn.TESTING
        connector = self.trainer._checkpoint_connector  # Lightning's own resolution
        with warnings.catch_warnings():  # "no last checkpoint": reported by the caller
            warnings.simplefilter("ignore")
            resolved = connector._parse_ckpt_path(
                fn, ckpt_path, model_provided=True, model_connected=False
            )
        return None if resolved is None else str(resolved)

    def check_ckpt_matches(self, path: str, ckpt_path: str) -> None:
        """Raise when the checkpoint at ``path`` (read with ``weights_only=True``) was saved
        with other hyper-parameters than the configuration sets, or with data settings
        that change the split or the scaling, naming each difference with both values.
        Layers are compared as classes and normalised settings
        (:func:`~kernel_layers.training.checkpoint_checks.module_differences`)."""
        checkpoint = load_checkpoint_file(path, "cpu")
        saved = _plain(checkpoint.get("hyper_parameters") or {})
        configured = _plain(dict(self.model.hparams))
        assert isinstance(saved, dict) and isinstance(configured, dict)
        saved_data = checkpoint.get("datamodule_hyper_parameters")
        wrong = configuration_differences(saved, configured, saved_data, self.datamodule)
        if wrong:
            raise ValueError(
                f"kernel-layers: argument '--ckpt_path' {str(ckpt_path)!r} was saved with "
                "other hyper-parameters than the configuration sets: "
                + "; ".join(wrong)
                + " (make the configuration match the checkpoint, or train anew without "
                "--ckpt_path)"
            )

    def _check_ckpt_path(self) -> None:
        """Check the checkpoint that will be loaded and hand Lightning exactly that file,
        read with ``weights_only=True``.

        Raises:
            ValueError: ``--weights_only false``; no ``--ckpt_path`` for ``test``,
                ``validate`` or ``predict``; ``"last"`` / ``"best"`` name no checkpoint
                (except for ``fit``, which then starts anew); or as
                :meth:`check_ckpt_matches`.
        """
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        options = self.config_init[subcommand]
        check_weights_only("kernel-layers", options.get("weights_only"))
        if "weights_only" in options:
            options["weights_only"] = True
        ckpt_path = options.get("ckpt_path")
        if not ckpt_path and subcommand in SCORES_A_CHECKPOINT:
            raise ValueError(
                f"kernel-layers {subcommand}: argument '--ckpt_path' is required: without it "
                "the model is the configuration's untrained map (pass --ckpt_path last after "
                "kernel-layers fit, or a checkpoint file)"
            )
        if not ckpt_path:
            return
        path = self.resolve_ckpt_path(str(ckpt_path))
        if path is None:
            if subcommand == "fit":
                return  # Lightning's "last": resume when there is one, else start anew
            raise ValueError(
                f"kernel-layers: argument '--ckpt_path' {ckpt_path!r} names no checkpoint: "
                "the configuration's ModelCheckpoint has written none (fit first, or pass "
                "a checkpoint file)"
            )
        with _named_option("kernel-layers", "--ckpt_path", (FileNotFoundError,)):
            self.check_ckpt_matches(path, str(ckpt_path))
        options["ckpt_path"] = path  # the file checked is the file loaded

    @contextmanager
    def _usage_errors(self) -> Iterator[None]:
        """From a console, an argument the checks before a command refuse ends the
        command with its message on stderr and status 2, as argparse's errors do (a
        traceback there reads as a crash); called from Python, the error propagates."""
        try:
            yield
        except (ValueError, TypeError, FileNotFoundError) as err:
            if not self.console:
                raise
            print(err, file=sys.stderr)
            raise SystemExit(2) from None

    def _check_run(self) -> None:
        """Before ``fit``, ``validate`` and ``test``: the sizes and ``--ckpt_path``."""
        with self._usage_errors():
            self._check_sizes()
            self._check_ckpt_path()

    before_fit = before_validate = before_test = _check_run

    def before_predict(self) -> None:
        with self._usage_errors():
            self._check_sizes()
            self._check_predict()

    def _check_sizes(self) -> None:
        """The data's and the layers' sizes, known before setup (where the model checks
        them again): a mismatch is a usage error here, not a traceback."""
        self.model.check_data_sizes(self.datamodule)

    def _check_predict(self) -> None:
        """``--ckpt_path`` and the data module's predict source (:meth:`before_predict`)."""
        self._check_ckpt_path()
        options = self.config["predict"]
        dm = self.datamodule
        if not isinstance(dm, ArrayDataModule):
            raise TypeError(
                "kernel-layers predict: the data module must be a kernel_layers.data "
                f"ArrayDataModule, got {type(dm).__name__}"
            )
        option = "--predict_split" if options["predict_input"] is None else "--predict_input"
        with _named_option("kernel-layers predict", option):
            dm.set_predict_source(split=options["predict_split"], path=options["predict_input"])
        if options["predict_input"] is not None:
            dm.setup()  # the training data's errors are not the file's
            with _named_option("kernel-layers predict", option, (ValueError, TypeError)):
                dm.read_predict_source()  # now: a malformed file is a usage error
        check_not_an_input(
            options["predict_output"],
            [options["predict_input"], options.get("ckpt_path")],
            owner="kernel-layers predict",
            name="--predict_output",
        )
        if isinstance(self.model, KernelClassifier):
            self.model.hparams["return_scores"] = True
        with _named_option("kernel-layers predict", "--predict_output"):
            writer = PredictionWriter(options["predict_output"], scores=options["predict_scores"])
        self.trainer.callbacks.append(writer)  # type: ignore[attr-defined]  # a list property
        # that Lightning's Trainer stub does not declare

    def _command_config(self) -> Any:
        return self.config.get(self.subcommand) if self.subcommand else self.config

    def before_instantiate_classes(self) -> None:
        """No progress bar when stdout is not a terminal (a file, a pipe), unless asked for:
        :class:`~kernel_layers.cli.output.EpochLine` prints one line per epoch instead."""
        trainer = self._command_config().get("trainer")
        if trainer is not None and trainer.get("enable_progress_bar") is None:
            trainer["enable_progress_bar"] = sys.stdout.isatty()

    def instantiate_classes(self) -> None:
        """Build the model, the data module and the trainer; from a console, a setting
        the library's checks refuse (``--model.objective xx``) ends the command with its
        message and status 2, as a value of the wrong type does."""
        with self._usage_errors():
            super().instantiate_classes()

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, with two adjustments to the configured callbacks:
        ``--trainer.enable_checkpointing false`` drops the recipe's ``ModelCheckpoint``
        callbacks (Lightning refuses both together), and without a progress bar an
        :class:`~kernel_layers.cli.output.EpochLine` reports each epoch."""
        config = self._get(self.config_init, "trainer", default={})
        callbacks = config.get("callbacks")
        callbacks = (
            []
            if callbacks is None
            else list(callbacks)
            if isinstance(callbacks, list)
            else [callbacks]
        )
        if config.get("enable_checkpointing") is False:
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        if config.get("enable_progress_bar") is False and self.subcommand == "fit":
            callbacks.append(EpochLine())
        config["callbacks"] = callbacks
        return super().instantiate_trainer(**kwargs)

    def after_fit(self) -> None:
        """Test the fitted model (unless ``--test_after_fit false``) and print the summary."""
        accuracy = None
        # before the test run, whose callbacks replace the fit's KeepBest with a fresh one
        kept = fit_keep_best(self.trainer)
        if self.config.get(self.subcommand, {}).get("test_after_fit", True):
            results = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)
            if results and "test/acc" in results[0]:
                accuracy = float(results[0]["test/acc"])
        saver = next((c for c in self.trainer.callbacks if isinstance(c, RunConfigSaver)), None)  # type: ignore[attr-defined]
        if self.trainer.is_global_zero:
            lines = fit_summary(
                self.trainer, accuracy, saver.saved_path if saver else None, kept=kept
            )
            print("\n".join(lines), flush=True)


@contextmanager
def _named_option(
    owner: str, option: str, errors: tuple[type[Exception], ...] = (ValueError,)
) -> Iterator[None]:
    """Re-raise an error of ``errors`` from the block naming the command-line ``option``
    whose value caused it (a ``FileNotFoundError`` as one, any other as a ``ValueError``)."""
    try:
        yield
    except errors as err:
        kind = FileNotFoundError if isinstance(err, FileNotFoundError) else ValueError
        raise kind(f"{owner}: argument '{option}': {err}") from err


def run_lightning_cli(argv: list[str], *, console: bool) -> None:
    """Run LightningCLI's command in ``argv`` (``fit``, ``validate``, ``test``, ``predict``).

    A process group the run opened (``--trainer.strategy ddp``) is destroyed at its end
    (:func:`close_process_group`); one the caller opened before stays open.

    Args:
        argv: the command line without the program name; ``--config NAME`` may name a
            shipped recipe.
        console: whether ``argv`` came from ``sys.argv`` (LightningCLI then reads
            ``sys.argv`` itself; given both a list and a command line, it warns).

    Raises:
        SystemExit: status 2, with the message on stderr, for a bad ``--config`` or a
            second ``J``; from a console, status 1 with the message alone for a data set
            that is not there (:class:`~kernel_layers.data.network.DatasetNotFoundError`).
    """
    try:
        argv = resolve_config_args(argv)
        check_j_set_once(argv)
        check_command_options(argv)
    except ValueError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    configure_output()
    if console:
        sys.argv[1:] = argv
    own_group = not (dist.is_available() and dist.is_initialized())
    try:
        KernelLayersCLI(
            KernelClassifier,
            ArrayDataModule,
            subclass_mode_data=True,
            args=None if console else argv,
            console=console,
        )
    except DatasetNotFoundError as err:  # data to fetch, not a crash: no traceback
        if not console:
            raise
        print(err, file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if own_group:  # a group the caller opened before is the caller's to close
            close_process_group()


def close_process_group() -> None:
    """Destroy ``torch.distributed``'s default process group, if one is open.

    Lightning destroys it at exit for NCCL only; a gloo group (DDP on CPUs) left to the
    interpreter's exit can abort the process (SIGABRT, "terminate called without an
    active exception") after the run has finished.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
