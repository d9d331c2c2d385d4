"""Inference export of both layers: torch.compile, torch.export, TorchScript trace, ONNX.

Eval-mode layers, CPU, outputs compared with eager. ``torch.compile`` uses the
``aot_eager`` backend (the full AOTAutograd tracing path without inductor's C++ code
generation, which would take minutes on a 2-core CI machine); the robust Cholesky's
data-dependent retry is a graph break under compile and is skipped under
``torch.export`` (see :func:`kernel_layers._linalg.robust_cholesky`).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from kernel_layers import FourierLayer, NystromLayer
from kernel_layers.training.backbones import SmallCNN

LAYERS = {
    "fourier": lambda: FourierLayer(6, 10, seed=0),
    "fourier_ard_cossin": lambda: FourierLayer(6, 10, ard=True, features="cossin", seed=0),
    "nystrom": lambda: NystromLayer(6, 10, gamma=0.5, seed=0),
    "nystrom_rank": lambda: NystromLayer(6, 10, gamma=0.5, rank=4, seed=0),
}
ATOL = 1e-5


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.rand(16, 6, generator=gen), torch.rand(16, 6, generator=gen)


@pytest.fixture(params=sorted(LAYERS))
def layer(request: pytest.FixtureRequest) -> nn.Module:
    return LAYERS[request.param]().eval()


@torch.no_grad()
def test_torch_compile_matches_eager(layer: nn.Module) -> None:
    x, x2 = _inputs()
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=False)
    torch.testing.assert_close(compiled(x), layer(x), atol=ATOL, rtol=0)
    torch.testing.assert_close(compiled(x2), layer(x2), atol=ATOL, rtol=0)


@torch.no_grad()
def test_torch_export_matches_eager(layer: nn.Module) -> None:
    x, x2 = _inputs()
    program = torch.export.export(layer, (x,))
    exported = program.module()
    torch.testing.assert_close(exported(x), layer(x), atol=ATOL, rtol=0)
    torch.testing.assert_close(exported(x2), layer(x2), atol=ATOL, rtol=0)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::FutureWarning")
@torch.no_grad()
def test_torchscript_trace_matches_eager(layer: nn.Module) -> None:
    x, x2 = _inputs()
    traced = torch.jit.trace(layer, (x,))
    torch.testing.assert_close(traced(x), layer(x), atol=ATOL, rtol=0)
    torch.testing.assert_close(traced(x2), layer(x2), atol=ATOL, rtol=0)


@torch.no_grad()
def test_backbone_with_kernel_layer_exports() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(SmallCNN(1, 8, width=4), NystromLayer(8, 12, gamma=0.5)).eval()
    x = torch.rand(4, 1, 12, 12)
    exported = torch.export.export(model, (x,)).module()
    torch.testing.assert_close(exported(x), model(x), atol=ATOL, rtol=0)


@pytest.mark.skipif(
    importlib.util.find_spec("onnx") is None, reason="the onnx package is not installed"
)
@torch.no_grad()
def test_onnx_export_runs(layer: nn.Module, tmp_path) -> None:  # pragma: no cover - optional
    x, _ = _inputs()
    torch.onnx.export(layer, (x,), str(tmp_path / "layer.onnx"), dynamo=True)
    assert (tmp_path / "layer.onnx").stat().st_size > 0
