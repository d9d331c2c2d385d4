"""Checkpoint files: written atomically (a kill or a full disk never leaves a broken
checkpoint) and read with ``weights_only=True`` only (no file or URL can run code)."""

from __future__ import annotations

import errno
import io
import os
import pickle
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch
from lightning.fabric.utilities.cloud_io import _load as lightning_load
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from kernel_layers._files import replacing

__all__ = [
    "AtomicCheckpointIO",
    "atomic_torch_save",
    "check_weights_only",
    "in_memory",
    "is_url",
    "load_checkpoint_file",
]

#: Seconds to wait for a checkpoint URL's server.
URL_TIMEOUT_S = 60.0


def check_weights_only(owner: str, weights_only: object) -> None:
    """Refuse ``weights_only=False``: a ``KernelClassifier`` checkpoint holds only
    tensors and primitive types, and a full unpickling can run code from the file.

    Raises:
        ValueError: ``weights_only`` is neither ``None`` nor ``True``.
    """
    if weights_only is not None and weights_only is not True:
        raise ValueError(
            f"{owner}: argument 'weights_only' must be True or None (checkpoints are read "
            "with weights_only=True: they hold only tensors and primitive types, and "
            f"weights_only=False can run code from the file), got {weights_only!r}"
        )


def is_url(path: object) -> bool:
    """Whether ``path`` is an ``http://`` or ``https://`` URL."""
    return str(path).startswith(("http://", "https://"))


def in_memory(checkpoint: dict[str, Any]) -> io.BytesIO:
    """``checkpoint`` written by ``torch.save`` to a stream at its start."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return buffer


def _unpickle(source: str, load: Callable[[], Any]) -> Any:
    """``load()`` (a ``weights_only=True`` read of ``source``), its failures named.

    Raises:
        ValueError: the file holds other objects than tensors and primitive types, or
            is not a readable checkpoint.
    """
    try:
        return load()
    except pickle.UnpicklingError as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"checkpoint {source!r} refused: it holds Python objects other than tensors and "
            "primitive types, which could run code when loaded, or is no checkpoint at all; "
            f"only weights_only=True loads are made ({reason})"
        ) from err
    except Exception as err:  # reading only: any other failure means unreadable bytes
        raise ValueError(
            f"checkpoint {source!r} is not a readable checkpoint (empty, truncated, or not "
            f"written by torch.save): {type(err).__name__}: {err or 'no data'}"
        ) from err


def load_checkpoint_file(path: _PATH | IO[bytes], map_location: Any = None) -> dict[str, Any]:
    """Read the checkpoint at ``path`` with ``torch.load(..., weights_only=True)``.

    ``path`` is a local file, an fsspec URL (``s3://...``), an ``http(s)://`` URL, read
    into memory (no download cache: another file served under the same name is never
    mistaken for it), or a binary stream.

    Raises:
        FileNotFoundError: no file at ``path``.
        OSError: the URL cannot be read; the message names it.
        ValueError: the file holds Python objects other than tensors and primitive
            types (refused unread: unpickling them could run code), or is not a
            readable checkpoint (empty, truncated, not written by ``torch.save``); the
            message names the file.
    """
    source = str(path) if isinstance(path, str | os.PathLike) else "stream"
    if not isinstance(path, str | os.PathLike):
        checkpoint = _unpickle(source, lambda: torch.load(path, map_location, weights_only=True))
    elif is_url(source):
        try:
            with urllib.request.urlopen(source, timeout=URL_TIMEOUT_S) as response:
                data = io.BytesIO(response.read())
        except (urllib.error.URLError, OSError) as err:
            raise OSError(f"could not read the checkpoint URL {source!r}: {err}") from err
        checkpoint = _unpickle(source, lambda: torch.load(data, map_location, weights_only=True))
    elif "://" not in source:  # a local file
        if not Path(source).is_file():
            raise FileNotFoundError(f"no checkpoint file at {source!r}")
        checkpoint = _unpickle(source, lambda: torch.load(source, map_location, weights_only=True))
    else:  # an fsspec URL (s3://, gs://, ...), through Lightning's reader
        if not get_filesystem(source).exists(source):
            raise FileNotFoundError(f"no checkpoint file at {source!r}")
        checkpoint = _unpickle(source, lambda: lightning_load(source, map_location, True))
    if not isinstance(checkpoint, dict):
        raise ValueError(
            f"checkpoint {source!r} must hold a dict (a Lightning checkpoint), "
            f"got {type(checkpoint).__name__}"
        )
    return checkpoint


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to a temporary file beside ``path``, flushed to disk, then renamed
    over ``path`` (``os.replace`` is atomic within a directory).

    A process killed while writing leaves ``path`` as it was (at worst a stray
    ``.<name>.<random>.tmp`` file); a failed write (a full disk, say) removes the temporary
    file and raises, ``path`` unchanged.

    Raises:
        OSError: the write failed; the message names the file and says the previous
            version is kept.
    """
    target = Path(path)
    try:
        with replacing(target) as tmp, open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as err:
        kept = "the previous checkpoint there is kept" if target.exists() else "nothing written"
        remedy = {
            errno.ENOSPC: "Free disk space or choose another dirpath",
            errno.EDQUOT: "Free disk space or choose another dirpath",
            errno.EACCES: "Make the folder writable or choose another dirpath",
            errno.EPERM: "Make the folder writable or choose another dirpath",
            errno.ENAMETOOLONG: "Choose a shorter file name or dirpath",
        }.get(err.errno or 0, "Choose another dirpath")
        raise OSError(
            err.errno,
            f"could not write the checkpoint '{target}' ({err.strerror or err}); {kept}. "
            f"{remedy}, then resume with ckpt_path",
        ) from err


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint format, written with :func:`atomic_torch_save` and read with
    :func:`load_checkpoint_file` (``weights_only=True``, local files and URLs alike).

    ``KernelClassifier`` installs it in place of Lightning's default
    ``TorchCheckpointIO`` (same files, atomic writes, safe reads), so that
    ``Trainer.fit/validate/test/predict(..., ckpt_path=...)`` never unpickles code; pass
    it as ``Trainer(plugins=[AtomicCheckpointIO()])`` for other modules.
    """

    def load_checkpoint(
        self, path: _PATH, map_location: Any | None = "cpu", weights_only: bool | None = None
    ) -> dict[str, Any]:
        """The checkpoint at ``path`` (:func:`load_checkpoint_file`).

        Raises:
            ValueError: ``weights_only=False``, or as :func:`load_checkpoint_file`.
        """
        check_weights_only(type(self).__name__, weights_only)
        return load_checkpoint_file(path, map_location)

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(
                "AtomicCheckpointIO: argument 'storage_options' must be None (local files), "
                f"got {storage_options!r}"
            )
        atomic_torch_save(checkpoint, path)
