"""Hostile checkpoint sources for the tests: a pickle that runs code when unpickled, and
a loopback HTTP server to serve it from."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch

from kernel_layers import KernelClassifier, NystromLayer


class RunsCode:
    """Unpickling calls ``open(marker, "w")``: the file appears iff code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def write_code_running_checkpoint(path: Path, marker: Path) -> None:
    """A quick start shaped checkpoint at ``path`` that creates ``marker`` when unpickled
    with ``weights_only=False`` (checked here, then ``marker`` removed)."""
    model = KernelClassifier(NystromLayer(64, 20, gamma=0.02), num_classes=10)
    torch.save(
        {
            "state_dict": model.state_dict(),
            "hyper_parameters": dict(model.hparams),
            "pytorch-lightning_version": L.__version__,
            "payload": RunsCode(marker),
        },
        path,
    )
    torch.load(path, weights_only=False)  # the payload is live: an unsafe load runs it
    assert marker.exists()
    marker.unlink()


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` over HTTP on the loopback interface; yields the base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
