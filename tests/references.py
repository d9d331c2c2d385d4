"""Independent float64 NumPy references (no torch, no shared code with the library)."""

from __future__ import annotations

import numpy as np


def onehot_unit(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """One-hot ``[B, L]`` with each present column scaled to unit norm."""
    y = np.eye(num_classes)[np.asarray(labels)]
    counts = y.sum(0)
    return y / np.sqrt(np.where(counts > 0, counts, 1.0))


def di(features: np.ndarray, y: np.ndarray, rho: float) -> float:
    """``tr((Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y Y^T Phi_c)`` with an explicit inverse."""
    phi = np.asarray(features, dtype=np.float64)
    pc = phi - phi.mean(0)
    s_inv = np.linalg.inv(pc.T @ pc + rho * np.eye(pc.shape[1]))
    return float(np.trace(s_inv @ pc.T @ y @ y.T @ pc))


def di_gradient(features: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """Gradient of :func:`di` by central finite differences (float64)."""
    phi = np.asarray(features, dtype=np.float64)
    grad = np.zeros_like(phi)
    h = 1e-6
    for idx in np.ndindex(*phi.shape):
        up, down = phi.copy(), phi.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (di(up, y, rho) - di(down, y, rho)) / (2 * h)
    return grad


def gaussian(x: np.ndarray, z: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(-gamma ||x - z||^2)`` by broadcasting."""
    d = ((np.asarray(x)[:, None, :] - np.asarray(z)[None, :, :]) ** 2).sum(-1)
    return np.exp(-gamma * d)


def laplacian(x: np.ndarray, z: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(-gamma ||x - z||_1)`` by broadcasting."""
    d = np.abs(np.asarray(x)[:, None, :] - np.asarray(z)[None, :, :]).sum(-1)
    return np.exp(-gamma * d)


def nysdi(g: np.ndarray, k_z: np.ndarray, y: np.ndarray, rho: float) -> float:
    """Eq. (10) of the DI paper with a pseudo-inverse."""
    gc = g - g.mean(0)
    yc = y - y.mean(0)
    mat = np.linalg.pinv(gc.T @ gc + rho * k_z, rcond=1e-13, hermitian=True)
    return float(np.trace(mat @ gc.T @ yc @ yc.T @ gc))


def ridge_residual(features: np.ndarray, y: np.ndarray, rho: float) -> float:
    """Minimum of ``||Y_c - Phi_c W||^2 + rho ||W||^2`` via ``lstsq`` on an augmented system."""
    pc = features - features.mean(0)
    yc = y - y.mean(0)
    j = pc.shape[1]
    a = np.vstack([pc, np.sqrt(rho) * np.eye(j)])
    b = np.vstack([yc, np.zeros((j, yc.shape[1]))])
    w = np.linalg.lstsq(a, b, rcond=None)[0]
    r = yc - pc @ w
    return float((r * r).sum() + rho * (w * w).sum())


# ---------------------------------------------------------------- kernel matrices
C_SHIFT = 0.5  # a non-default skewedness, to exercise kernel_params


def _pairs(x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(x)[:, None, :], np.asarray(z)[None, :, :]


def ref_cauchy(x: np.ndarray, z: np.ndarray, gamma: float) -> np.ndarray:
    a, b = _pairs(x, z)
    return np.prod(1.0 / (1.0 + gamma * (a - b) ** 2), axis=-1)


def ref_skewed_chi2(x: np.ndarray, z: np.ndarray, gamma: float, c: float = 1.0) -> np.ndarray:
    """scikit-learn's SkewedChi2Sampler kernel ``prod 2 sqrt(a) sqrt(b) / (a + b)`` on
    ``a = (x + c)^gamma``, ``b = (z + c)^gamma`` (gamma = 1: scikit-learn's kernel)."""
    a, b = _pairs(x, z)
    a, b = (a + c) ** gamma, (b + c) ** gamma
    return np.prod(2.0 * np.sqrt(a) * np.sqrt(b) / (a + b), axis=-1)


def ref_skewed_intersection(
    x: np.ndarray, z: np.ndarray, gamma: float, c: float = 1.0
) -> np.ndarray:
    """``prod min(sqrt(a/b), sqrt(b/a))^(2 gamma)`` (gamma = 1/2: the classic kernel)."""
    a, b = _pairs(x, z)
    a, b = a + c, b + c
    return np.prod(np.minimum(np.sqrt(a / b), np.sqrt(b / a)) ** (2.0 * gamma), axis=-1)


def _sk(name: str):
    from sklearn.metrics import pairwise

    return getattr(pairwise, name)


#: kernel name -> (reference(x, z, gamma, **params), kernel_params used in the tests)
KERNELS = {
    "gaussian": (lambda x, z, g: _sk("rbf_kernel")(x, z, gamma=g), {}),
    "laplacian": (lambda x, z, g: _sk("laplacian_kernel")(x, z, gamma=g), {}),
    "cauchy": (ref_cauchy, {}),
    "skewed_chi2": (ref_skewed_chi2, {"c": C_SHIFT}),
    "skewed_intersection": (ref_skewed_intersection, {"c": C_SHIFT}),
    "polynomial": (
        lambda x, z, g, degree, coef0: _sk("polynomial_kernel")(
            x, z, degree=degree, gamma=g, coef0=coef0
        ),
        {"degree": 2, "coef0": 0.5},
    ),
    "linear": (lambda x, z, g: _sk("linear_kernel")(x, z), {}),
    "chi2": (lambda x, z, g: _sk("chi2_kernel")(x, z, gamma=g), {}),
}


def di_closed_gradient(features: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """Gradient of :func:`di` in closed form, ``2 (Y_c - Phi_c A) A^T`` with ``A =
    (Phi_c^T Phi_c + rho I)^-1 Phi_c^T Y_c`` (float64, by ``np.linalg.solve``)."""
    phi = np.asarray(features, dtype=np.float64)
    pc, yc = phi - phi.mean(0), y - y.mean(0)
    a = np.linalg.solve(pc.T @ pc + rho * np.eye(pc.shape[1]), pc.T @ yc)
    return 2.0 * (yc - pc @ a) @ a.T
