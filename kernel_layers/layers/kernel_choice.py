"""The kernel settings (``kernel``, ``gamma``, ``kernel_params``) the kernel-based maps share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import ClassVar

from torch import Tensor

from kernel_layers._validation import check_positive
from kernel_layers.kernels import Kernel, get_kernel, registered_name

__all__ = ["GammaSetting", "KernelChoice"]


class GammaSetting:
    """Mixin of a map's kernel parameter ``gamma``: checked ``> 0`` when assigned, and
    refused once built where the map's parameters were drawn from it (``_gamma_fixed``).

    Attributes:
        gamma (float): the kernel parameter ``> 0`` (scikit-learn's convention).
    """

    _gamma: float
    #: Whether the map's parameters were drawn from ``gamma`` (random Fourier
    #: frequencies): a new value is then refused instead of leaving them at the old one.
    _gamma_fixed: ClassVar[bool] = False

    def __setstate__(self, state: dict[str, object]) -> None:
        if "gamma" in state:  # a map pickled when gamma was a plain attribute
            state["_gamma"] = state.pop("gamma")
        super().__setstate__(state)  # type: ignore[misc]  # nn.Module's, by the maps' MRO

    @property
    def gamma(self) -> float:
        return self._gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        owner = type(self).__name__
        checked = check_positive(owner, "gamma", value)
        old = getattr(self, "_gamma", None)
        if self._gamma_fixed and old is not None and checked != old:
            raise AttributeError(
                f"{owner}: argument 'gamma' is fixed once the map is built (its parameters "
                f"were drawn at gamma={old:g}), got {checked!r}; build a new "
                f"{owner}(..., gamma={checked:g})"
            )
        self._gamma = checked
        self._on_gamma(checked)

    def _on_gamma(self, value: float) -> None:
        """What a new ``gamma`` changes besides the kernel (sub-maps take it too)."""


class KernelChoice(GammaSetting):
    """Mixin of the maps built on one kernel: validates and records its settings.

    Attributes:
        kernel (str): the kernel's name.
        gamma (float): the kernel parameter ``> 0`` (scikit-learn's convention);
            assigning a new value checks it (and is refused by the maps whose parameters
            were drawn from it).
        kernel_params (Mapping[str, float]): further kernel parameters, defaults filled
            in; read-only (the kernel is bound to them when the map is built).
    """

    kernel: str
    _kernel_params: dict[str, float]
    _kernel: Kernel

    def __setstate__(self, state: dict[str, object]) -> None:
        # A map pickled when kernel_params was a plain attribute.
        if "kernel_params" in state:
            state["_kernel_params"] = state.pop("kernel_params")
        super().__setstate__(state)

    @property
    def kernel_params(self) -> Mapping[str, float]:
        return MappingProxyType(self._kernel_params)  # a view: the dict pickles, it not

    def _set_kernel(
        self,
        kernel: str | Kernel | Callable[[Tensor, Tensor], Tensor],
        gamma: float,
        kernel_params: Mapping[str, float] | None,
        *,
        spectral: bool = False,
    ) -> Kernel:
        """Validate and record the kernel settings.

        Args:
            kernel: a registered name, a :class:`~kernel_layers.kernels.Kernel` or a
                callable ``k(X, Z)``.
            gamma: kernel parameter ``> 0``.
            kernel_params: further kernel parameters by name (unknown names raise).
            spectral: the kernel must have a spectral law (random Fourier maps).

        Returns:
            Kernel: the kernel looked up (parameters not bound).
        """
        owner = type(self).__name__
        self.gamma = gamma
        spec = get_kernel(kernel, owner=owner, spectral=spectral)
        self.kernel = spec.name
        self._kernel_params = spec.resolve_params(kernel_params, owner=owner)
        self._kernel = spec.bind(self._kernel_params, owner=owner)
        return spec

    @property
    def kernel_spec(self) -> Kernel:
        """The kernel with :attr:`kernel_params` bound: ``matrix(x, z, gamma)``.

        Pass it as ``kernel=`` to
        :func:`~kernel_layers.nystrom_discriminant_information` (with ``gamma``) to keep
        the parameters and user callables.
        """
        return self._kernel

    def _kernel_matrix(self, x: Tensor, z: Tensor) -> Tensor:
        """``k(x, z) (Tensor[B, n])`` at :attr:`gamma` of ``x (Tensor[B, D])`` and
        ``z (Tensor[n, D])`` after checking both lie in the kernel's domain (the
        ``exact_kernel`` of the maps)."""
        owner = type(self).__name__
        self._kernel.validate_input(owner, "x", x)
        self._kernel.validate_input(owner, "z", z)
        return self._kernel.matrix(x, z, self.gamma)

    def _kernel_config(self) -> dict[str, object]:
        """The kernel settings as constructor arguments.

        Raises:
            ValueError: the kernel is a user callable, which has no name to record.
        """
        return {
            "kernel": registered_name(type(self).__name__, self.kernel),
            "gamma": self.gamma,
            "kernel_params": dict(self.kernel_params),
        }

    def _kernel_repr(self) -> str:
        """``", kernel=..., gamma=..."`` (and the parameters) for ``extra_repr``."""
        text = f", kernel={self.kernel!r}, gamma={self.gamma}"
        if self.kernel_params:
            text += f", kernel_params={dict(self.kernel_params)}"
        return text
