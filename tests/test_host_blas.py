"""The host BLAS / LAPACK kernels behind `lower_gram` and DI's Cholesky on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from kernel_layers._host_blas import HOST_SYRK_MIN_WORK, host_lower_gram
from kernel_layers._linalg import lower_gram


@pytest.fixture(autouse=True)
def _one_thread():
    """The host kernels serve single-threaded PyTorch only."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _reference(a: torch.Tensor) -> np.ndarray:
    """``a^T a`` in float64 numpy."""
    wide = a.detach().double().numpy()
    return wide.T @ wide


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["row", "column", "strided"])
def test_host_lower_gram_is_the_exact_lower_triangle(dtype: torch.dtype, layout: str) -> None:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(700, 300, dtype=dtype, generator=gen)
    a = {
        "row": base,
        "column": base.mT.contiguous().mT,  # column-major [700, 300]
        "strided": torch.randn(700, 600, dtype=dtype, generator=gen)[:, ::2],
    }[layout]
    gram = host_lower_gram(a)
    assert gram is not None and gram.dtype == dtype and gram.shape == (300, 300)
    ref = _reference(a)
    lower = np.tril(np.ones_like(ref, dtype=bool))
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    scale = np.abs(ref).max()
    np.testing.assert_allclose(gram.numpy()[lower] / scale, ref[lower] / scale, atol=tol)
    assert np.all(gram.numpy()[~lower] == 0)
    # Row-major, whatever the input's layout: PyTorch's Cholesky runs faster on it.
    assert gram.is_contiguous()


def test_lower_gram_transposed_uses_the_host_blas_without_a_copy() -> None:
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(400, 900, dtype=torch.float64, generator=gen)  # a a^T: [400, 400]
    gram = lower_gram(a, transpose=True)
    wide = a.numpy()
    ref = wide @ wide.T
    lower = np.tril(np.ones_like(ref, dtype=bool))
    np.testing.assert_allclose(gram.numpy()[lower], ref[lower], rtol=1e-12, atol=1e-9)


def test_host_lower_gram_declines_what_it_cannot_serve() -> None:
    a = torch.randn(700, 300, dtype=torch.float64)
    assert host_lower_gram(a.requires_grad_(True)) is None  # autograd would lose the graph
    with torch.no_grad():
        assert host_lower_gram(a) is not None  # no graph to lose
    assert host_lower_gram(torch.randn(700, 300, dtype=torch.float16)) is None
    assert host_lower_gram(torch.randn(700, 300, dtype=torch.complex64)) is None
    small = torch.randn(10, 20, dtype=torch.float64)
    assert small.shape[0] * small.shape[1] ** 2 < HOST_SYRK_MIN_WORK
    assert host_lower_gram(small) is None


def test_lower_gram_stays_differentiable_when_gradients_are_needed() -> None:
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(500, 300, dtype=torch.float64, generator=gen, requires_grad=True)
    weights = torch.randn(300, 300, dtype=torch.float64, generator=gen).tril()
    (grad,) = torch.autograd.grad((lower_gram(a) * weights).sum(), a)
    # d/da sum(W * a^T a) = a (W + W^T), W lower-triangular: only the lower triangle counts.
    ref = a.detach().numpy() @ (weights + weights.mT).numpy()
    np.testing.assert_allclose(grad.numpy(), ref, rtol=1e-10, atol=1e-9)


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_host_lower_gram_restores_the_blas_thread_pools() -> None:
    before = _blas_threads()
    assert host_lower_gram(torch.randn(700, 300, dtype=torch.float64)) is not None
    assert _blas_threads() == before


def test_host_kernels_stand_aside_when_pytorch_runs_several_threads(
    scipy_potrf: None, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    from kernel_layers import _host_blas

    def refuse(matrix: torch.Tensor) -> None:
        raise AssertionError("SciPy's potrf called next to PyTorch's threads")

    monkeypatch.setattr(_host_blas, "_scipy_cholesky", refuse)
    a = torch.randn(700, 300, dtype=torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # two thread pools would oversubscribe the cores
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    assert host_lower_gram(a) is None
    gram = lower_gram(a)  # PyTorch's block-triangular product instead
    lower = np.tril(np.ones((300, 300), dtype=bool))
    np.testing.assert_allclose(gram.numpy()[lower], _reference(a)[lower], rtol=1e-12, atol=1e-9)
    # PyTorch's own LAPACK shares its thread pool: it still serves.
    s = _spd(300, torch.float64, 1)
    result = _host_blas.host_cholesky_ex(s)
    assert result is not None and int(result[1]) == 0
    np.testing.assert_allclose(result[0].numpy(), np.linalg.cholesky(s.numpy()), rtol=1e-10)


def test_the_thread_controller_sees_scipys_blas_in_a_fresh_process() -> None:
    import subprocess
    import sys

    code = (
        "import torch; torch.set_num_threads(1)\n"
        "from kernel_layers._host_blas import _thread_controller, host_lower_gram\n"
        "assert host_lower_gram(torch.randn(700, 300, dtype=torch.float64)) is not None\n"
        "ours = {lib.filepath for lib in _thread_controller().lib_controllers}\n"
        "import scipy.linalg\n"
        "from threadpoolctl import ThreadpoolController\n"
        "every = {lib.filepath for lib in ThreadpoolController().lib_controllers}\n"
        "print(sorted(every - ours))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # no pool loaded that the limit does not reach


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_lower_gram_leaves_cuda_tensors_to_pytorch() -> None:
    assert host_lower_gram(torch.randn(700, 300, device="cuda")) is None


@pytest.fixture
def scipy_potrf(monkeypatch: pytest.MonkeyPatch) -> None:
    """SciPy's Cholesky taken whatever this CPU prefers (the tests check its results)."""
    monkeypatch.setattr("kernel_layers._host_blas.host_cholesky_preferred", lambda: True)


@pytest.fixture(params=["scipy", "pytorch"])
def host_potrf(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each LAPACK route of `host_cholesky_ex` in turn: SciPy's, PyTorch's own."""
    from kernel_layers._host_blas import pytorch_potrf

    if request.param == "pytorch" and pytorch_potrf(torch.float64) is None:
        pytest.skip("PyTorch's LAPACK is not reachable on this platform")
    preferred = request.param == "scipy"
    monkeypatch.setattr("kernel_layers._host_blas.host_cholesky_preferred", lambda: preferred)
    return request.param


@pytest.mark.parametrize(
    ("capability", "vendor", "scipy"),
    [
        ("AVX512", "GenuineIntel", False),
        ("AVX512", "", False),
        ("AVX512", "AuthenticAMD", True),
        ("AVX2", "GenuineIntel", True),
        ("AVX2", "AuthenticAMD", True),
    ],
)
def test_scipys_cholesky_serves_all_but_intel_avx512_cpus(
    monkeypatch: pytest.MonkeyPatch, capability: str, vendor: str, scipy: bool
) -> None:
    from kernel_layers import _host_blas

    monkeypatch.setattr(_host_blas, "cpu_vendor", lambda: vendor)

    calls: list[int] = []
    original = _host_blas._scipy_cholesky

    def spy(matrix: torch.Tensor) -> tuple[torch.Tensor, int]:
        calls.append(matrix.shape[0])
        return original(matrix)

    monkeypatch.setattr(_host_blas, "_scipy_cholesky", spy)
    _host_blas.host_cholesky_preferred.cache_clear()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    try:
        assert _host_blas.host_cholesky_preferred() is scipy
        result = _host_blas.host_cholesky_ex(_spd(300, torch.float64, 1))
        reachable = _host_blas.pytorch_potrf(torch.float64) is not None
        assert (result is not None) is (scipy or reachable)
        assert calls == ([300] if scipy else [])
    finally:
        _host_blas.host_cholesky_preferred.cache_clear()


def _spd(order: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(order + 50, order, dtype=torch.float64, generator=gen)
    return (a.mT @ a + torch.eye(order, dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["row", "column"])
def test_host_cholesky_matches_numpy_and_zeroes_the_upper_triangle(
    dtype: torch.dtype, layout: str, host_potrf: str
) -> None:
    from kernel_layers._host_blas import host_cholesky_ex

    s = _spd(300, dtype, 6)
    s = s if layout == "row" else s.mT.contiguous().mT
    result = host_cholesky_ex(s)
    assert result is not None
    factor, info = result
    assert int(info) == 0 and info.dtype == torch.int32 and factor.dtype == dtype
    ref = np.linalg.cholesky(s.double().numpy())
    tol = 1e-10 if dtype == torch.float64 else 1e-3
    np.testing.assert_allclose(factor.double().numpy(), ref, rtol=tol, atol=tol)
    assert np.all(np.triu(factor.numpy(), 1) == 0)


@pytest.mark.parametrize("layout", ["row", "column", "strided"])
def test_host_cholesky_reads_the_lower_triangle_only(layout: str, host_potrf: str) -> None:
    from kernel_layers._host_blas import host_cholesky_ex

    s = _spd(300, torch.float64, 10)
    ref = np.linalg.cholesky(s.numpy())
    junk = s + torch.triu(torch.full_like(s, float("nan")), 1)  # NaN above the diagonal
    junk = {
        "row": junk,
        "column": junk.mT.contiguous().mT,
        "strided": torch.cat([junk, junk], dim=1)[:, :300],
    }[layout]
    result = host_cholesky_ex(junk)
    assert result is not None and int(result[1]) == 0
    np.testing.assert_allclose(result[0].numpy(), ref, rtol=1e-10, atol=1e-10)


def test_host_cholesky_reports_failures_like_pytorch(host_potrf: str) -> None:
    from kernel_layers._host_blas import host_cholesky_ex

    for order in (3, 150, 299):  # not positive definite at this (0-based) row
        s = _spd(300, torch.float64, 7)
        s[order, order] = -1e6
        result = host_cholesky_ex(s)
        assert result is not None
        assert int(result[1]) == int(torch.linalg.cholesky_ex(s).info) == order + 1
    s = _spd(300, torch.float64, 8)
    s[120, 120] = float("nan")  # the host routine itself reports success on NaN
    result = host_cholesky_ex(s)
    assert result is not None
    assert int(result[1]) == 121 == int(torch.linalg.cholesky_ex(s).info)


def test_host_cholesky_declines_small_and_differentiable_inputs(host_potrf: str) -> None:
    from kernel_layers._host_blas import HOST_CHOLESKY_MIN_SIZE, host_cholesky_ex

    assert host_cholesky_ex(_spd(HOST_CHOLESKY_MIN_SIZE - 1, torch.float64, 9)) is None
    assert host_cholesky_ex(_spd(300, torch.float64, 9).requires_grad_(True)) is None
    assert host_cholesky_ex(torch.ones(300, 301, dtype=torch.float64)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_overwrite_factorises_in_place_and_only_when_allowed(
    dtype: torch.dtype, host_potrf: str
) -> None:
    from kernel_layers._host_blas import host_cholesky_ex

    s = _spd(300, dtype, 11)
    kept = s.clone()
    result = host_cholesky_ex(s)
    assert result is not None and torch.equal(s, kept)  # the input is left alone
    again = host_cholesky_ex(s, overwrite=True)
    assert again is not None and torch.equal(again[0], result[0])
    if host_potrf == "pytorch":  # SciPy's routine returns a new array either way
        assert again[0].data_ptr() == s.data_ptr()
    else:
        assert torch.equal(s, kept)
    column_major = kept.mT.contiguous().mT  # not row-major: copied, never overwritten
    third = host_cholesky_ex(column_major, overwrite=True)
    assert third is not None and torch.equal(column_major, kept)
    np.testing.assert_allclose(third[0].numpy(), result[0].numpy(), rtol=1e-5, atol=1e-5)


def test_cholesky_ex_factorises_in_place_through_the_wrapper(host_potrf: str) -> None:
    from kernel_layers._linalg import cholesky_ex

    s = _spd(300, torch.float64, 12)
    ref = np.linalg.cholesky(s.numpy())
    factor, info = cholesky_ex(s.clone(), overwrite=True)
    assert int(info) == 0
    np.testing.assert_allclose(factor.numpy(), ref, rtol=1e-10, atol=1e-10)
    assert np.all(np.triu(factor.numpy(), 1) == 0)


def test_lapack_integers_read_alike_in_both_integer_abis() -> None:
    from kernel_layers._host_blas import _lapack_int

    word = bytes(_lapack_int(300))
    assert int.from_bytes(word[:4], "little", signed=True) == 300  # LP64: 32 bits
    assert int.from_bytes(word, "little", signed=True) == 300  # ILP64: 64 bits


def test_pytorch_potrf_refuses_a_routine_that_fails_its_self_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernel_layers import _host_blas

    def does_nothing(uplo: bytes, order: object, a: object, lda: object, info: object, n: int):
        return None  # leaves the matrix as it is and reports success

    assert not _host_blas._passes_self_test(does_nothing, torch.float64)
    # A routine that factorises but never reports a failure is refused too.
    real = _host_blas.pytorch_potrf(torch.float64)
    if real is not None:
        assert _host_blas._passes_self_test(real, torch.float64)

        def hides_failures(uplo, order, a, lda, info, n):  # type: ignore[no-untyped-def]
            real(uplo, order, a, lda, info, n)
            info[0] = 0

        assert not _host_blas._passes_self_test(hides_failures, torch.float64)


@pytest.mark.parametrize("where", ["platform", "library"])
def test_without_pytorchs_lapack_the_cholesky_falls_back_to_pytorch(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    from kernel_layers import _host_blas
    from kernel_layers._linalg import cholesky_ex

    _host_blas.pytorch_potrf.cache_clear()
    if where == "platform":
        monkeypatch.setattr(_host_blas.sys, "platform", "darwin")
    else:
        monkeypatch.setattr(_host_blas, "_PYTORCH_LIBRARY", "/nonexistent/libtorch_cpu.so")
    monkeypatch.setattr(_host_blas, "host_cholesky_preferred", lambda: False)
    try:
        assert _host_blas.pytorch_potrf(torch.float64) is None
        s = _spd(300, torch.float64, 13)
        assert _host_blas.host_cholesky_ex(s) is None
        factor, info = cholesky_ex(s)  # torch.linalg.cholesky_ex
        assert int(info) == 0
        np.testing.assert_allclose(factor.numpy(), np.linalg.cholesky(s.numpy()), rtol=1e-10)
    finally:
        _host_blas.pytorch_potrf.cache_clear()


def test_a_refused_argument_falls_back_to_pytorchs_cholesky(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernel_layers import _host_blas
    from kernel_layers._linalg import cholesky_ex

    if _host_blas.pytorch_potrf(torch.float64) is None:
        pytest.skip("PyTorch's LAPACK is not reachable on this platform")
    monkeypatch.setattr(_host_blas, "host_cholesky_preferred", lambda: False)
    monkeypatch.setattr(_host_blas, "_call_potrf", lambda routine, matrix: -4)
    s = _spd(300, torch.float64, 14)
    assert _host_blas.host_cholesky_ex(s) is None
    factor, info = cholesky_ex(s.clone(), overwrite=True)  # torch.linalg.cholesky_ex
    assert int(info) == 0
    np.testing.assert_allclose(factor.numpy(), np.linalg.cholesky(s.numpy()), rtol=1e-10)


def test_an_unclean_in_place_factor_keeps_the_upper_triangle(host_potrf: str) -> None:
    from kernel_layers._linalg import cholesky_ex

    s = _spd(300, torch.float64, 13)
    ref = np.linalg.cholesky(s.numpy())
    upper = torch.triu(s, 1)
    factor, info = cholesky_ex(s, overwrite=True, clean=False)
    assert int(info) == 0
    np.testing.assert_allclose(np.tril(factor.numpy()), ref, rtol=1e-10, atol=1e-10)
    if host_potrf == "pytorch":  # overwritten: S's own upper triangle is still there
        assert factor.data_ptr() == s.data_ptr()
        assert torch.equal(torch.triu(factor, 1), upper)
    else:  # SciPy's routine returns a new, clean array
        assert np.all(np.triu(factor.numpy(), 1) == 0)


def test_robust_cholesky_in_place_builds_once_and_again_only_to_retry(host_potrf: str) -> None:
    from kernel_layers._linalg import robust_cholesky_in_place

    s = _spd(300, torch.float64, 14)
    builds: list[int] = []

    def build() -> torch.Tensor:
        builds.append(1)
        return s.clone()

    factor = robust_cholesky_in_place(build, owner="t")
    assert len(builds) == 1
    np.testing.assert_allclose(
        np.tril(factor.numpy()), np.linalg.cholesky(s.numpy()), rtol=1e-10, atol=1e-10
    )
    singular = torch.ones(300, 300, dtype=torch.float64)  # rank 1: needs the jitter

    def build_singular() -> torch.Tensor:
        builds.append(1)
        return singular.clone()

    builds.clear()
    with pytest.warns(RuntimeWarning, match="t: Cholesky factorisation failed; succeeded after"):
        factor = robust_cholesky_in_place(build_singular, owner="t")
    assert len(builds) == 2
    assert torch.isfinite(factor).all()
    residual = factor @ factor.mT - singular
    assert float(residual.abs().max()) < 1e-3


def test_robust_cholesky_in_place_records_a_failure_under_deferred_checks() -> None:
    from kernel_layers._deferred import DeferredChecks, deferred_checks
    from kernel_layers._linalg import robust_cholesky_in_place

    bad = -torch.eye(300, dtype=torch.float64)
    with deferred_checks(DeferredChecks()) as checks:
        robust_cholesky_in_place(bad.clone, owner="t")  # no host read, no retry
    failure = checks.first_failure()
    assert isinstance(failure, RuntimeError)
    assert str(failure).startswith("t: Cholesky factorisation of a [300, 300] matrix failed")


def test_cpu_vendor_reads_cpuinfo(tmp_path: Path) -> None:
    from kernel_layers._host_blas import cpu_vendor

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert cpu_vendor(str(info)) == "AuthenticAMD"
    info.write_text("processor\t: 0\nCPU implementer\t: 0x41\n")  # no vendor line
    assert cpu_vendor(str(info)) == ""
    assert cpu_vendor(str(tmp_path / "missing")) == ""
