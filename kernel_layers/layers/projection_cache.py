"""A map's inference matrix, cached in eval mode (Nystrom's ``P`` of ``phi(x) = G P``).

Inference and exported graphs then need no factorisation or triangular solve (ONNX has
neither); the cache records what its entry was computed from, and a stale entry is
recomputed.
"""

from __future__ import annotations

import contextlib
from typing import TypeVar

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

    def projection(self) -> Tensor:
        """The matrix to cache (differentiable in the parameters)."""
        raise NotImplementedError

    def _cache_key(self) -> tuple[object, ...]:
        """What :meth:`projection` depends on; a new key invalidates the entry. Tensors
        in it are compared by value (an edit through ``.data`` changes no version
        counter), the rest by ``==``."""
        raise NotImplementedError

    def _cache_source(self) -> Tensor:
        """The parameter whose device and ``requires_grad`` decide when the cache serves."""
        raise NotImplementedError

    @torch.no_grad()
    def _cached_projection(self) -> Tensor:
        """:meth:`projection` computed once per :meth:`_cache_key` (eval mode)."""
        if torch.compiler.is_exporting():  # the exported graph holds it as a constant
            if self._projection is None:
                self._projection = self.projection()
            return self._projection
        key = self._cache_key()
        if self._projection is None or not _same_key(key, self._projection_key):
            self._projection = self.projection()
            self._projection_key = tuple(
                item.detach().clone() if isinstance(item, Tensor) else item for item in key
            )
        return self._projection

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
        if torch.compiler.is_exporting():
            return not self.training
        if torch.compiler.is_compiling():
            return False
        grads = torch.is_grad_enabled() and self._cache_source().requires_grad
        return not self.training and not grads


def _same_key(key: tuple[object, ...], cached: tuple[object, ...] | None) -> bool:
    """Whether ``key`` equals the ``cached`` one: tensors by dtype, device, shape and
    values (``torch.equal``), anything else by ``==``."""
    if cached is None or len(key) != len(cached):
        return False
    for item, old in zip(key, cached, strict=True):
        if isinstance(item, Tensor) or isinstance(old, Tensor):
            if not (isinstance(item, Tensor) and isinstance(old, Tensor)):
                return False
            if (item.dtype, item.device) != (old.dtype, old.device):
                return False
            if not torch.equal(item.detach(), old):
                return False
        elif item != old:
            return False
    return True
