"""Network guards of the downloads and the errors of data that cannot be had."""

from __future__ import annotations

import contextlib
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence

__all__ = [
    "DOWNLOAD_TIMEOUT_S",
    "PROBE_TIMEOUT_S",
    "DatasetNotFoundError",
    "check_network",
    "download_timeout",
    "failure_reason",
]

#: Seconds allowed to open a TCP connection to a download host before giving up.
PROBE_TIMEOUT_S = 5.0
#: Default socket timeout (seconds) while a library downloads, so a stalled transfer
#: fails instead of hanging forever.
DOWNLOAD_TIMEOUT_S = 60.0


class DatasetNotFoundError(FileNotFoundError):
    """The data files are neither on disk nor downloadable (offline, no cache).

    The message names the directory to fill and the files expected there.
    """


def failure_reason(err: BaseException) -> str:
    """One-line description of a download failure."""
    text = " ".join(str(err).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"the download failed ({type(err).__name__}: {text})"


def check_network(urls: Sequence[str], *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when none of ``urls`` can be reached.

    Opens a TCP connection to each URL's host (first success wins) with a short
    timeout, so a machine without network, or behind a firewall that drops packets,
    gets an error in seconds instead of a download that hangs. Skipped when a proxy is
    configured (the direct probe would not tell anything then).

    Args:
        urls: candidate download URLs.
        timeout: seconds per connection attempt.

    Raises:
        OSError: no host answered; the message names the hosts and the last error.
    """
    if urllib.request.getproxies():
        return
    last: BaseException | None = None
    hosts: list[str] = []
    for url in urls:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.hostname
        if host is None:
            continue
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        hosts.append(host)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as err:
            last = err
    raise OSError(f"cannot reach {', '.join(hosts) or 'any host'} ({last})")


@contextlib.contextmanager
def download_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    """Temporarily set the default socket timeout (only when none is set).

    Args:
        seconds: socket timeout applied to connections opened inside the block.
    """
    previous = socket.getdefaulttimeout()
    if previous is None:
        socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        if previous is None:
            socket.setdefaulttimeout(None)
