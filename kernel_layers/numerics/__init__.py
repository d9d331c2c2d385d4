"""Numerically guarded linear algebra and the dtype rules of the kernel matrices and
DI solves (no module of this package imports Lightning)."""
