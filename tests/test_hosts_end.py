"""The hosts of a multi-host job end together (opentc_toolkit.hosts_end), issue 40 H: the first host read each
connection to the end before accepting the next, so a silent connection on the hosts' port held it to the deadline
(through a stop too), and with three hosts the real hosts' word was never read; a host that connected again left its
earlier socket open. Real sockets on 127.0.0.1, the first host in a thread, with the product's own bound."""

from __future__ import annotations

import socket
import threading
import time

from conftest import free_port
from opentc_toolkit.hosts_end import END, wait_for_every_host
from opentc_toolkit.plan import DEFAULT_HOSTS_END_TIMEOUT

HOSTS = ["algo-1", "algo-2", "algo-3"]


class FirstHost(threading.Thread):
    """wait_for_every_host as algo-1, with the default bound; `missing` and `seconds` once it returned."""

    def __init__(self, port: int, stopped=lambda: False):
        super().__init__(daemon=True)
        self.port, self.stopped = port, stopped
        self.missing: list[str] | None = None
        self.seconds = 0.0

    def run(self) -> None:
        started = time.monotonic()
        self.missing = wait_for_every_host(HOSTS, "algo-1", self.port, DEFAULT_HOSTS_END_TIMEOUT, self.stopped)
        self.seconds = time.monotonic() - started


def connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def say(port: int, host: str) -> socket.socket:
    conn = connect(port)
    conn.sendall(host.encode() + b"\n")
    return conn


def answer(conn: socket.socket) -> bytes:
    conn.settimeout(10)
    try:
        return conn.recv(16)
    finally:
        conn.close()


def test_a_silent_connection_first_holds_up_neither_real_host():
    assert DEFAULT_HOSTS_END_TIMEOUT == 60
    port = free_port()
    first = FirstHost(port)
    first.start()
    silent = connect(port)                       # connects and says nothing
    try:
        time.sleep(0.5)
        hosts = [say(port, "algo-2"), say(port, "algo-3")]
        first.join(15)
        assert not first.is_alive(), "still waiting with both hosts' word in"
        assert first.missing == [] and first.seconds < 15
        assert [answer(conn) for conn in hosts] == [END, END]
    finally:
        silent.close()


def test_a_stop_ends_the_wait_with_a_silent_connection_open():
    port = free_port()
    at = time.monotonic() + 1.0
    first = FirstHost(port, stopped=lambda: time.monotonic() >= at)
    first.start()
    silent = connect(port)
    try:
        first.join(15)
        assert not first.is_alive() and first.seconds < 15
        assert first.missing == ["algo-2", "algo-3"]
    finally:
        silent.close()


def test_a_host_that_connects_again_has_its_earlier_connection_closed():
    port = free_port()
    first = FirstHost(port)
    first.start()
    earlier = say(port, "algo-2")
    time.sleep(0.5)
    again = say(port, "algo-2")
    time.sleep(0.5)
    earlier.settimeout(10)
    assert earlier.recv(16) == b"", "the earlier connection is closed, not left open"
    earlier.close()
    third = say(port, "algo-3")
    first.join(15)
    assert first.missing == []
    assert [answer(again), answer(third)] == [END, END]
