"""The step endpoint's bearer check on raw header bytes, sent over a plain socket as a hostile client would.

An HTTP client library or the server's parser trims spaces and tabs around a header value, so ``Bearer `` never
reaches the check with an empty token after it. Bytes the parser leaves alone but Python's ``str.strip`` removes
(a UTF-8 no-break space, ``\\xc2\\xa0``) do: with no token mounted, such a header is an empty token compared with
an empty expected token, and it must still be refused.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from specdecode_runtime.contract import http_limits
from specdecode_runtime.contract.step_table import STEPS_PATH, StepTable
from specdecode_runtime.control import create_control_app

NBSP = b"\xc2\xa0"


class Sink:
    candidates = [1, 3]

    def __init__(self):
        self.applied = []

    def current_table(self):
        return StepTable.single(3)

    def apply_table(self, table):
        self.applied.append(table)
        return {"queued": len(self.applied)}


async def raw_status(host: str, port: int, method: str, authorization: bytes | None, body: bytes = b"") -> int:
    """The status code for one request written byte for byte."""
    reader, writer = await asyncio.open_connection(host, port)
    head = f"{method} {STEPS_PATH} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
    if authorization is not None:
        head += b"Authorization: " + authorization + b"\r\n"
    if body:
        head += b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
    writer.write(head + b"\r\n" + body)
    await writer.drain()
    line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=10)
    writer.close()
    return int(line.split()[1])


async def serve(token_file, sink):
    runner = web.AppRunner(create_control_app(sink, token_file), access_log=None, **http_limits.SERVER_LIMITS)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][:2]


TABLE = b'{"table": [{"minBatch": 1, "steps": 1}]}'
# Unicode spaces the parser passes through (control bytes such as \x0b are refused by the parser itself, with 400)
BLANKS = [b"Bearer " + NBSP, b"Bearer " + NBSP + NBSP, b"Bearer \xe2\x80\x83"]


@pytest.mark.parametrize("mounted", ["absent", "empty", "blank"])
@pytest.mark.parametrize("header", BLANKS, ids=["nbsp", "two-nbsp", "em-space"])
async def test_a_blank_token_is_refused_when_none_is_mounted(tmp_path, mounted, header):
    token = tmp_path / "token"
    if mounted == "empty":
        token.write_text("")
    elif mounted == "blank":
        token.write_text(" \n\t")
    sink = Sink()
    runner, (host, port) = await serve(token, sink)
    try:
        assert await raw_status(host, port, "GET", header) == 401
        assert await raw_status(host, port, "PUT", header, TABLE) == 401
    finally:
        await runner.cleanup()
    assert sink.applied == []


async def test_raw_requests_reach_the_check(tmp_path):
    """The raw requests are well formed: the mounted token is accepted over the same path, blanks are not."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    sink = Sink()
    runner, (host, port) = await serve(token, sink)
    try:
        assert await raw_status(host, port, "GET", b"Bearer s3cret") == 200
        assert await raw_status(host, port, "PUT", b"Bearer s3cret", TABLE) == 200
        for header in BLANKS + [b"Bearer", b"Bearer s3cret" + NBSP + b"x", b"bearer s3cret", None]:
            assert await raw_status(host, port, "GET", header) == 401, header
    finally:
        await runner.cleanup()
    assert len(sink.applied) == 1
