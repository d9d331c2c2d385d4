"""Atomic checkpoint files: a kill or a full disk never leaves a broken checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

__all__ = ["AtomicCheckpointIO", "atomic_torch_save"]


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to a temporary file beside ``path``, flushed to disk, then renamed
    over ``path`` (``os.replace`` is atomic within a directory).

    A process killed while writing leaves ``path`` as it was (at worst a stray
    ``.<name>.tmp-<pid>`` file); a failed write (a full disk, say) removes the temporary
    file and raises, ``path`` unchanged.

    Raises:
        OSError: the write failed; the message names the file and says the previous
            version is kept.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        kept = "the previous checkpoint there is kept" if target.exists() else "nothing written"
        raise OSError(
            err.errno,
            f"could not write the checkpoint '{target}' ({err.strerror or err}); {kept}. "
            "Free disk space or choose another dirpath, then resume with ckpt_path",
        ) from err


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint format, written with :func:`atomic_torch_save`.

    ``KernelClassifier`` installs it in place of Lightning's default
    ``TorchCheckpointIO`` when fitting (same files, atomic writes); pass it as
    ``Trainer(plugins=[AtomicCheckpointIO()])`` for other modules.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(
                "AtomicCheckpointIO: argument 'storage_options' must be None (local files), "
                f"got {storage_options!r}"
            )
        atomic_torch_save(checkpoint, path)
