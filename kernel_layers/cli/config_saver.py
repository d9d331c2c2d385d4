"""The run's configuration saved beside its logs, never over an existing file."""

from __future__ import annotations

import warnings
from pathlib import Path

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback

__all__ = ["RunConfigSaver"]


class RunConfigSaver(SaveConfigCallback):
    """Save the run's configuration beside its logs, never over an existing file.

    With a logger, the configuration goes to ``<log_dir>/config.yaml`` (``config-1.yaml``,
    ``config-2.yaml``, ... if that exists). Without a logger there is no run directory:
    nothing is written (a file the user keeps in the working directory is never touched).
    """

    #: Where the configuration was written (``None``: not written, or not on this rank).
    saved_path: Path | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.logger is None:
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
            self.saved_path = path
        self.already_saved = bool(trainer.strategy.broadcast(True))
