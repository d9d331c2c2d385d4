"""The :class:`Kernel` type and the registry that looks kernels up by name."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch import Tensor

from kernel_layers._validation import check_bool, check_int, check_nonnegative, check_real
from kernel_layers.kernels import spectral
from kernel_layers.kernels.functions import (
    DEFAULT_COEF0,
    DEFAULT_DEGREE,
    DEFAULT_SKEWEDNESS,
    cauchy_kernel,
    check_above_shift,
    check_nonnegative_input,
    chi2_kernel,
    gaussian_kernel,
    laplacian_kernel,
    linear_kernel,
    polynomial_kernel,
    project_above_shift,
    project_nonnegative,
    shifted_log,
    skewed_chi2_kernel,
    skewed_intersection_kernel,
)

__all__ = [
    "Kernel",
    "KernelMatrix",
    "KernelParam",
    "available_kernels",
    "get_kernel",
    "kernel_from_callable",
    "register_kernel",
    "registered_name",
]


def _check_degree(owner: str, name: str, value: object) -> int:
    """A polynomial degree: an integer ``>= 1`` (integral floats such as ``3.0`` pass)."""
    return check_int(owner, name, value, minimum=1, integral_float=True)


#: ``matrix(x, z, gamma, **params) -> Tensor[B, n]``.
KernelMatrix = Callable[..., Tensor]


# -------------------------------------------------------------------- the Kernel type
@dataclass(frozen=True)
class KernelParam:
    """A named kernel parameter with its default and validator.

    Attributes:
        name: the key in ``kernel_params``.
        default: the value used when the key is absent.
        check: ``check(owner, name, value) -> value`` returning the validated value or
            raising ``TypeError`` / ``ValueError`` in the library's message format.
    """

    name: str
    default: float
    check: Callable[[str, str, object], float]


@dataclass(frozen=True)
class Kernel:
    """A named kernel: its matrix function, parameters and, if any, its spectral law.

    Every field is a module-level function (or a :func:`functools.partial` of one) for
    the registered kernels, so a :class:`Kernel` and the layers holding it pickle.

    Attributes:
        name: registry key.
        matrix: ``matrix(x, z, gamma, **params) -> Tensor[B, n]`` for
            ``x (Tensor[B, D])``, ``z (Tensor[n, D])``; it applies :attr:`transform`
            itself.
        quantile: quantile ``h(u)`` of the standardised 1-D spectral law (of the
            transformed inputs), or ``None`` when the kernel has no random Fourier map.
        scale: ``scale(gamma)``, the frequency scale so that ``scale(gamma) * h(U)``
            has the kernel's spectral law.
        params: the kernel's named parameters beyond ``gamma``.
        transform: ``transform(x, **params) -> Tensor[..., D]``, the input map a random
            Fourier map applies before ``cos(x W + b)`` (``log(x + c)`` for the skewed
            kernels), or ``None`` for the identity.
        check_input: ``check_input(owner, name, x, **params)`` raising ``ValueError``
            for inputs outside the kernel's domain, or ``None`` when any input is valid.
        project_input: ``project_input(x, **params) -> Tensor``, ``x`` projected into
            that domain (where a :class:`~kernel_layers.NystromLayer` evaluates trained
            landmarks that stepped out of it), or ``None`` (no domain, or none known:
            such a kernel's landmarks cannot be trained).
        gamma_power: how ``gamma`` follows the unit of the (transformed) inputs: ``2``
            where it multiplies squared distances or inner products (its unit is the
            inputs' to the power ``-2``), ``1`` where it multiplies distances. The default
            ``gamma`` of the scikit-learn estimators
            (:func:`~kernel_layers.selection.heuristic.gamma_heuristic`) divides by the
            inputs' variance to the power ``gamma_power / 2``, so that inputs in any unit
            give the same map.
    """

    name: str
    matrix: KernelMatrix
    quantile: Callable[[Tensor], Tensor] | None = None
    scale: Callable[[float], float] | None = None
    params: tuple[KernelParam, ...] = ()
    transform: Callable[..., Tensor] | None = None
    check_input: Callable[..., None] | None = None
    project_input: Callable[..., Tensor] | None = None
    gamma_power: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Kernel: argument 'name' must be a non-empty str, got {self.name!r}")
        if type(self.gamma_power) is not int or self.gamma_power not in (1, 2):
            raise ValueError(
                f"Kernel: argument 'gamma_power' must be 1 or 2, got {self.gamma_power!r}"
            )
        if not callable(self.matrix):
            raise TypeError(
                f"Kernel: argument 'matrix' must be callable, got {type(self.matrix).__name__}"
            )
        for field in ("quantile", "scale", "transform", "check_input", "project_input"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(
                    f"Kernel: argument {field!r} must be callable or None, "
                    f"got {type(value).__name__}"
                )

    @property
    def has_spectrum(self) -> bool:
        """Whether random Fourier features exist for this kernel."""
        return self.quantile is not None and self.scale is not None

    @property
    def param_names(self) -> list[str]:
        """Names of the kernel's parameters, in declaration order."""
        return [p.name for p in self.params]

    @property
    def defaults(self) -> dict[str, float]:
        """The default value of each parameter."""
        return {p.name: p.default for p in self.params}

    def resolve_params(
        self, params: Mapping[str, object] | None, *, owner: str = "Kernel"
    ) -> dict[str, float]:
        """Validate ``params`` and complete them with the defaults.

        Args:
            params: user values by name, or ``None`` for all defaults.
            owner: the caller's name for error messages.

        Returns:
            dict[str, float]: one validated value per parameter, in declaration order.

        Raises:
            TypeError: ``params`` is not a mapping, or a value has the wrong type.
            ValueError: an unknown name (the message lists the valid ones) or an
                invalid value.
        """
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise TypeError(
                f"{owner}: argument 'kernel_params' must be a dict or None, "
                f"got {type(params).__name__}"
            )
        unknown = sorted(str(k) for k in params if k not in self.param_names)
        if unknown:
            hint = " (pass gamma as its own argument)" if "gamma" in unknown else ""
            raise ValueError(
                f"{owner}: argument 'kernel_params' must have keys among {self.param_names} "
                f"(the parameters of kernel {self.name!r}){hint}, got unknown key(s) {unknown}"
            )
        return {
            p.name: p.check(owner, f"kernel_params.{p.name}", params[p.name])
            if p.name in params
            else p.default
            for p in self.params
        }

    def bind(self, params: Mapping[str, object] | None = None, *, owner: str = "Kernel") -> Kernel:
        """This kernel with its parameters fixed (validated, defaults filled in).

        The result has no parameters left: ``matrix(x, z, gamma)``, ``transform(x)`` and
        ``check_input(owner, name, x)`` use the bound values, so it can be handed to
        functions that know only ``gamma`` (e.g.
        :func:`~kernel_layers.nystrom_discriminant_information`).

        Args:
            params: parameter values by name (``None``: the defaults).
            owner: the caller's name for error messages.

        Returns:
            Kernel: the bound kernel, with the same name.
        """
        values = self.resolve_params(params, owner=owner)
        if not self.params:
            return self

        def partial(fn: Callable[..., object] | None) -> Callable[..., object] | None:
            return None if fn is None else functools.partial(fn, **values)

        return dataclasses.replace(
            self,
            # partial() of each callable keeps its signature minus the bound keywords,
            # which the field types cannot express.
            matrix=partial(self.matrix),  # type: ignore[arg-type]
            transform=partial(self.transform),  # type: ignore[arg-type]
            check_input=partial(self.check_input),  # type: ignore[arg-type]
            project_input=partial(self.project_input),  # type: ignore[arg-type]
            params=(),
        )

    def validate_input(self, owner: str, name: str, x: Tensor) -> None:
        """Raise if ``x`` lies outside the kernel's domain (for a bound kernel).

        Raises:
            ValueError: see :attr:`check_input`.
        """
        if self.check_input is not None:
            self.check_input(owner, name, x, **self.defaults)


class _CallableMatrix:
    """Adapts a user's ``k(X, Z) -> Tensor[B, n]`` to ``matrix(x, z, gamma)``."""

    def __init__(self, fn: Callable[[Tensor, Tensor], Tensor], name: str) -> None:
        self.fn, self.name = fn, name

    def __call__(self, x: Tensor, z: Tensor, gamma: float = 1.0) -> Tensor:
        out = self.fn(x, z)
        expected = [x.shape[0], z.shape[0]]
        if not isinstance(out, Tensor):
            raise TypeError(
                f"kernel {self.name!r}: the callable must return a Tensor{expected}, "
                f"got {type(out).__name__}"
            )
        if list(out.shape) != expected:
            raise ValueError(
                f"kernel {self.name!r}: the callable must return a Tensor of shape "
                f"{expected} (k(X[B, D], Z[n, D]) -> [B, n]), got shape {list(out.shape)}"
            )
        return out


def kernel_from_callable(fn: Callable[[Tensor, Tensor], Tensor]) -> Kernel:
    """Wrap a user's ``k(X, Z) -> Tensor[B, n]`` into an anonymous :class:`Kernel`.

    The kernel has no spectral law and ignores ``gamma``; it pickles only if ``fn``
    does (a lambda does not).
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    return Kernel(name, _CallableMatrix(fn, name))


_REGISTRY: dict[str, Kernel] = {}


def register_kernel(kernel: Kernel, *, overwrite: bool = False) -> Kernel:
    """Add ``kernel`` to the registry so layers accept ``kernel=kernel.name``.

    Raises:
        TypeError: ``kernel`` is not a :class:`Kernel`.
        ValueError: the name is taken and ``overwrite`` is false.
    """
    overwrite = check_bool("register_kernel", "overwrite", overwrite)
    if not isinstance(kernel, Kernel):
        raise TypeError(
            "register_kernel: argument 'kernel' must be a kernel_layers Kernel (e.g. "
            f"Kernel(name, matrix)), got {type(kernel).__name__}"
        )
    if kernel.name in _REGISTRY and not overwrite:
        raise ValueError(
            f"register_kernel: argument 'kernel' must have a new name, "
            f"got {kernel.name!r} which is already registered"
        )
    _REGISTRY[kernel.name] = kernel
    return kernel


def registered_name(owner: str, name: str) -> str:
    """``name`` if a kernel is registered under it, else raise (for saving settings).

    Raises:
        ValueError: ``name`` is not registered (a user callable or an unregistered
            :class:`Kernel`), so the setting cannot be written to a checkpoint.
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"{owner}: argument 'kernel' must be a registered kernel name to be saved "
            f"(register_kernel(...) it, or pass the layer to load_from_checkpoint), "
            f"got {name!r}"
        )
    return name


def available_kernels(*, spectral: bool = False) -> list[str]:
    """Names of the registered kernels (only those with a spectral law if ``spectral``)."""
    check_bool("available_kernels", "spectral", spectral)
    return sorted(k for k, v in _REGISTRY.items() if v.has_spectrum or not spectral)


def get_kernel(
    name: str | Kernel | Callable[[Tensor, Tensor], Tensor],
    *,
    owner: str = "get_kernel",
    spectral: bool = False,
) -> Kernel:
    """Look a kernel up by name, or wrap a callable.

    Args:
        name: a registered name, a :class:`Kernel` (returned as is), or a callable
            ``k(X (Tensor[B, D]), Z (Tensor[n, D])) -> Tensor[B, n]`` (wrapped by
            :func:`kernel_from_callable`; it has no spectral law).
        owner: the caller's name for error messages.
        spectral: require a spectral law (for random Fourier features).

    Raises:
        ValueError: unknown name, or no spectral law when one is required; the message
            lists the valid options.
    """
    check_bool(owner, "spectral", spectral)
    if isinstance(name, Kernel):
        kernel: Kernel | None = name
    elif isinstance(name, str):
        kernel = _REGISTRY.get(name)
    elif callable(name):
        kernel = kernel_from_callable(name)
    else:
        raise TypeError(
            f"{owner}: argument 'kernel' must be a kernel name, a Kernel or a callable "
            f"k(X, Z) -> Tensor[B, n], got {type(name).__name__}"
        )
    if kernel is None:
        options = (
            f"{available_kernels(spectral=True)}"
            if spectral
            else f"{available_kernels()} or a callable k(X, Z) -> Tensor[B, n]"
        )
        raise ValueError(f"{owner}: argument 'kernel' must be one of {options}, got {name!r}")
    if spectral and not kernel.has_spectrum:
        raise ValueError(
            f"{owner}: argument 'kernel' must have a spectral law (one of "
            f"{available_kernels(spectral=True)}), got {kernel.name!r}"
        )
    return kernel


_SKEWEDNESS = KernelParam("c", DEFAULT_SKEWEDNESS, check_real)

register_kernel(
    Kernel(
        "gaussian",
        gaussian_kernel,
        quantile=spectral.gaussian_quantile,
        scale=spectral.sqrt_two_gamma,
    )
)
register_kernel(
    Kernel(
        "laplacian",
        laplacian_kernel,
        quantile=spectral.cauchy_quantile,
        scale=spectral.same_gamma,
        gamma_power=1,
    )
)
register_kernel(
    Kernel("cauchy", cauchy_kernel, quantile=spectral.laplace_quantile, scale=spectral.sqrt_gamma)
)
register_kernel(
    Kernel(
        "skewed_chi2",
        skewed_chi2_kernel,
        quantile=spectral.sech_quantile,
        scale=spectral.half_gamma,
        params=(_SKEWEDNESS,),
        transform=shifted_log,
        check_input=check_above_shift,
        project_input=project_above_shift,
        gamma_power=1,
    )
)
register_kernel(
    Kernel(
        "skewed_intersection",
        skewed_intersection_kernel,
        quantile=spectral.cauchy_quantile,
        scale=spectral.same_gamma,
        params=(_SKEWEDNESS,),
        transform=shifted_log,
        check_input=check_above_shift,
        project_input=project_above_shift,
        gamma_power=1,
    )
)
register_kernel(
    Kernel(
        "polynomial",
        polynomial_kernel,
        params=(
            KernelParam("degree", DEFAULT_DEGREE, _check_degree),
            KernelParam("coef0", DEFAULT_COEF0, check_nonnegative),
        ),
    )
)
register_kernel(Kernel("linear", linear_kernel))
register_kernel(
    Kernel(
        "chi2",
        chi2_kernel,
        check_input=check_nonnegative_input,
        project_input=project_nonnegative,
        gamma_power=1,
    )
)
