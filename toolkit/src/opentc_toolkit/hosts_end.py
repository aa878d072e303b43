"""The hosts of a multi-host job end together: each host, once its verdict is written, waits (bounded) until every
host has written its own, and only then exits.

SageMaker ends each host by itself. The SageMaker SDK's local mode does not: its docker-compose stops every container
as soon as the first one exits, so a host still in its wrap-up (publishing the cache, writing its summary) lost its
verdict. Here the first host (hosts[0]) listens, once its verdict is written, on the port after MASTER_PORT; every
other host, once its verdict is written, connects (retrying while the first host is still busy) and says which host it
is; when every host has, the first host answers each of them, and all exit. A verdict is never changed here: it is
written before. A host that waits in vain (another host failed hard, or never got this far) exits when the bound
passes, saying which hosts it did not hear from; a stop ends the wait at once.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from collections.abc import Callable, Sequence
from typing import cast

log = logging.getLogger(__name__)

POLL = 0.5
END = b"end\n"


def end_port(master_port: int) -> int:
    """The port the first host listens on: the one after the rendezvous port (that one's, below the top)."""
    return master_port + 1 if master_port < 65535 else master_port - 1


def wait_for_every_host(hosts: Sequence[str], current: str, port: int, timeout: float,
                        stopped: Callable[[], bool] = lambda: False) -> list[str]:
    """Return once every host of the job has written its verdict (or the bound passed, or a stop came); the hosts
    not heard from, in the job's order. A single-host job returns at once."""
    if len(hosts) < 2:
        return []
    deadline = time.monotonic() + timeout
    log.info("waiting for the other hosts to write their verdicts too (at most %g s; OPENTC_HOSTS_END_TIMEOUT): "
             "SageMaker's local mode stops every host as soon as one exits", timeout)
    if current == hosts[0]:
        missing = _first_host(hosts, port, deadline, stopped)
    else:
        missing = [] if _other_host(hosts[0], current, port, deadline, stopped) else [hosts[0]]
    if missing:
        log.warning("ending without word from %s (a host that failed before its verdict, or is still finishing)",
                    ", ".join(missing))
    return missing


def _first_host(hosts: Sequence[str], port: int, deadline: float, stopped: Callable[[], bool]) -> list[str]:
    """Listen until every other host has said its name (or the bound passed, or a stop came), then answer each.
    Connections are read side by side, never one to the end before the next: a silent one (a port scanner, a
    host that connected and hung) holds up no other."""
    expected = set(hosts[1:])
    heard: dict[str, socket.socket] = {}
    pending: dict[socket.socket, bytes] = {}   # connected, its line not complete yet
    most_pending = 4 * len(hosts) + 16         # past this, the oldest silent connection is dropped
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server, selectors.DefaultSelector() as selector:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(("", port))
        except OSError as e:
            log.warning("cannot listen on port %d for the other hosts' word (%s): ending now", port, e)
            return sorted(expected, key=list(hosts).index)
        server.listen(len(hosts))
        server.setblocking(False)
        selector.register(server, selectors.EVENT_READ)

        def drop(conn: socket.socket) -> None:
            selector.unregister(conn)
            del pending[conn]

        try:
            while set(heard) < expected and time.monotonic() < deadline and not stopped():
                for key, _ in selector.select(timeout=max(0.0, min(POLL, deadline - time.monotonic()))):
                    if key.fileobj is server:
                        with contextlib.suppress(OSError):
                            conn, _ = server.accept()
                            conn.setblocking(False)
                            if len(pending) >= most_pending:
                                oldest = next(iter(pending))
                                drop(oldest)
                                oldest.close()
                            pending[conn] = b""
                            selector.register(conn, selectors.EVENT_READ)
                        continue
                    conn = cast(socket.socket, key.fileobj)
                    line = _more(conn, pending)
                    if line is None:
                        continue
                    drop(conn)
                    if line in expected:
                        earlier = heard.pop(line, None)
                        if earlier is not None:   # the host connected again: its earlier connection is gone
                            earlier.close()
                        heard[line] = conn
                    else:
                        conn.close()
            for conn in heard.values():
                with contextlib.suppress(OSError):
                    conn.settimeout(POLL)
                    conn.sendall(END)
        finally:
            for conn in [*heard.values(), *pending]:
                conn.close()
    return [h for h in hosts[1:] if h not in heard]


def _more(conn: socket.socket, pending: dict[socket.socket, bytes]) -> str | None:
    """Read what `conn` has now; its first line once it is complete (or the connection ended, or sent 1 KB without
    one: then what it sent), else None."""
    try:
        chunk = conn.recv(1024)
    except BlockingIOError:
        return None
    except OSError:
        chunk = b""
    data = pending[conn] + chunk
    pending[conn] = data
    if chunk and b"\n" not in data and len(data) < 1024:
        return None
    return data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()


def _other_host(first: str, current: str, port: int, deadline: float, stopped: Callable[[], bool]) -> bool:
    """Whether the first host said every host is done."""
    while time.monotonic() < deadline and not stopped():
        try:
            with socket.create_connection((first, port), timeout=POLL) as conn:
                conn.sendall(current.encode("utf-8", "surrogateescape") + b"\n")
                return _read_line(conn, deadline, stopped) == END.decode().strip()
        except OSError:   # the first host is not listening yet (still finishing), or not reachable
            time.sleep(POLL)
    return False


def _read_line(conn: socket.socket, deadline: float, stopped: Callable[[], bool] = lambda: False) -> str:
    conn.settimeout(POLL)
    data = b""
    while b"\n" not in data and len(data) < 1024 and time.monotonic() < deadline and not stopped():
        try:
            chunk = conn.recv(1024)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
