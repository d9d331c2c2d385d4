"""A map's inference matrix, cached in eval mode (Nystrom's ``P`` of ``phi(x) = G P``).

Inference and exported graphs then need no factorisation or triangular solve (ONNX has
neither); the cache records what its entry was computed from, and a stale entry is
recomputed.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor, nn

__all__ = ["ProjectionCache"]

_Self = TypeVar("_Self", bound="ProjectionCache")


class ProjectionCache(nn.Module):
    """Mixin: :meth:`projection` computed once per state of the parameters, in eval mode.

    The map implements :meth:`projection`, :meth:`_cache_key` (what the matrix depends
    on) and :meth:`_cache_source` (the parameter whose device and ``requires_grad``
    decide), and calls :meth:`_init_projection_cache` in ``__init__``. The entry is a
    non-persistent buffer: it follows ``.to()`` and stays out of the state dict.
    """

    _projection: Tensor | None

    def _init_projection_cache(self) -> None:
        self.register_buffer("_projection", None, persistent=False)
        self._projection_key: tuple[object, ...] | None = None
        self._projection_dtype: torch.dtype | None = None  # the dtype it was computed in

    def projection(self) -> Tensor:
        """The matrix to cache (differentiable in the parameters)."""
        raise NotImplementedError

    def _cache_key(self) -> tuple[object, ...]:
        """What :meth:`projection` depends on; a new key invalidates the entry. Its
        tensors are compared by value on the CPU (an edit through ``.data`` changes no
        version counter), by version counter and storage on other devices (edit them
        there in place under ``torch.no_grad()``, not through ``.data``), the rest by
        ``==``."""
        raise NotImplementedError

    def _cache_source(self) -> Tensor:
        """The parameter whose device and ``requires_grad`` decide when the cache serves."""
        raise NotImplementedError

    @torch.no_grad()
    def _cached_projection(self) -> Tensor:
        """:meth:`projection` computed once per :meth:`_cache_key` (eval mode)."""
        if torch.compiler.is_exporting():  # the exported graph holds it as a constant
            if self._projection is None:
                self._projection = self._computed()
            return self._projection
        key = self._cache_key()
        if (
            self._projection is None
            or not _same_key(key, self._projection_key)
            or self._projection.dtype != self._projection_dtype  # cast by a module .to()
        ):
            self._projection = self._computed()
            self._projection_dtype = self._projection.dtype
            self._projection_key = tuple(_snapshot(item) for item in key)
        return self._projection

    def _computed(self) -> Tensor:
        """:meth:`projection` as an ordinary tensor even under ``torch.inference_mode``
        (Lightning predicts and tests in it): an inference tensor kept in the cache
        would fail a later ``torch.export`` or autograd use of the map."""
        # inference_mode(False) turns gradients on again: no_grad inside it, a leaf out
        with torch.inference_mode(False), torch.no_grad():
            return self.projection()

    def train(self: _Self, mode: bool = True) -> _Self:
        """Set training mode; ``eval()`` also prepares the cached matrix."""
        super().train(mode)
        if not mode and not torch.compiler.is_compiling() and not self._cache_source().is_meta:
            # A failure here (parameters not finite, say) resurfaces at the first forward.
            with contextlib.suppress(RuntimeError, ValueError):
                self._cached_projection()
        return self

    def _uses_cache(self) -> bool:
        """Inference without gradients to the parameters: the cached matrix serves."""
        if torch.compiler.is_exporting() or torch.jit.is_tracing():
            # one graph whatever the grad mode (a trace's check re-runs it without grad)
            return not self.training
        if torch.compiler.is_compiling():
            return False
        grads = torch.is_grad_enabled() and self._cache_source().requires_grad
        return not self.training and not grads


class _TensorKey(NamedTuple):
    """What the cache keeps of a tensor of the key: its layout, version counter and
    storage, and on the CPU a copy of its values (``None`` elsewhere)."""

    dtype: torch.dtype
    device: torch.device
    shape: torch.Size
    version: int | None  # None: an inference tensor (compared by values)
    storage: int
    values: Tensor | None


def _snapshot(item: object) -> object:
    """A key item as the cache keeps it: a tensor as a :class:`_TensorKey`, anything
    else as it is."""
    if not isinstance(item, Tensor):
        return item
    # an inference tensor (a map built or loaded under torch.inference_mode) has no
    # version counter: compared by its values, as a CPU tensor is
    inference = item.is_inference()
    by_value = item.device.type == "cpu" or inference
    values = item.detach().clone() if by_value else None
    version = None if inference else item._version
    return _TensorKey(item.dtype, item.device, item.shape, version, item.data_ptr(), values)


def _same_key(key: tuple[object, ...], cached: tuple[object, ...] | None) -> bool:
    """Whether ``key`` matches the ``cached`` snapshots (:func:`_snapshot`): a CPU
    tensor by its values (an edit through ``.data`` changes no version counter), a
    tensor elsewhere by its version counter and storage (comparing values would wait
    for the device at every forward), anything else by ``==``."""
    if cached is None or len(key) != len(cached):
        return False
    for item, old in zip(key, cached, strict=True):
        if not isinstance(item, Tensor):
            if item != old:
                return False
            continue
        if not isinstance(old, _TensorKey):
            return False
        if (old.dtype, old.device, old.shape) != (item.dtype, item.device, item.shape):
            return False
        if old.values is not None:
            if not torch.equal(item.detach(), old.values):
                return False
        elif item.is_inference() or (old.version, old.storage) != (
            item._version,
            item.data_ptr(),
        ):
            return False
    return True
