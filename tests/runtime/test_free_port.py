"""The self-test's ports come from below the kernel's ephemeral range, so no outgoing connection can take one
between its choice and the server's bind (a launch failed with "address already in use" on a busy machine)."""

from __future__ import annotations

import socket

from specdecode_runtime.selftest import runner


def test_ports_are_below_the_ephemeral_range_and_free_on_every_address():
    for _ in range(50):
        port = runner.free_port()
        assert runner.LISTEN_PORTS[0] <= port < runner.LISTEN_PORTS[1]
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))  # still free to listen on


def test_a_taken_port_is_never_handed_out(monkeypatch):
    held = socket.socket()
    held.bind(("0.0.0.0", 0))
    taken = held.getsockname()[1]
    monkeypatch.setattr(runner, "LISTEN_PORTS", (taken, taken + 1))  # the one port in range is taken
    try:
        assert runner.free_port() != taken
    finally:
        held.close()
