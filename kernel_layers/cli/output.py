"""What ``kernel-layers`` prints: Lightning's start-up notes silenced, messages on their
own lines, one line per epoch when there is no progress bar, and the summary of ``fit``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from typing_extensions import override

from kernel_layers.callbacks.keep_best import KeepBest

__all__ = [
    "CLI_LOGGER",
    "QUIET_LOGGERS",
    "EpochLine",
    "LineHandler",
    "configure_output",
    "fit_keep_best",
    "fit_summary",
]

#: The logger of the command line's own messages (the callbacks' is ``kernel_layers.callbacks``).
CLI_LOGGER = "kernel_layers.cli"
#: Lightning's loggers of start-up notes (accelerators available, a product tip, the seed):
#: raised to ``WARNING``, so that warnings still show.
QUIET_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed")

log = logging.getLogger(CLI_LOGGER)


class LineHandler(logging.Handler):
    """Writes each record on a line of its own to stderr; while a tqdm progress bar is on
    screen the bar is cleared first and redrawn after (``tqdm.write``)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            try:
                from tqdm import tqdm  # type: ignore[import-untyped]
            except ImportError:  # pragma: no cover - tqdm comes with Lightning
                print(message, file=sys.stderr, flush=True)
            else:
                tqdm.write(message, file=sys.stderr)
        except Exception:  # pragma: no cover - logging's own convention
            self.handleError(record)


def configure_output() -> None:
    """Silence Lightning's start-up notes and route this package's messages (the CLI's and
    the callbacks', level ``INFO``) through :class:`LineHandler`. Idempotent."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    package = logging.getLogger("kernel_layers")
    if not any(isinstance(h, LineHandler) for h in package.handlers):
        handler = LineHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        package.addHandler(handler)
    package.setLevel(logging.INFO)
    package.propagate = False


def _format_metrics(metrics: Mapping[str, Any]) -> Iterator[str]:
    keys = ["train/di_epoch", "train/loss_epoch", "val/acc", "lr"]
    if "train/di_epoch" in metrics:
        keys.remove("train/loss_epoch")  # -DI under the DI objective
    for key in keys:
        if key in metrics:
            value = float(metrics[key])
            yield f"{key.removesuffix('_epoch')} {value:.4g}"


class EpochLine(Callback):
    """One line per training epoch, for output without a progress bar (a file, a pipe):
    ``epoch 3: train/di 8.62, val/acc 0.985, lr 0.01`` (epochs counted from 0, as in
    Lightning's progress bar and the callbacks' messages)."""

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        parts = ", ".join(_format_metrics(trainer.callback_metrics))
        _info(f"epoch {trainer.current_epoch}: {parts}")


@rank_zero_only
def _info(message: str) -> None:
    log.info(message)


def _stopping(trainer: pl.Trainer) -> str:
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        message = getattr(callback, "stopping_reason_message", None)
        if message:
            return f"{type(callback).__name__} after epoch {callback.stopped_epoch}"
    return f"max_epochs={trainer.max_epochs} reached" if trainer.max_epochs else "ended"


def fit_keep_best(trainer: pl.Trainer) -> KeepBest | None:
    """The Trainer's :class:`~kernel_layers.callbacks.KeepBest` (``keep_best``), if any."""
    return next((c for c in trainer.callbacks if isinstance(c, KeepBest)), None)  # type: ignore[attr-defined]


def fit_summary(
    trainer: pl.Trainer,
    test_accuracy: float | None,
    config_path: Path | None,
    kept: KeepBest | None = None,
) -> list[str]:
    """The closing lines of ``fit``: test accuracy (and the untrained map's, with an
    :class:`~kernel_layers.callbacks.UntrainedBaseline`), the epochs run and why they
    stopped, the epoch ``kept`` handed back (default: the Trainer's ``KeepBest``) when it
    is not the last, and where the checkpoint, the configuration and the logs are."""
    lines = ["kernel-layers fit: done"]
    baseline = next(
        (c.accuracy for c in trainer.callbacks if type(c).__name__ == "UntrainedBaseline"),  # type: ignore[attr-defined]
        None,
    )
    if test_accuracy is not None:
        trained = f"  test/acc {test_accuracy:.4f}"
        if baseline is not None:
            lines.append(f"  untrained map: test/acc {baseline:.4f}")
            trained += f"  (trained; {100 * (test_accuracy - baseline):+.2f} points)"
        lines.append(trained)
    lines.append(f"  epochs: {trainer.current_epoch} ({_stopping(trainer)})")
    if kept is None:
        kept = fit_keep_best(trainer)
    last = trainer.current_epoch - 1
    checkpoint = trainer.checkpoint_callback
    saved_last = isinstance(checkpoint, ModelCheckpoint) and bool(checkpoint.last_model_path)
    if kept is not None and kept.restored_epoch not in (None, last):
        which = "the untrained map" if kept.restored_epoch == -1 else f"epoch {kept.restored_epoch}"
        lines.append(
            f"  model: {which}, the best on {kept.monitor} ({kept.best_score:.4f}; keep_best)"
            + ("; the checkpoint below holds the last epoch" if saved_last else "")
        )
    if isinstance(checkpoint, ModelCheckpoint) and (
        checkpoint.last_model_path or checkpoint.best_model_path
    ):
        lines.append(f"  checkpoint: {checkpoint.last_model_path or checkpoint.best_model_path}")
    else:
        lines.append("  checkpoint: none (no ModelCheckpoint, or checkpointing off)")
    lines.append(f"  configuration: {config_path if config_path is not None else 'not saved'}")
    lines.append(f"  logs: {trainer.log_dir if trainer.logger is not None else 'none (no logger)'}")
    return lines
