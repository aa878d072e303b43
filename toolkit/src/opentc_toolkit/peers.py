"""Waiting for the other hosts of a multi-host job to appear on the network."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterable

from .not_started import PeersUnreachable

log = logging.getLogger(__name__)


def wait_for_hosts(hosts: Iterable[str], timeout: float,
                   resolve: Callable[[str], object] = lambda h: socket.getaddrinfo(h, None),
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep,
                   stopped: Callable[[], bool] = lambda: False) -> None:
    """Return once every host name resolves (or the job is stopped); raise PeersUnreachable naming the
    first host that did not resolve in time.

    SageMaker's hosts come up at about the same time, but a name may resolve a little later than the
    container starts.
    """
    deadline = clock() + timeout
    for host in hosts:
        delay = 0.5
        while not stopped():
            try:
                resolve(host)
                break
            except OSError as e:
                if clock() >= deadline:
                    raise PeersUnreachable(
                        f"host {host} could not be reached: its name did not resolve within {timeout:g} s "
                        f"({e}). Check that every host of the job is up and on the same network; "
                        f"OPENTC_PEER_TIMEOUT sets how long to wait.") from None
                log.info("waiting for host %s to resolve (%s)", host, e)
                sleep(min(delay, max(0.0, deadline - clock())))
                delay = min(delay * 2, 5.0)
