"""Why NysDI forms ``G^T C G + rho K_Z`` in float64: precision on scikit-learn's digits.

Prints, for a few ``(gamma, n)``, NysDI computed

* ``float64``: all in float64 (library path, float64 inputs);
* ``pinv``: eq. (10) with a float64 NumPy pseudo-inverse (same jitter);
* ``float32 (library)``: float32 inputs, Gram and solve in float64 (the library's path);
* ``float32 Gram``: float32 inputs with the Gram formed in float32 (what the library avoids);
* ``float32 kernels``: ``G = k(X, Z)`` and ``K_Z`` evaluated in float64, rounded to float32,
  then everything else in float64: the least a float32 kernel path could lose (no
  cancellation in the distances), which the library avoids for narrow inputs;
* ``float32 Gram + PCG`` (CovType table): a mixed scheme. ``G_c`` in float64,
  its Gram ``G_c^T G_c`` formed in float32, ``+ rho K_Z`` and factorised in float64 (with
  the smallest shift ``10^k mean(diag)`` that makes it positive definite) as the
  preconditioner of a conjugate-gradient solve of the exact float64 system ``S A = G_c^T
  Y_c`` (NysDI is ``tr(A^T G_c^T Y_c)``), after ``PCG_ITERATIONS`` iterations;

and the relative errors against ``float64``. With ``--data-home DIR`` a second table does
the same on CovType training rows (54 columns, scaled as the data module scales them; rows
and landmarks drawn apart, seeds 0-2) at the step benchmark's sizes and at gammas 0.01 (the
step benchmark's), 0.1 and 0.974 (the CovType recipes').

Usage: ``python benchmarks/nysdi_precision.py [--data-home DIR/covtype]``
"""

from __future__ import annotations

import argparse
import functools

import numpy as np
import torch
from sklearn.datasets import load_digits

from kernel_layers import nystrom_discriminant_information
from kernel_layers.kernels import gaussian_kernel, get_kernel
from kernel_layers.numerics.linalg import default_jitter, landmark_gram, robust_cholesky
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


def rounded_kernels(
    x: torch.Tensor,
    labels: torch.Tensor,
    z: torch.Tensor,
    gamma: float,
    *,
    jitter: float = JITTER,
    dtype: torch.dtype = torch.float32,
) -> float:
    """Eq. (10) with ``G`` and ``K_Z`` (jittered) evaluated from float64 inputs, rounded to
    ``dtype``, widened back, then centred, multiplied, factorised and solved in float64.
    ``dtype=torch.float64`` rounds nothing (the library's float64 NysDI)."""
    x, z = x.double(), z.double()
    y, _ = encode_targets(labels, len(labels))
    y = y.double() / y.sum(0).double().sqrt()
    g = gaussian_kernel(x, z, gamma).to(dtype).double()
    k_z = landmark_gram(z, get_kernel("gaussian"), gamma, jitter).to(dtype).double()
    g_c, y_c = g - g.mean(0), y - y.mean(0)
    factor = robust_cholesky(g_c.mT @ g_c + RHO * k_z, owner="rounded kernels")
    w = torch.linalg.solve_triangular(factor, g_c.mT @ y_c, upper=False)
    return float((w * w).sum())


#: Iterations of the float64 conjugate-gradient solve reported for the mixed scheme.
PCG_ITERATIONS = (3, 30)


def float32_gram_pcg(
    x: torch.Tensor, labels: torch.Tensor, z: torch.Tensor, gamma: float, jitter: float
) -> tuple[float, list[float]]:
    """The mixed scheme: ``(shift, [NysDI after each of PCG_ITERATIONS])``, ``shift`` the
    relative diagonal shift the float32 Gram's ``S`` needed to factorise."""
    x, z = x.double(), z.double()
    y, _ = encode_targets(labels, len(labels))
    y = y.double() / y.sum(0).double().sqrt()
    g = gaussian_kernel(x, z, gamma)
    k_z = landmark_gram(z, get_kernel("gaussian"), gamma, jitter)
    g_c, y_c = g - g.mean(0), y - y.mean(0)
    cross = g_c.mT @ y_c
    rough = g_c.float()
    approx = (rough.mT @ rough).double() + RHO * k_z
    scale, eye = float(approx.diagonal().mean()), torch.eye(len(z), dtype=torch.float64)
    for shift in [0.0] + [10.0**k for k in range(-12, 1)]:
        factor, info = torch.linalg.cholesky_ex(approx + shift * scale * eye)
        if int(info) == 0:
            break

    def exact(v: torch.Tensor) -> torch.Tensor:  # S v in float64
        return g_c.mT @ (g_c @ v) + RHO * (k_z @ v)

    a = torch.cholesky_solve(cross, factor)
    residual = cross - exact(a)
    step = torch.cholesky_solve(residual, factor)
    direction, rz = step.clone(), (residual * step).sum(0)
    values = []
    for it in range(1, max(PCG_ITERATIONS) + 1):  # one conjugate-gradient run per column
        s_dir = exact(direction)
        live = rz > 0  # a column whose residual is exactly zero has converged
        alpha = torch.where(live, rz / (direction * s_dir).sum(0), 0.0)
        a, residual = a + direction * alpha, residual - s_dir * alpha
        step = torch.cholesky_solve(residual, factor)
        rz_next = (residual * step).sum(0)
        direction = step + direction * torch.where(live, rz_next / rz, 0.0)
        rz = rz_next
        if it in PCG_ITERATIONS:
            values.append(float((cross * a).sum()))
    return shift, values


def covtype_table(data_home: str) -> None:
    """Float32-rounded kernels against float64 NysDI on CovType training rows."""

    from kernel_layers.data import CovTypeDataModule

    dm = CovTypeDataModule(data_home, download=False, val_fraction=0.0)
    dm.setup()
    features, targets = dm.train_features().double(), dm.train_targets()
    jitter = default_jitter(torch.float32)  # the float32 layer's, as in di_step.py
    print()
    pcg = " | ".join(f"float32 Gram + PCG {n} it. rel. err" for n in PCG_ITERATIONS)
    print(
        "| gamma | B | J | seed | float64 | float32 (library) rel. err | float32 kernels rel. err "
        f"| float32 Gram shift | {pcg} |"
    )
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(PCG_ITERATIONS))
    for gamma in (0.01, 0.1, 0.974):
        for b, j in ((1000, 500), (2000, 1000)):
            for seed in range(3):
                gen = torch.Generator().manual_seed(seed)
                rows = torch.randperm(len(features), generator=gen)[: b + j]
                x, labels, z = features[rows[:b]], targets[rows[:b]], features[rows[b:]]
                lib = functools.partial(
                    nystrom_discriminant_information,
                    gamma=gamma,
                    jitter=jitter,
                    num_classes=dm.num_classes,
                )
                ref = lib(x, labels, z).item()
                lib32 = lib(x.float(), labels, z.float())
                rounded = rounded_kernels(x, labels, z, gamma, jitter=jitter)
                shift, mixed = float32_gram_pcg(x, labels, z, gamma, jitter)
                rel = [abs(v - ref) / ref for v in (lib32.item(), rounded, *mixed)]
                cells = [f"{r:.1e}" for r in rel]
                cells.insert(2, f"{shift:.0e}")
                print(f"| {gamma} | {b} | {j} | {seed} | {ref:.6f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-home", help="CovType folder (covtype.data.gz): a second table")
    args = parser.parse_args()
    x_np, labels_np = load_digits(return_X_y=True)
    x64, labels = torch.tensor(x_np / 16.0), torch.tensor(labels_np)
    print(
        "| gamma | n | float64 | pinv rel. err | float32 (library) rel. err "
        "| float32 Gram rel. err | float32 kernels rel. err |"
    )
    print("|---|---|---|---|---|---|---|")
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
            rounded = rounded_kernels(x64, labels, z64, gamma)
            rel = [abs(v - ref) / ref for v in (pinv, lib32, gram32, rounded)]
            print(f"| {gamma} | {n} | {ref:.8f} | " + " | ".join(f"{r:.1e}" for r in rel) + " |")
    if args.data_home:
        covtype_table(args.data_home)


if __name__ == "__main__":
    main()
