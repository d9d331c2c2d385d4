"""Inference export of both layers: ONNX (run in onnxruntime), torch.export, torch.compile
(full graph, forward and backward), TorchScript trace, and a clear refusal of
``torch.jit.script``.

Eval-mode layers on the CPU, outputs compared with eager PyTorch. ``torch.compile`` uses
the ``aot_eager`` backend: the full Dynamo + AOTAutograd tracing path without inductor's
C++ code generation, which would take minutes on a 2-core CI machine.
"""

from __future__ import annotations

import copy
import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from kernel_layers import (
    EnsembleNystrom,
    FastfoodLayer,
    FourierLayer,
    KernelFeatureMap,
    NystromLayer,
    available_kernels,
)
from kernel_layers.training.backbones import SmallCNN
from kernel_layers.training.export import export_onnx
from kernel_layers.training.predictor import NO_CLASS, Predictor

#: Every layer configuration exported below: name -> factory.
LAYERS = {
    "fourier": lambda: FourierLayer(6, 10, seed=0),
    "fourier_ard_cossin": lambda: FourierLayer(6, 10, ard=True, features="cossin", seed=0),
    "nystrom": lambda: NystromLayer(6, 10, gamma=0.5, seed=0),
    "nystrom_rank": lambda: NystromLayer(6, 10, gamma=0.5, rank=4, seed=0),
    "nystrom_ard": lambda: _nystrom_ard(),
}
#: Nystrom settings per kernel with a well-conditioned K_Z (float32 round-off in the
#: features stays below the bar): (out_features, gamma).
NYSTROM_SETTINGS = {"linear": (4, 1.0), "polynomial": (6, 0.5), "skewed_chi2": (8, 4.0)}
#: The export bar: float32 outputs within this of PyTorch.
ONNX_ATOL = 1e-5
ATOL = 1e-5
OPSET = 18


def _nystrom_ard() -> NystromLayer:
    """An ARD Nystrom layer with blocks and bandwidths away from 1."""
    layer = NystromLayer(6, 10, gamma=0.5, ard=True, blocks=[[0, 1, 2], [3, 4, 5]], seed=0)
    assert layer.log_bandwidth is not None
    with torch.no_grad():
        layer.log_bandwidth.copy_(torch.tensor([0.4, -0.3]))
    return layer


def _inputs(rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.rand(rows, 6, generator=gen), torch.rand(rows - 7, 6, generator=gen)


def _all_layers() -> dict[str, nn.Module]:
    layers: dict[str, nn.Module] = {}
    for kernel in available_kernels(spectral=True):
        layers[f"fourier-{kernel}"] = FourierLayer(6, 10, kernel=kernel, seed=0)
    layers["fourier-ard-blocks-cossin"] = FourierLayer(
        6, 10, ard=True, blocks=[[0, 1, 2], [3, 4, 5]], features="cossin", seed=0
    )
    for kernel in available_kernels():
        out, gamma = NYSTROM_SETTINGS.get(kernel, (10, 0.5))
        layers[f"nystrom-{kernel}"] = NystromLayer(6, out, kernel=kernel, gamma=gamma, seed=0)
    layers["nystrom-rank"] = NystromLayer(6, 10, gamma=0.5, rank=4, seed=0)
    layers["nystrom-ard-blocks"] = _nystrom_ard()
    return layers


@pytest.fixture(params=sorted(LAYERS))
def layer(request: pytest.FixtureRequest) -> nn.Module:
    return LAYERS[request.param]().eval()


def _onnx_session(layer: nn.Module, x: torch.Tensor) -> ort.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            layer,
            (x,),
            dynamo=True,
            opset_version=OPSET,
            dynamic_shapes={"x": {0: "batch"}},
            verbose=False,
        )
    assert program is not None
    proto = program.model_proto
    assert max(op.version for op in proto.opset_import if op.domain in ("", "ai.onnx")) >= 17
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", sorted(_all_layers()))
@torch.no_grad()
def test_onnx_runs_in_onnxruntime_like_pytorch(name: str) -> None:
    layer = _all_layers()[name].eval()
    x, x2 = _inputs()
    session = _onnx_session(layer, x)
    feed = session.get_inputs()[0].name
    for batch in (x, x2):  # a second batch size: the batch dimension is dynamic
        (out,) = session.run(None, {feed: batch.numpy()})
        expected = layer(batch).numpy()
        assert out.shape == expected.shape
        np.testing.assert_allclose(out, expected, rtol=0, atol=ONNX_ATOL)


def _digits_layer(kind: str, x: torch.Tensor) -> nn.Module:
    """The README example's size: J = 200 on the 64 digits columns, gamma 0.02."""
    if kind == "nystrom":  # the float32 default jitter, explicit so that .double() keeps it
        return NystromLayer.from_data(x[:1000], 200, gamma=0.02, seed=0, jitter=1e-6)
    return FourierLayer(64, 200, gamma=0.02, seed=0)


@pytest.mark.parametrize("kind", ["nystrom", "fourier"])
@torch.no_grad()
def test_onnx_is_as_close_to_float64_as_pytorch_float32(kind: str) -> None:
    """Where ``K_Z``'s conditioning amplifies float32 round-off (a Nystrom layer of 200
    digits landmarks: about 2e-5 in PyTorch's own float32 forward), onnxruntime's outputs
    are held to PyTorch float32's distance from the float64 layer, not to a fixed 1e-5."""
    from sklearn.datasets import load_digits

    x = torch.from_numpy(load_digits().data / 16).float()
    layer = _digits_layer(kind, x).eval()
    session = _onnx_session(layer, x[:8])
    rows = x[1000:]
    (out,) = session.run(None, {session.get_inputs()[0].name: rows.numpy()})
    reference = copy.deepcopy(layer).double()(rows.double()).numpy()
    ours = np.abs(layer(rows).numpy() - reference).max()
    theirs = np.abs(out - reference).max()
    assert theirs <= 2 * ours, (theirs, ours)
    bound = 5e-5 if kind == "nystrom" else 1e-6  # float32 round-off, amplified or not
    assert ours < bound, ours


@torch.no_grad()
def test_torch_export_matches_eager(layer: nn.Module) -> None:
    x, x2 = _inputs()
    batch = torch.export.Dim("batch")
    exported = torch.export.export(layer, (x,), dynamic_shapes={"x": {0: batch}}).module()
    torch.testing.assert_close(exported(x), layer(x), atol=ATOL, rtol=0)
    torch.testing.assert_close(exported(x2), layer(x2), atol=ATOL, rtol=0)


def test_a_map_first_run_under_inference_mode_still_exports() -> None:
    # Lightning predicts and tests under torch.inference_mode, eval() inside it: a cache
    # filled there must not hold an inference tensor, which a non-strict export (the
    # ONNX exporter's first try) cannot trace
    layer = NystromLayer(4, 6, seed=0)
    x = torch.rand(8, 4)
    with torch.inference_mode():
        want = layer.eval()(x)
    assert layer._projection is not None and layer._projection.grad_fn is None
    copy.deepcopy(layer)  # a cached leaf: the module copies
    exported = torch.export.export(layer, (x,), strict=False).module()
    with torch.no_grad():
        torch.testing.assert_close(exported(x), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["fourier", "fourier_ard_cossin", "nystrom", "nystrom_ard"])
def test_torch_compile_full_graph_forward_and_backward(name: str, device: torch.device) -> None:
    """Training mode: no graph break (fullgraph=True) and eager's gradients."""
    torch._dynamo.reset()
    layer = LAYERS[name]().train().to(device)
    x = _inputs()[0].to(device)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    out = compiled(x)
    out.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    assert grads, "no parameter received a gradient"
    layer.zero_grad()
    expected = layer(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    for n, p in layer.named_parameters():
        if n in grads:
            torch.testing.assert_close(grads[n], p.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_torchscript_trace_matches_eager(layer: nn.Module, grad: bool) -> None:
    # With grad on, the trace's check re-runs it without: both must take one path.
    x, x2 = _inputs()
    with torch.set_grad_enabled(grad):
        traced = torch.jit.trace(layer, (x,))
    with torch.no_grad():
        torch.testing.assert_close(traced(x), layer(x), atol=ATOL, rtol=0)
        torch.testing.assert_close(traced(x2), layer(x2), atol=ATOL, rtol=0)


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("name", ["fourier", "nystrom"])
def test_torchscript_script_is_refused_with_the_alternatives(name: str) -> None:
    owner = "FourierLayer" if name == "fourier" else "NystromLayer"
    with pytest.raises(
        RuntimeError,
        match=rf"{owner}: torch.jit.script is not supported .*use torch.jit.trace, "
        r"torch.export.export, torch.onnx.export or torch.compile instead",
    ):
        torch.jit.script(LAYERS[name]())


@torch.no_grad()
def test_backbone_with_kernel_layer_exports() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(SmallCNN(1, 8, width=4), NystromLayer(8, 12, gamma=0.5)).eval()
    x = torch.rand(4, 1, 12, 12)
    exported = torch.export.export(model, (x,)).module()
    torch.testing.assert_close(exported(x), model(x), atol=ATOL, rtol=0)


# --------------------------------------------------------- the eval-mode inference cache
def test_nystrom_eval_cache_follows_changed_landmarks(device: torch.device) -> None:
    """Landmarks changed in eval mode (in place or replaced) are never served stale."""

    def rebuilt(layer: NystromLayer) -> NystromLayer:
        """A fresh layer with ``layer``'s landmarks (no cache), on its device."""
        return NystromLayer(6, 10, gamma=0.5, landmarks=layer.landmarks.detach().cpu()).to(device)

    layer = NystromLayer(6, 10, gamma=0.5, seed=0).to(device).eval()
    x = _inputs()[0].to(device)
    with torch.no_grad():
        before = layer(x)
        layer.landmarks.mul_(0.5)
        after = layer(x)
        fresh = rebuilt(layer).eval()(x)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, fresh, atol=1e-6, rtol=0)
    layer.load_state_dict({"landmarks": torch.rand(10, 6)})
    with torch.no_grad():
        reloaded = layer(x)
        expected = rebuilt(layer).train()(x)
    torch.testing.assert_close(reloaded, expected, atol=1e-5, rtol=0)
    if device.type != "cpu":
        return  # elsewhere the cache reads version counters: a .data edit is not seen
    with torch.no_grad():  # an edit through .data changes no version counter
        layer.landmarks.data.copy_(torch.rand(10, 6, generator=torch.Generator().manual_seed(1)))
        edited = layer(x)
        expected = rebuilt(layer).train()(x)
    torch.testing.assert_close(edited, expected, atol=1e-5, rtol=0)


def test_nystrom_eval_mode_with_grad_still_differentiates_the_landmarks() -> None:
    x, _ = _inputs()
    layer = NystromLayer(6, 10, gamma=0.5, seed=0).eval()
    layer(x).sum().backward()
    in_eval = layer.landmarks.grad.clone()
    layer.zero_grad()
    layer.train()(x).sum().backward()
    torch.testing.assert_close(in_eval, layer.landmarks.grad, atol=1e-5, rtol=1e-4)
    assert in_eval.abs().sum() > 0


# ------------------------------------------------- rows beyond the kernel layer's input limit
#: Maps whose input_limit() is checked against their own refusal: name -> factory.
LIMITED_MAPS: dict[str, Callable[[], KernelFeatureMap]] = {
    "nystrom": lambda: NystromLayer(6, 10, gamma=0.5, seed=0),
    "fourier": lambda: FourierLayer(6, 10, seed=0),
    "fastfood": lambda: FastfoodLayer(6, 10, seed=0),  # padded to width 8
    "ensemble": lambda: EnsembleNystrom(6, 10, num_maps=2, gamma=0.5, seed=0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(LIMITED_MAPS))
@torch.no_grad()
def test_input_limit_is_the_limit_the_layer_refuses_beyond(name: str, dtype: torch.dtype) -> None:
    layer = LIMITED_MAPS[name]().to(dtype).eval()
    limit = layer.input_limit()
    assert math.isfinite(limit)
    with pytest.raises(ValueError, match=r"argument 'x' must have entries with") as info:
        layer(torch.full((2, 6), limit * (1 + 1e-5), dtype=dtype))
    stated = re.search(r"\|value\| <= (\S+) in", str(info.value))
    assert stated is not None, str(info.value)
    assert float(stated.group(1)) == pytest.approx(limit, rel=5e-3)  # printed as %.3g
    assert torch.isfinite(layer(torch.full((2, 6), -limit * (1 - 1e-6), dtype=dtype))).all()


def test_input_limit_defaults_to_infinity() -> None:
    class CosineMap(KernelFeatureMap):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cos(x)

        def get_config(self) -> dict[str, object]:
            return self.base_config()

    assert CosineMap(3, 3).input_limit() == math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["nystrom", "fastfood"])
def test_exported_predictor_gives_no_class_beyond_the_input_limit(
    kind: str, dtype: torch.dtype, tmp_path: Path
) -> None:
    """A finite row that PyTorch refuses (an entry beyond the map's input limit, e.g. a
    netCDF fill value) gets NO_CLASS from the ONNX graph, not the class of an underflowed
    kernel or of cos(huge); a row at the limit gets PyTorch's class."""
    torch.manual_seed(0)
    predictor = Predictor(LIMITED_MAPS[kind](), nn.Linear(10, 3), dtype=dtype)
    limit = predictor.kernel_layer.input_limit()
    x = _inputs()[0].to(dtype)
    export_onnx(predictor, tmp_path / "model.onnx", x[:8])
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    rows = x[:4].clone()
    rows[1, 2] = limit * (1 + 1e-5)  # finite, beyond the limit
    rows[2, 0] = -limit * (1 - 1e-6)  # within it
    rows[3, 5] = float("nan")
    classes, _ = session.run(None, {"x": rows.numpy()})
    with torch.no_grad():
        expected = predictor(rows[[0, 2]])[0].tolist()
        with pytest.raises(ValueError, match=r"argument 'x' must have entries with"):
            predictor(rows[1:2])
    assert classes.tolist() == [expected[0], NO_CLASS, expected[1], NO_CLASS]
    assert min(expected) >= 0


# ---------------------------------------------------------- export_onnx's argument checks
@pytest.mark.parametrize(
    ("case", "error", "message"),
    [
        (
            "numpy",
            TypeError,
            r"^export_onnx: argument 'example' must be a torch.Tensor.*got ndarray",
        ),
        (
            "layer",
            TypeError,
            r"^export_onnx: argument 'predictor' must be a kernel_layers "
            r"Predictor.*got NystromLayer",
        ),
        (
            "width",
            ValueError,
            r"^NystromLayer: argument 'x' must have last dimension 4, got "
            r"shape \[8, 5\]",
        ),
        (
            "dtype",
            TypeError,
            r"^NystromLayer: argument 'x' must have the layer's dtype "
            r"torch.float32",
        ),
    ],
)
def test_export_onnx_refuses_bad_arguments_by_name_and_keeps_the_file(
    case: str, error: type[Exception], message: str, tmp_path: Path
) -> None:
    layer = NystromLayer(4, 5, seed=0)
    predictor: object = Predictor(layer, nn.Linear(5, 3))
    example: object = torch.rand(8, 4, generator=torch.Generator().manual_seed(0))
    if case == "numpy":
        example = torch.rand(8, 4).numpy()
    elif case == "layer":
        predictor = layer
    elif case == "width":
        example = torch.rand(8, 5)
    else:  # float64 rows are not narrowed to a float32 model's silently
        example = torch.rand(8, 4, dtype=torch.float64)
    target = tmp_path / "model.onnx"
    target.write_bytes(b"an earlier export")
    with pytest.raises(error, match=message):
        export_onnx(predictor, target, example)  # type: ignore[arg-type]
    assert target.read_bytes() == b"an earlier export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_a_map_built_under_inference_mode_runs_in_eval_mode() -> None:
    x = torch.rand(3, 8)
    with torch.inference_mode():
        layer = NystromLayer(8, 4, seed=0).eval()
        first, again = layer(x), layer(x)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    torch.testing.assert_close(first, NystromLayer(8, 4, seed=0).eval()(x), rtol=0, atol=0)
