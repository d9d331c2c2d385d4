"""Exact DI across processes: 2-process gloo against the single-process batch, with the
tensors on each device of ``conftest.DEVICES`` (both processes share one GPU)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import DEVICES

from kernel_layers import (
    FourierLayer,
    NystromLayer,
    discriminant_information,
    nystrom_discriminant_information,
)
from kernel_layers.objectives import unit_norm_columns

WORLD = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(48, 5, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (48,), generator=g)
    z = torch.rand(7, 5, generator=g, dtype=torch.float64)
    return x, labels, z


def _float_targets(x: torch.Tensor) -> torch.Tensor:
    """Two regression targets of ``x (Tensor[N, 5])`` far from zero mean, ``[N, 2]``."""
    return torch.stack([100.0 + 10.0 * x[:, 0] - x[:, 1] ** 2, 3.0 * x[:, 2] * x[:, 3]], dim=1)


def _worker(rank: int, port: int, out: str, device: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        x, labels, z = (t.to(device) for t in _data())
        rows = slice(rank * 24, (rank + 1) * 24)
        phi = (x[rows] * 3.0).requires_grad_(True)
        di = discriminant_information(phi, labels[rows], sync_dist=True)  # num_classes agreed
        di.backward()
        xz, zz = x[rows].clone().requires_grad_(True), z.clone().requires_grad_(True)
        nys = nystrom_discriminant_information(
            xz, labels[rows], zz, gamma=0.8, num_classes=4, sync_dist=True
        )
        nys.backward()
        # float32 narrow inputs: float64 kernel matrices, the backward in float32
        x32, z32 = xz.detach().float().requires_grad_(True), z.float().requires_grad_(True)
        nys32 = nystrom_discriminant_information(
            x32, labels[rows], z32, gamma=0.8, num_classes=4, sync_dist=True
        )
        nys32.backward()
        # float targets (KernelRegressor): centred and scaled by the global batch
        targets = unit_norm_columns(_float_targets(x)[rows], sync_dist=True)
        reg = discriminant_information(x[rows] * 3.0, targets, sync_dist=True)
        torch.save(
            {
                "di": di.detach(),
                "grad": phi.grad,
                "nys": nys.detach(),
                "gx": xz.grad,
                "gz": zz.grad,
                "nys32": nys32.detach(),
                "gx32": x32.grad,
                "gz32": z32.grad,
                "targets": targets,
                "reg": reg,
            },
            Path(out) / f"rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=DEVICES)
def two_process_results(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(_free_port(), str(out), request.param), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt", map_location="cpu") for r in range(WORLD)]


def test_di_value_and_local_gradients_match_single_process(two_process_results) -> None:
    x, labels, _ = _data()
    phi = (x * 3.0).requires_grad_(True)
    want = discriminant_information(phi, labels)
    want.backward()
    for rank, res in enumerate(two_process_results):
        torch.testing.assert_close(res["di"], want.detach(), rtol=1e-12, atol=0)
        torch.testing.assert_close(
            res["grad"], phi.grad[rank * 24 : (rank + 1) * 24], rtol=1e-10, atol=1e-12
        )


def test_nysdi_value_and_gradients_match_single_process(two_process_results) -> None:
    x, labels, z = _data()
    xs, zs = x.clone().requires_grad_(True), z.clone().requires_grad_(True)
    want = nystrom_discriminant_information(xs, labels, zs, gamma=0.8, num_classes=4)
    want.backward()
    for rank, res in enumerate(two_process_results):
        torch.testing.assert_close(res["nys"], want.detach(), rtol=1e-12, atol=0)
        torch.testing.assert_close(
            res["gx"], xs.grad[rank * 24 : (rank + 1) * 24], rtol=1e-9, atol=1e-12
        )
    # Data-parallel training sums the processes' landmark gradients (DDP: mean of
    # world-size-scaled losses); that sum must be the single-process gradient.
    total = sum(res["gz"] for res in two_process_results)
    torch.testing.assert_close(total, zs.grad, rtol=1e-9, atol=1e-12)


def test_float32_nysdi_on_narrow_inputs_matches_single_process(two_process_results) -> None:
    # The float32 path of narrow inputs (G and K_Z in float64, the backward in float32)
    # under sync_dist: the value and the landmark gradient's split across processes.
    x, labels, z = _data()
    xs, zs = x.float().requires_grad_(True), z.float().requires_grad_(True)
    want = nystrom_discriminant_information(xs, labels, zs, gamma=0.8, num_classes=4)
    assert type(want.grad_fn).__name__.startswith("_GaussianNysDI")
    want.backward()
    for rank, res in enumerate(two_process_results):
        assert res["nys32"].dtype == torch.float32
        torch.testing.assert_close(res["nys32"], want.detach(), rtol=1e-6, atol=0)
        torch.testing.assert_close(
            res["gx32"], xs.grad[rank * 24 : (rank + 1) * 24], rtol=1e-4, atol=1e-6
        )
    total = sum(res["gz32"] for res in two_process_results)
    torch.testing.assert_close(total, zs.grad, rtol=1e-4, atol=1e-6)


def test_regression_targets_and_di_match_single_process(two_process_results) -> None:
    # each process centres and scales its shard by the global batch's means and norms
    x, _, _ = _data()
    raw = _float_targets(x)
    centred = raw - raw.mean(0)
    scaled = centred / centred.norm(dim=0)  # float64 reference
    want = discriminant_information(x * 3.0, scaled)
    for rank, res in enumerate(two_process_results):
        torch.testing.assert_close(
            res["targets"].cpu(), scaled[rank * 24 : (rank + 1) * 24], rtol=1e-12, atol=1e-14
        )
        torch.testing.assert_close(res["reg"].cpu(), want, rtol=1e-12, atol=0)
    assert 0.0 < float(want) <= 2.0  # a sum of two ridge R^2


def test_sync_dist_without_process_group_is_local() -> None:
    x, labels, _ = _data()
    a = discriminant_information(x, labels, sync_dist=True)
    assert a.item() == discriminant_information(x, labels).item()


def _group_open_after_the_console_script(tmp_path: Path, before: str, *options: str) -> bool:
    """Whether a process group is open after ``run_lightning_cli`` (one epoch of the quick
    start with ``options``) in a fresh interpreter that first runs ``before``."""
    argv = ["fit", "--config", "quickstart", "--trainer.max_epochs=1", "--trainer.logger=false"]
    argv += ["--trainer.enable_checkpointing=false", "--test_after_fit=false", *options]
    run = (
        "import torch.distributed as dist\n"
        "from kernel_layers.cli.app import run_lightning_cli\n"
        f"{before}\n"
        f"run_lightning_cli({argv!r}, console=False)\n"
        "print('group open:', dist.is_initialized())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", run],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        cwd=tmp_path,
        timeout=300,
        capture_output=True,
        text=True,
        check=True,
    )
    return {"group open: True": True, "group open: False": False}[done.stdout.splitlines()[-1]]


def test_the_console_script_destroys_the_process_group_it_trained_under(tmp_path: Path) -> None:
    # Lightning destroys only NCCL groups at exit; a gloo group left to the interpreter's
    # exit could abort the finished process (SIGABRT)
    ddp = ("--trainer.strategy=ddp", "--trainer.devices=1", "--trainer.accelerator=cpu")
    assert not _group_open_after_the_console_script(tmp_path, "", *ddp)


def test_the_console_script_leaves_open_a_process_group_its_caller_opened(tmp_path: Path) -> None:
    url = f"tcp://127.0.0.1:{_free_port()}"
    before = f"dist.init_process_group('gloo', init_method={url!r}, rank=0, world_size=1)"
    assert _group_open_after_the_console_script(tmp_path, before)


SCRIPT = Path(__file__).with_name("ddp_fit_script.py")


def _ddp_and_single(tmp_path: Path, layer: str, *extra: str) -> tuple[dict, dict]:
    """The saved states of ``ddp_fit_script.py``'s 2-process DDP run and 1-process run."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    for mode in ("ddp", "single"):
        subprocess.run(
            [sys.executable, str(SCRIPT), mode, layer, str(tmp_path / f"{mode}.pt"), *extra],
            check=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
            capture_output=True,
        )
    ddp, single = torch.load(tmp_path / "ddp.pt"), torch.load(tmp_path / "single.pt")
    assert ddp.keys() == single.keys()
    # The two runs sum the same rows in different orders; NysDI's float64 solve (jitter
    # 1e-10) carries those roundings into the steps, so the landmarks agree to 1e-10.
    for name in ddp:
        torch.testing.assert_close(ddp[name], single[name], rtol=1e-9, atol=1e-10, msg=name)
    return ddp, single


@pytest.mark.parametrize("layer", ["fourier", "nystrom"])
def test_lightning_ddp_equals_single_process_with_doubled_batch(tmp_path: Path, layer: str) -> None:
    ddp, _ = _ddp_and_single(tmp_path, layer)
    start = (
        {
            "fourier": FourierLayer(6, 24, gamma=0.5, seed=0),
            "nystrom": NystromLayer(6, 24, gamma=0.5, seed=0),
        }[layer]
        .double()
        .state_dict()
    )
    assert any(not torch.allclose(ddp[k], start[k]) for k in ddp)  # training moved something


@pytest.mark.parametrize("objective", ["ls", "ce"])
def test_ddp_trains_and_logs_the_baselines_as_one_process(tmp_path: Path, objective: str) -> None:
    # each process fitted LS's first read-out on its own rows, and logged the loss of
    # its own rows with the whole ridge penalty: the monitor callbacks then decided on a
    # value that depended on the processes
    _, single = _ddp_and_single(tmp_path, "fourier", objective)
    assert float(single["train/loss_epoch"]) > 0


def _run_script(name: str, out: Path) -> None:
    """Run the 2-process script ``name`` of this folder, writing ``out.<rank>``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    script = Path(__file__).with_name(name)
    subprocess.run(
        [sys.executable, str(script), str(out)],
        check=True,
        env=env,
        cwd=out.parent,
        timeout=300,
        capture_output=True,
    )


def test_a_ddp_regressor_trains_with_one_rho_on_every_process(tmp_path: Path) -> None:
    """Each process fits its ridge read-out's penalty on its own rows (a plain loader);
    DI's ``rho`` is process 0's on both, or the processes would train different DIs."""
    _run_script("ddp_regressor_rho_script.py", tmp_path / "rho")
    rho = [float((tmp_path / f"rho.{rank}").read_text()) for rank in range(WORLD)]
    assert rho[0] == rho[1] > 1e-4


def test_a_short_last_batch_of_unequal_shards_is_judged_by_the_global_batch(
    tmp_path: Path,
) -> None:
    """Shards of 180 and 140 rows in batches of 45: the last global batch holds 50 rows,
    enough for J = 20, but the process holding 5 judged it as 5 x 2 and raised alone
    (the other then failed on a closed connection)."""
    _run_script("ddp_short_batch_script.py", tmp_path / "steps")
    assert [int((tmp_path / f"steps.{rank}").read_text()) for rank in range(WORLD)] == [4, 4]


def test_ddp_with_one_device_trains_on_the_data_modules_seeded_loader(tmp_path: Path) -> None:
    """Lightning puts a DistributedSampler in place of a sampler that is not one under any
    distributed strategy, one device included; the training loader failed on it (an
    assert). 270 training rows in batches of 45: 6 steps an epoch."""
    _run_script("ddp_one_process_script.py", tmp_path / "steps")
    assert int((tmp_path / "steps.0").read_text()) == 12
