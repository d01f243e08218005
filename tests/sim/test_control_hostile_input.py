"""The control port under hostile input: every answer is a 4xx with a reason, never a 5xx; slow clients are cut off.

The app is served exactly as the runtime serves it (``create_control_app`` behind an AppRunner with
``http_limits.SERVER_LIMITS``), with a shorter request deadline so the slow-client case stays quick.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web

from specdecode_runtime.contract import http_limits
from specdecode_runtime.contract.step_table import STEPS_PATH, StepTable
from specdecode_runtime.control import create_control_app

AUTH = {"Authorization": "Bearer s3cret"}
JSON = {**AUTH, "Content-Type": "application/json"}


class Sink:
    candidates = [0, 1, 3, 5]

    def __init__(self):
        self.table = StepTable.single(3)
        self.applied = []

    def current_table(self):
        return self.table

    def apply_table(self, table):
        self.applied.append(table)
        self.table = table
        return {"queued": len(self.applied)}


@pytest.fixture
async def served(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret")
    sink = Sink()
    limits = {**http_limits.SERVER_LIMITS, "keepalive_timeout": 1.0}
    runner = web.AppRunner(create_control_app(sink, token), access_log=None, **limits)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    async with aiohttp.ClientSession(f"http://{host}:{port}") as session:
        yield Served(session, sink, host, port)
    await runner.cleanup()


class Served:
    def __init__(self, session, sink, host, port):
        self.session, self.sink, self.host, self.port = session, sink, host, port

    def put(self, path, **kw):
        return self.session.put(path, **kw)


def body(steps) -> bytes:
    return json.dumps({"table": [{"minBatch": 1, "steps": steps}]}).encode()


HOSTILE = {
    "bool steps": (JSON, b'{"table": [{"minBatch": 1, "steps": true}]}', 422),
    "float steps": (JSON, b'{"table": [{"minBatch": 1, "steps": 3.0}]}', 422),
    "string steps": (JSON, b'{"table": [{"minBatch": 1, "steps": "3"}]}', 422),
    "4301-digit integer": (JSON, b'{"table": [{"minBatch": 1, "steps": ' + b"9" * 4301 + b"}]}", 400),
    "20-digit integer": (JSON, b'{"table": [{"minBatch": 1, "steps": ' + b"9" * 20 + b"}]}", 400),
    "huge in-range integer steps": (JSON, body(10**17), 422),
    "100000-deep nesting": (JSON, b"[" * 100_000 + b"]" * 100_000, 413),
    "10-deep nesting": (JSON, b'{"table": ' + b"[" * 10 + b"]" * 10 + b"}", 400),
    "text/plain": ({**AUTH, "Content-Type": "text/plain"}, body(3), 415),
    "no content type": (AUTH, body(3), 415),
    "form body": ({**AUTH, "Content-Type": "application/x-www-form-urlencoded"}, b"steps=3", 415),
    "not JSON": (JSON, b"{table: [", 400),
    "NaN": (JSON, b'{"table": [{"minBatch": 1, "steps": NaN}]}', 400),
    "not UTF-8": (JSON, b'{"table": "\xff\xfe"}', 400),
    "1 MB body": (JSON, b'{"pad": "' + b"x" * 1_000_000 + b'"}', 413),
    "top-level list": (JSON, b"[1, 2, 3]", 422),
    "empty body": (JSON, b"", 400),
    "non-candidate steps": (JSON, body(4), 422),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_bodies_get_a_4xx_with_a_reason(served, case):
    headers, data, status = HOSTILE[case]
    async with served.put(STEPS_PATH, data=data, headers=headers) as resp:
        assert resp.status == status, await resp.text()
        assert (await resp.json())["error"]
    assert served.sink.applied == []  # nothing reached the engine


async def test_a_valid_table_still_applies(served):
    async with served.put(STEPS_PATH, data=body(5), headers=JSON) as resp:
        assert resp.status == 200
    assert served.sink.table.pairs() == [(1, 5)]


async def test_slow_clients_are_disconnected_at_the_request_deadline(served, monkeypatch):
    """A connection that trickles its request head (slowloris) or its body is closed, not held."""
    monkeypatch.setattr(http_limits, "REQUEST_DEADLINE_SECONDS", 1.0)
    host, port = served.host, served.port
    started = time.monotonic()

    async def slow_head() -> float:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"PUT {STEPS_PATH} HTTP/1.1\r\nHost: x\r\n".encode())
        try:
            for _ in range(40):  # one header line every 0.1 s, never the blank line that ends the head
                writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
                if reader.at_eof():
                    break
                await asyncio.sleep(0.1)
            await asyncio.wait_for(reader.read(), timeout=5)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()
        return time.monotonic() - started

    async def slow_body() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            (
                f"PUT {STEPS_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            ).encode()
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=5)
        writer.close()
        return answer

    heads = await asyncio.gather(*(slow_head() for _ in range(20)))
    assert max(heads) < 3.5, heads  # keepalive_timeout 1 s in this fixture
    answer = await slow_body()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
