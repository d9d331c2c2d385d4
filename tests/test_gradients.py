"""Closed-form backward passes against ``gradcheck`` and a plain autograd implementation."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

from kernel_layers import (
    FourierLayer,
    NystromLayer,
    discriminant_information,
    nystrom_discriminant_information,
)
from kernel_layers.kernels import gaussian_kernel


def _autograd_di(phi: torch.Tensor, y: torch.Tensor, rho: float) -> torch.Tensor:
    """DI written with differentiable torch ops only (the naive implementation)."""
    pc, yc = phi - phi.mean(0), y - y.mean(0)
    s = pc.T @ pc + rho * torch.eye(phi.shape[1], dtype=phi.dtype, device=phi.device)
    m = pc.T @ yc
    return (m * torch.linalg.solve(s, m)).sum()


@pytest.mark.parametrize("form", ["primal", "dual"])
def test_di_gradcheck_labels(form: str, device: torch.device) -> None:
    phi = torch.randn(9, 4, dtype=torch.float64, device=device, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 1], device=device)
    assert gradcheck(lambda p: discriminant_information(p, labels, rho=0.1, form=form), (phi,))


@pytest.mark.parametrize("form", ["primal", "dual"])
def test_di_gradcheck_regression_targets_and_features(form: str) -> None:
    phi = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(7, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda p, t: discriminant_information(p, t, rho=0.1, form=form), (phi, y))


def test_custom_backward_equals_autograd(device: torch.device) -> None:
    phi = torch.randn(300, 40, dtype=torch.float64, device=device, requires_grad=True)
    labels = torch.randint(0, 5, (300,), device=device)
    y = torch.nn.functional.one_hot(labels, 5).double()
    y = y / y.sum(0).sqrt()
    (g_custom,) = torch.autograd.grad(discriminant_information(phi, labels), phi)
    (g_auto,) = torch.autograd.grad(_autograd_di(phi, y, 1e-4), phi)
    torch.testing.assert_close(g_custom, g_auto, rtol=1e-7, atol=1e-9)


def test_custom_backward_float32_close_to_float64(device: torch.device) -> None:
    phi = torch.randn(500, 50, dtype=torch.float64, device=device)
    labels = torch.randint(0, 5, (500,), device=device)
    p64 = phi.clone().requires_grad_(True)
    p32 = phi.float().requires_grad_(True)
    discriminant_information(p64, labels).backward()
    discriminant_information(p32, labels).backward()
    assert p32.grad.dtype == torch.float32
    torch.testing.assert_close(p32.grad.double(), p64.grad, rtol=1e-4, atol=1e-6)


def test_nysdi_gradcheck_inputs_and_landmarks(device: torch.device) -> None:
    x = torch.rand(10, 3, dtype=torch.float64, device=device, requires_grad=True)
    z = torch.rand(4, 3, dtype=torch.float64, device=device, requires_grad=True)
    labels = torch.arange(10, device=device) % 3

    def f(x_: torch.Tensor, z_: torch.Tensor) -> torch.Tensor:
        return nystrom_discriminant_information(x_, labels, z_, gamma=0.7, rho=0.05, jitter=1e-3)

    assert gradcheck(f, (x, z))


def test_nysdi_laplacian_gradcheck() -> None:
    x = torch.rand(8, 2, dtype=torch.float64)
    z = torch.rand(3, 2, dtype=torch.float64, requires_grad=True)
    labels = torch.arange(8) % 2

    def f(z_: torch.Tensor) -> torch.Tensor:
        return nystrom_discriminant_information(
            x, labels, z_, kernel="laplacian", gamma=0.5, rho=0.05, jitter=1e-3
        )

    assert gradcheck(f, (z,))


def test_nysdi_gradient_equals_autograd_of_eq10(device: torch.device) -> None:
    x = torch.rand(60, 5, dtype=torch.float64, device=device)
    labels = torch.arange(60, device=device) % 3
    z = torch.rand(8, 5, dtype=torch.float64, device=device, requires_grad=True)
    (g_custom,) = torch.autograd.grad(
        nystrom_discriminant_information(x, labels, z, gamma=0.5, rho=0.01, jitter=1e-6), z
    )
    y = torch.nn.functional.one_hot(labels).double()
    y = y / y.sum(0).sqrt()
    g = gaussian_kernel(x, z, 0.5)
    k = gaussian_kernel(z, z, 0.5) + 1e-6 * torch.eye(8, dtype=torch.float64, device=device)
    gc, yc = g - g.mean(0), y - y.mean(0)
    m = gc.T @ yc
    naive = (m * torch.linalg.solve(gc.T @ gc + 0.01 * k, m)).sum()
    (g_auto,) = torch.autograd.grad(naive, z)
    torch.testing.assert_close(g_custom, g_auto, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_fourier_layer_gradcheck(kernel: str, device: torch.device) -> None:
    layer = FourierLayer(3, 5, kernel=kernel, gamma=0.5, seed=0, dtype=torch.float64).to(device)
    x = torch.rand(4, 3, dtype=torch.float64, device=device, requires_grad=True)

    def f(x_: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, {"frequencies": w, "phases": b}, (x_,))

    w = layer.frequencies.detach().clone().requires_grad_(True)
    b = layer.phases.detach().clone().requires_grad_(True)
    assert gradcheck(f, (x, w, b))


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_nystrom_layer_gradcheck(kernel: str, device: torch.device) -> None:
    layer = NystromLayer(3, 4, kernel=kernel, gamma=0.5, seed=0, dtype=torch.float64, jitter=1e-4)
    layer = layer.to(device)
    x = torch.rand(5, 3, dtype=torch.float64, device=device, requires_grad=True)

    def f(x_: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, {"landmarks": z}, (x_,))

    z = layer.landmarks.detach().clone().requires_grad_(True)
    assert gradcheck(f, (x, z))


def test_rfdi_end_to_end_gradcheck() -> None:
    layer = FourierLayer(2, 3, gamma=1.0, seed=0, dtype=torch.float64)
    x = torch.rand(8, 2, dtype=torch.float64)
    labels = torch.arange(8) % 2

    def f(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        phi = torch.func.functional_call(layer, {"frequencies": w, "phases": b}, (x,))
        return discriminant_information(phi, labels, rho=0.1)

    w = layer.frequencies.detach().clone().requires_grad_(True)
    b = layer.phases.detach().clone().requires_grad_(True)
    assert gradcheck(f, (w, b))


def test_nystrom_duplicate_landmarks_give_finite_gradients() -> None:
    x = torch.rand(30, 4)
    z = torch.cat([x[:5], x[:5]])
    layer = NystromLayer(4, 10, landmarks=z, gamma=1.0)
    out = layer(x)
    discriminant_information(out, torch.arange(30) % 3).backward()
    assert torch.isfinite(out).all()
    assert torch.isfinite(layer.landmarks.grad).all()


def test_gaussian_gram_of_one_set_has_the_gradient_of_both_arguments() -> None:
    """``gaussian_kernel(z, z)`` takes both arguments' gradients in one product: checked
    by gradcheck and against plain autograd of ``exp(-gamma ||z_i - z_j||^2)`` under a
    non-symmetric upstream gradient."""
    gen = torch.Generator().manual_seed(0)
    z = torch.rand(7, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(7, 7, dtype=torch.float64, generator=gen)
    assert gradcheck(lambda z_: (gaussian_kernel(z_, z_, 0.7) * weight).sum(), (z,))
    (ours,) = torch.autograd.grad((gaussian_kernel(z, z, 0.7) * weight).sum(), z)
    diff = z[:, None, :] - z[None, :, :]
    plain = torch.exp(-0.7 * diff.square().sum(-1))
    (reference,) = torch.autograd.grad((plain * weight).sum(), z)
    torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-14)
