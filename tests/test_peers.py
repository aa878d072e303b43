"""Waiting for the other hosts: real name resolution for names that resolve here, a scripted resolver for
a host that appears late (a name service that is slow to learn a new host cannot be staged otherwise)."""

import pytest

from opentc_toolkit.peers import PeersUnreachable, wait_for_hosts


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_hosts_that_resolve_return_at_once():
    wait_for_hosts(["localhost", "127.0.0.1"], timeout=0)


def test_a_host_that_appears_late_is_waited_for():
    clock, attempts = Clock(), []

    def resolve(host):
        attempts.append(host)
        if host == "algo-2" and clock.now < 3:
            raise OSError("Name or service not known")

    wait_for_hosts(["algo-2", "algo-3"], timeout=10, resolve=resolve, clock=clock, sleep=clock.sleep)
    assert attempts.count("algo-2") > 1 and attempts[-1] == "algo-3"
    assert 3 <= clock.now < 10


def test_the_host_that_never_appears_is_named_after_the_timeout():
    clock = Clock()

    def resolve(host):
        if host == "algo-3":
            raise OSError("Name or service not known")

    with pytest.raises(PeersUnreachable, match="host algo-3 could not be reached: its name did not resolve within 7 s"):
        wait_for_hosts(["algo-2", "algo-3"], timeout=7, resolve=resolve, clock=clock, sleep=clock.sleep)
    assert 7 <= clock.now <= 12


def test_a_stopped_job_stops_waiting():
    attempts = []

    def never_resolves(host):
        attempts.append(host)
        raise OSError("Name or service not known")

    wait_for_hosts(["algo-2"], timeout=100, resolve=never_resolves, stopped=lambda: len(attempts) >= 2,
                   sleep=lambda seconds: None)
    assert attempts == ["algo-2", "algo-2"]
