"""Why NysDI forms ``G^T C G + rho K_Z`` in float64: precision on scikit-learn's digits.

Prints, for a few ``(gamma, n)``, NysDI computed

* ``float64``: all in float64 (library path, float64 inputs);
* ``pinv``: eq. (10) with a float64 NumPy pseudo-inverse (same jitter);
* ``float32 (library)``: float32 inputs, Gram and solve in float64 (the library's path);
* ``float32 Gram``: float32 inputs with the Gram formed in float32 (what the library avoids);

and the relative errors against ``float64``.

Usage: ``python benchmarks/nysdi_precision.py``
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits

from kernel_layers import nystrom_discriminant_information
from kernel_layers._linalg import landmark_gram, robust_cholesky
from kernel_layers.kernels import gaussian_kernel, get_kernel
from kernel_layers.objectives import encode_targets

RHO = 1e-4
JITTER = 1e-10


def pinv_reference(x: np.ndarray, labels: np.ndarray, z: np.ndarray, gamma: float) -> float:
    g = np.exp(-gamma * ((x[:, None] - z[None]) ** 2).sum(-1))
    k = np.exp(-gamma * ((z[:, None] - z[None]) ** 2).sum(-1)) + JITTER * np.eye(len(z))
    y = np.eye(labels.max() + 1)[labels]
    y = y / np.sqrt(y.sum(0))
    gc, yc = g - g.mean(0), y - y.mean(0)
    mat = np.linalg.pinv(gc.T @ gc + RHO * k, rcond=1e-15, hermitian=True)
    return float(np.trace(mat @ gc.T @ yc @ yc.T @ gc))


def float32_gram(x: torch.Tensor, labels: torch.Tensor, z: torch.Tensor, gamma: float) -> float:
    """Eq. (10) with ``G^T C G + rho K_Z`` formed in float32, then factorised and solved in
    float64 (the Cholesky adds a growing jitter when the float32 matrix is not positive
    definite). Written out here: the library's own float32 DI path would notice the
    coarse Gram and redo it in float64."""
    y, _ = encode_targets(labels, len(labels))
    y = y / y.sum(0).sqrt()
    g = gaussian_kernel(x, z, gamma)
    k_z = landmark_gram(z, get_kernel("gaussian"), gamma, JITTER).float()
    g_c, y_c = g - g.mean(0), y - y.mean(0)
    s = (g_c.mT @ g_c + RHO * k_z).double()
    cross = g_c.double().mT @ y_c.double()
    factor = robust_cholesky(s, owner="float32 Gram")
    w = torch.linalg.solve_triangular(factor, cross, upper=False)
    return float((w * w).sum())


def main() -> None:
    x_np, labels_np = load_digits(return_X_y=True)
    x64, labels = torch.tensor(x_np / 16.0), torch.tensor(labels_np)
    print(
        "| gamma | n | float64 | pinv rel. err | float32 (library) rel. err "
        "| float32 Gram rel. err |"
    )
    print("|---|---|---|---|---|---|")
    for gamma in (0.02, 0.005):
        for n in (200, 800):
            z64 = x64[torch.randperm(len(x64), generator=torch.Generator().manual_seed(0))[:n]]
            ref = nystrom_discriminant_information(
                x64, labels, z64, gamma=gamma, jitter=JITTER
            ).item()
            pinv = pinv_reference(x64.numpy(), labels_np, z64.numpy(), gamma)
            lib32 = nystrom_discriminant_information(
                x64.float(), labels, z64.float(), gamma=gamma, jitter=JITTER
            ).item()
            gram32 = float32_gram(x64.float(), labels, z64.float(), gamma)
            rel = [abs(v - ref) / ref for v in (pinv, lib32, gram32)]
            print(f"| {gamma} | {n} | {ref:.8f} | {rel[0]:.1e} | {rel[1]:.1e} | {rel[2]:.1e} |")


if __name__ == "__main__":
    main()
