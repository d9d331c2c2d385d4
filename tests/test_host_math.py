"""NumPy's float32 ``cos`` / ``sin`` in place of PyTorch's (kernel_layers._host_math)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import kernel_layers._host_math as host_math
from kernel_layers import FourierLayer, discriminant_information
from kernel_layers._host_math import cos, numpy_trig_preferred, sin


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """PyTorch on one intra-op thread (where NumPy's loops serve), restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def numpy_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """NumPy's loops preferred whatever this CPU is and whatever the size, and each call
    to them recorded."""
    monkeypatch.setattr(host_math, "numpy_trig_preferred", lambda: True)
    monkeypatch.setattr(host_math, "HOST_TRIG_MIN_SIZE", 0)
    calls: list[str] = []

    class CountingNumpy:
        def __getattr__(self, name: str) -> object:
            return getattr(np, name)

        @staticmethod
        def cos(*args: object, **kwargs: object) -> object:
            calls.append("cos")
            return np.cos(*args, **kwargs)

        @staticmethod
        def sin(*args: object, **kwargs: object) -> object:
            calls.append("sin")
            return np.sin(*args, **kwargs)

    monkeypatch.setattr(host_math, "np", CountingNumpy())
    return calls


def _ulps(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Errors of float32 ``values`` in units in the last place of the float64 reference."""
    spacing = np.spacing(np.abs(reference).astype(np.float32)).astype(np.float64)
    return np.abs(values.astype(np.float64) - reference) / spacing


@pytest.mark.parametrize("bound", [3.5, 100.0, 1e5])
def test_cos_and_sin_are_faithful_on_rows_and_strided_views(
    numpy_calls: list[str], bound: float
) -> None:
    gen = torch.Generator().manual_seed(0)
    wide = torch.empty(400, 130).uniform_(-bound, bound, generator=gen)
    x = wide[:, :120]  # a row-strided view
    for ours_fn, numpy_fn in ((cos, np.cos), (sin, np.sin)):
        ours = ours_fn(x)
        assert ours.shape == x.shape and ours.is_contiguous()
        reference = numpy_fn(x.numpy().astype(np.float64))
        assert _ulps(ours.numpy(), reference).max() < 2.0
        assert np.abs(ours.numpy() - reference).max() < 1.2e-7
    assert numpy_calls == ["cos", "sin"]


def test_special_values_are_as_pytorchs_without_warnings(numpy_calls: list[str]) -> None:
    x = torch.tensor([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e-30], dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's "invalid value" warning would raise
        ours = [cos(x), sin(x)]
    for got, expected in zip(ours, (torch.cos(x), torch.sin(x)), strict=True):
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=0.0, atol=2e-7)
    assert len(numpy_calls) == 2


def test_what_numpy_does_not_serve_stays_with_pytorch(numpy_calls: list[str]) -> None:
    x = torch.linspace(-3.0, 3.0, 11)
    cos(x)
    assert numpy_calls == ["cos"]
    torch.testing.assert_close(cos(x.double()), torch.cos(x.double()), rtol=0.0, atol=0.0)
    tracked = x.clone().requires_grad_(True) * 1.0
    assert "Cos" in type(cos(tracked).grad_fn).__name__  # autograd's own cos
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is deprecated
        traced = torch.jit.trace(cos, (x,), check_trace=False)
    other = torch.linspace(0.0, 1.0, 11)
    torch.testing.assert_close(traced(other), torch.cos(other))  # not a baked constant
    torch.set_num_threads(2)  # PyTorch's cos runs on both threads: as fast
    cos(x)
    assert numpy_calls == ["cos"]


def test_small_tensors_stay_with_pytorch(
    monkeypatch: pytest.MonkeyPatch, numpy_calls: list[str]
) -> None:
    """Below ``HOST_TRIG_MIN_SIZE`` elements NumPy's fixed cost outweighs its speed."""
    monkeypatch.setattr(host_math, "HOST_TRIG_MIN_SIZE", 1 << 14)
    small, large = torch.rand(127, 129), torch.rand(128, 128)  # 16383 and 16384 values
    torch.testing.assert_close(sin(small), torch.sin(small), rtol=0.0, atol=0.0)
    assert numpy_calls == []
    sin(large)
    assert numpy_calls == ["sin"]


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        (("X86_V4", "X86_V4"), True),
        (("AVX512F", "AVX512_SKX"), True),
        (("X86_V4", "X86_V3"), False),
        (("AVX2", "AVX2"), False),
        (("ASIMD", "ASIMD"), False),
    ],
)
def test_numpy_is_preferred_where_both_loops_are_avx512(
    monkeypatch: pytest.MonkeyPatch, targets: tuple[str, str], expected: bool
) -> None:
    import numpy.lib.introspect as introspect

    report = {name: {"ff": {"current": t}} for name, t in zip(("cos", "sin"), targets, strict=True)}
    monkeypatch.setattr(introspect, "opt_func_info", lambda **_: report)
    numpy_trig_preferred.cache_clear()
    try:
        assert numpy_trig_preferred() is expected
    finally:
        numpy_trig_preferred.cache_clear()


@pytest.mark.parametrize("report", [{}, {"cos": {}}, None])
def test_numpy_is_declined_when_its_introspection_says_nothing_usable(
    monkeypatch: pytest.MonkeyPatch, report: dict | None
) -> None:
    import numpy.lib.introspect as introspect

    def introspection(**_: object) -> dict:
        if report is None:
            raise TypeError("changed")
        return report

    monkeypatch.setattr(introspect, "opt_func_info", introspection)
    numpy_trig_preferred.cache_clear()
    try:
        assert numpy_trig_preferred() is False
    finally:
        numpy_trig_preferred.cache_clear()


def test_a_fourier_di_step_agrees_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The float32 Fourier layer's DI and gradients with NumPy's loops and with
    PyTorch's: both within float32 rounding of the float64 step."""
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(300, 12, generator=gen)
    labels = torch.randint(0, 4, (300,), generator=gen)
    results = {}
    for dtype, preferred in ((torch.float64, False), (torch.float32, True), (torch.float32, False)):
        monkeypatch.setattr(host_math, "numpy_trig_preferred", lambda p=preferred: p)
        layer = FourierLayer(12, 80, gamma=0.5, seed=0, dtype=torch.float64).to(dtype)
        di = discriminant_information(layer(x.to(dtype)), labels, num_classes=4)
        di.backward()
        results[(dtype, preferred)] = (di.item(), layer.frequencies.grad.double())
    di64, grad64 = results[(torch.float64, False)]
    for key in ((torch.float32, True), (torch.float32, False)):
        di32, grad32 = results[key]
        assert abs(di32 - di64) / di64 < 1e-5
        assert float((grad32 - grad64).abs().max() / grad64.abs().max()) < 1e-3


def test_functorch_transforms_fall_back_to_pytorch(numpy_calls: list[str]) -> None:
    """Under ``torch.func`` transforms the tensors are wrappers without NumPy storage."""
    x = torch.rand(3, 40, 50)
    torch.testing.assert_close(torch.func.vmap(cos)(x), torch.cos(x), rtol=0.0, atol=0.0)
    grad = torch.func.grad(lambda t: sin(t).sum())(x[0])
    torch.testing.assert_close(grad, torch.cos(x[0]))
    assert numpy_calls == []
