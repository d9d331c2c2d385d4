"""Kernel layers inside networks: MLP, SmallCNN, ResNet-18 backbone, head replacement."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import pytest
import torch
from torch import nn

from kernel_layers import FourierLayer, KernelClassifier, NystromLayer
from kernel_layers.data import TensorDataModule
from kernel_layers.training.backbones import (
    MLP,
    ResNet18Backbone,
    SmallCNN,
    resnet18_backbone,
    strip_head,
    with_kernel_head,
)


def _images(n: int = 480, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, 1, 12, 12]`` images whose class is a bright quadrant (4 classes)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 4
    x = 0.3 * torch.rand(n, 1, 12, 12, generator=gen)
    for c in range(4):
        r, q = divmod(c, 2)
        x[y == c, :, 6 * r : 6 * r + 6, 6 * q : 6 * q + 6] += 0.7
    return x, y


@pytest.mark.parametrize(
    "options", [{}, {"batch_norm": True, "dropout": 0.25}], ids=["plain", "bn-dropout"]
)
def test_mlp_is_torchvisions_with_the_same_seed(options: dict[str, object]) -> None:
    from torchvision.ops import MLP as TorchvisionMLP

    torch.manual_seed(3)
    ours = MLP(6, [16, 12], 5, **options)  # type: ignore[arg-type]
    torch.manual_seed(3)
    norm = nn.BatchNorm1d if options else None
    theirs = TorchvisionMLP(6, [16, 12, 5], norm_layer=norm, dropout=options.get("dropout", 0.0))
    assert [t.shape for t in ours.layers.state_dict().values()] == [
        t.shape for t in theirs.state_dict().values()
    ]
    for a, b in zip(ours.layers.state_dict().values(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    x = torch.randn(9, 6)
    ours.eval(), theirs.eval()
    assert torch.equal(ours(x), theirs(x))
    assert ours(x).shape == (9, 5)
    assert MLP(6, [], 5)(x).shape == (9, 5)  # no hidden layer: one Linear
    assert ours.get_config() == {
        "in_features": 6,
        "hidden_features": [16, 12],
        "out_features": 5,
        "batch_norm": bool(options),
        "dropout": options.get("dropout", 0.0),
    }


def test_mlp_errors() -> None:
    with pytest.raises(
        ValueError, match=r"MLP: argument 'x' must have shape \[B, 6\], got \[4, 5\]"
    ):
        MLP(6, [8], 3)(torch.rand(4, 5))
    with pytest.raises(ValueError, match=r"MLP: argument 'x' must have shape \[B, 6\], got \[6\]"):
        MLP(6, [8], 3)(torch.rand(6))
    with pytest.raises(
        ValueError, match=r"MLP: argument 'hidden_features\[1\]' must be an integer >= 1, got 0"
    ):
        MLP(6, [8, 0], 3)
    with pytest.raises(
        TypeError,
        match="MLP: argument 'hidden_features' must be a sequence of integers >= 1, got 8",
    ):
        MLP(6, 8, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MLP: argument 'hidden_features' must be a sequence"):
        MLP(6, "88", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="MLP: argument 'out_features' must be an integer >= 1"):
        MLP(6, [8], 0)
    with pytest.raises(ValueError, match=r"MLP: argument 'dropout' must be in \[0, 1\), got 1.0"):
        MLP(6, [8], 3, dropout=1.0)
    with pytest.raises(TypeError, match="MLP: argument 'batch_norm' must be a bool, got 1"):
        MLP(6, [8], 3, batch_norm=1)  # type: ignore[arg-type]


def test_small_cnn_shapes_and_errors() -> None:
    cnn = SmallCNN(1, 24, width=4)
    assert cnn(torch.rand(3, 1, 28, 28)).shape == (3, 24)
    assert cnn(torch.rand(2, 1, 8, 8)).shape == (2, 24)
    assert SmallCNN(3, 5)(torch.rand(2, 3, 16, 16)).shape == (2, 5)
    with pytest.raises(
        ValueError, match="SmallCNN: argument 'in_channels' must be an integer >= 1, got 0"
    ):
        SmallCNN(0)
    with pytest.raises(TypeError, match="SmallCNN: argument 'out_features' must be an integer"):
        SmallCNN(1, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"SmallCNN: argument 'x' must have shape \[B, 1, H, W\]"):
        cnn(torch.rand(3, 784))


def test_small_cnn_plain_keys_unchanged_by_the_options() -> None:
    # checkpoints written before `dropout` / `batch_norm` existed still load
    plain = ["features.0.weight", "features.0.bias", "features.3.weight", "features.3.bias"]
    plain += ["project.0.weight", "project.0.bias"]
    assert list(SmallCNN(1, 8, width=4).state_dict()) == plain
    assert list(SmallCNN(1, 8, width=4, dropout=0.5).state_dict()) == plain
    normed = SmallCNN(1, 8, width=4, batch_norm=True)
    convs = [m for m in normed.features if isinstance(m, nn.Conv2d)]
    norms = [m for m in normed.features if isinstance(m, nn.BatchNorm2d)]
    assert [c.bias for c in convs] == [None, None]
    assert [n.num_features for n in norms] == [4, 8]


def test_small_cnn_dropout_acts_in_training_only() -> None:
    torch.manual_seed(0)
    x = torch.rand(6, 1, 12, 12)
    plain = SmallCNN(1, 8, width=4)
    dropped = SmallCNN(1, 8, width=4, dropout=0.5)
    dropped.load_state_dict(plain.state_dict())
    plain.eval(), dropped.eval()
    assert torch.equal(dropped(x), plain(x))
    dropped.train()
    torch.manual_seed(1)
    pooled = dropped.features(x)
    kept = pooled != 0
    assert 0 < kept.float().mean() < 1  # some features dropped, some kept
    plain_pooled = plain.features(x)
    torch.testing.assert_close(pooled[kept], 2 * plain_pooled[kept])  # scaled by 1 / (1 - p)


def test_small_cnn_batch_norm_normalises_each_channel() -> None:
    torch.manual_seed(0)
    cnn = SmallCNN(1, 8, width=4, batch_norm=True).train()
    x = 5 + 3 * torch.rand(16, 1, 12, 12)
    conv, norm = cnn.features[0], cnn.features[1]
    assert isinstance(norm, nn.BatchNorm2d)
    out = norm(conv(x)).double()
    torch.testing.assert_close(
        out.mean((0, 2, 3)), torch.zeros(4, dtype=torch.float64), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        out.var((0, 2, 3), unbiased=False), torch.ones(4, dtype=torch.float64), atol=1e-3, rtol=0
    )
    assert cnn(x).shape == (16, 8)
    with pytest.raises(
        ValueError, match=r"SmallCNN: argument 'dropout' must be in \[0, 1\), got 1.0"
    ):
        SmallCNN(1, 8, dropout=1.0)
    with pytest.raises(TypeError, match="SmallCNN: argument 'batch_norm' must be a bool, got 1"):
        SmallCNN(1, 8, batch_norm=1)  # type: ignore[arg-type]


def test_resnet18_backbone_for_grayscale() -> None:
    net = resnet18_backbone(1)
    assert isinstance(net, ResNet18Backbone) and net.out_features == 512
    assert isinstance(net.net.fc, nn.Identity) and net.net.conv1.in_channels == 1
    net.eval()
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 512)
    assert ResNet18Backbone(3, stem_stride=2).eval()(torch.rand(1, 3, 28, 28)).shape == (1, 512)
    with pytest.raises(ValueError, match="ResNet18Backbone: argument 'stem_stride' must be 1 or 2"):
        ResNet18Backbone(1, stem_stride=3)


def test_strip_head_finds_fc_classifier_and_sequential() -> None:
    from torchvision.models import resnet18

    model, width = strip_head(resnet18(weights=None, num_classes=7))
    assert width == 512 and isinstance(model.fc, nn.Identity)
    seq = nn.Sequential(nn.Flatten(), nn.Linear(16, 9), nn.ReLU(), nn.Linear(9, 3))
    model, width = strip_head(seq)
    assert width == 9 and isinstance(seq[3], nn.Identity) and isinstance(seq[1], nn.Linear)
    assert model(torch.rand(2, 16)).shape == (2, 9)

    class VGGLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(4, 6)
            self.classifier = nn.Sequential(nn.Dropout(), nn.Linear(6, 2))

    vgg = VGGLike()
    _, width = strip_head(vgg)
    assert width == 6 and isinstance(vgg.classifier[1], nn.Identity)
    _, width = strip_head(nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2)), attr="0")
    assert width == 3


def test_strip_head_errors() -> None:
    with pytest.raises(ValueError, match="strip_head: argument 'model' must have a Linear head"):
        strip_head(nn.Sequential(nn.ReLU()))
    with pytest.raises(ValueError, match=r"strip_head: argument .attr. must name an nn\.Linear"):
        strip_head(nn.Sequential(nn.ReLU(), nn.Linear(2, 2)), attr="0")
    with pytest.raises(TypeError, match=r"strip_head: argument .model. must be an nn\.Module"):
        strip_head("resnet")  # type: ignore[arg-type]


def test_with_kernel_head_builds_a_classifier() -> None:
    seq = nn.Sequential(nn.Flatten(), nn.Linear(144, 10), nn.Tanh(), nn.Linear(10, 4))
    model = with_kernel_head(seq, NystromLayer(10, 8), num_classes=4, backbone_lr=1e-4)
    assert isinstance(model, KernelClassifier) and model.backbone is seq
    assert model(torch.rand(5, 1, 12, 12)).shape == (5, 8)
    bad = nn.Sequential(nn.Linear(6, 3), nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"with_kernel_head: argument 'kernel_layer' must have "):
        with_kernel_head(bad, NystromLayer(4, 8), num_classes=2)
    assert isinstance(bad[1], nn.Linear)  # not modified on error


@pytest.mark.parametrize("layer_cls", [NystromLayer, FourierLayer])
def test_di_gradients_reach_the_first_conv_layer(layer_cls: type) -> None:
    torch.manual_seed(0)
    x, y = _images(96)
    cnn = SmallCNN(1, 16, width=4)
    model = KernelClassifier(layer_cls(16, 24, gamma=0.5, seed=0), num_classes=4, backbone=cnn)
    di = model._di(model.embed(x), y)
    (-di).backward()
    first = cnn.features[0]
    assert isinstance(first, nn.Conv2d)
    for grad in (first.weight.grad, first.bias.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().max() > 0


def test_cnn_nystrom_di_trains_end_to_end(make_trainer: Callable[..., L.Trainer]) -> None:
    L.seed_everything(0)
    x, y = _images(480)
    dm = TensorDataModule(x[:400], y[:400], x[400:], y[400:], batch_size=100, val_fraction=0.0)
    cnn = SmallCNN(1, 16, width=4)
    model = KernelClassifier(
        NystromLayer(16, 20, gamma=0.5), num_classes=4, backbone=cnn, lr=1e-2, backbone_lr=3e-3
    )
    conv = cnn.features[0].weight.detach().clone()
    trainer = make_trainer(max_epochs=3)
    trainer.fit(model, dm)
    assert bool(model.landmarks_initialised)
    assert not torch.equal(conv, cnn.features[0].weight.detach())
    lrs = {g["name"]: g["lr"] for g in trainer.optimizers[0].param_groups}
    assert lrs == {"kernel": 1e-2, "backbone": 3e-3}
    assert "train/di_epoch" in trainer.logged_metrics
    acc = make_trainer().test(model, dm, verbose=False)[0]["test/acc"]
    assert acc > 0.9


def test_landmarks_start_as_backbone_features(make_trainer: Callable[..., L.Trainer]) -> None:
    L.seed_everything(0)
    x, y = _images(400)
    dm = TensorDataModule(x[:300], y[:300], x[300:], y[300:], batch_size=100, val_fraction=0.0)
    cnn = SmallCNN(1, 8, width=4)
    model = KernelClassifier(NystromLayer(8, 12), num_classes=4, backbone=cnn, lr=1e-9)
    make_trainer(max_epochs=1).fit(model, dm)
    with torch.no_grad():
        cnn.eval()
        feats = cnn(dm.train_features())
    z = model.kernel_layer.landmarks.detach()
    gap = (z[:, None, :] - feats[None]).abs().amax(-1).min(1).values
    assert gap.max() < 1e-4  # each landmark is the feature vector of a training image


@pytest.mark.gpu
@pytest.mark.parametrize(
    "recipe", ["mnist_cnn_nystrom_di", "fashion_cnn_nystrom_di", "fashion_resnet18_nystrom_di"]
)
def test_cnn_recipes_backbone_trains_on_cuda_under_their_determinism(recipe: str) -> None:
    """Lightning's ``deterministic`` of the recipe, applied as the Trainer applies it, lets
    the recipe's backbone take a backward pass on CUDA (strict determinism raises on
    ``AdaptiveAvgPool2d``'s CUDA backward)."""
    import yaml

    from kernel_layers.cli.recipe_files import recipe_path
    from kernel_layers.training.architecture import build_module

    config = yaml.safe_load(recipe_path(recipe).read_text())
    mode = config["trainer"]["deterministic"]
    backbone = build_module("test", "backbone", config["model"]["backbone"]).cuda()
    x = torch.rand(8, 1, 28, 28, device="cuda")
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(bool(mode), warn_only=mode == "warn")
    try:
        backbone(x).square().sum().backward()
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)
    grads = [p.grad for p in backbone.parameters()]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
