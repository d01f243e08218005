"""Runtime pods whose /metrics hang, return garbage, refuse (401) or answer 30 MB: each scrape ends within the
scrape timeout as a ``down``/invalid snapshot with a reason (MetricsAvailable=False), and the operator's memory
stays bounded (the body is read up to ``MAX_SCRAPE_BYTES``, not buffered whole)."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from types import SimpleNamespace

import pytest
from aiohttp import web

from specdecode_operator.tuning import pod_client
from specdecode_operator.tuning.pods import Target

THIRTY_MB = 30 * 1024 * 1024


async def _hang(_):
    await asyncio.sleep(3600)


async def _garbage(_):
    return web.Response(body=b"\x00\xffnot prometheus {{{ 12 \n" * 1000, content_type="text/plain")


async def _unauthorized(_):
    return web.Response(status=401, text="no")


async def _stream_30mb(request, declare: bool):
    """30 MB written in 1 kB chunks, so the server side of this test holds no large buffer itself."""
    chunk = b"# padding " + b"x" * 1013 + b"\n"
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    if declare:
        resp.content_length = (THIRTY_MB // len(chunk)) * len(chunk)
    await resp.prepare(request)
    try:
        for _i in range(THIRTY_MB // len(chunk)):
            await resp.write(chunk)
    except (ConnectionError, RuntimeError):
        pass
    return resp


async def _huge(request):
    return await _stream_30mb(request, declare=False)  # chunked: no Content-Length to go by


async def _huge_declared(request):
    return await _stream_30mb(request, declare=True)


ENDPOINTS = {
    "hang": _hang,
    "garbage": _garbage,
    "unauthorized": _unauthorized,
    "huge": _huge,
    "huge-declared": _huge_declared,
}


@pytest.fixture
async def pods():
    app = web.Application()
    for name, handler in ENDPOINTS.items():
        app.router.add_get(f"/{name}/metrics", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    yield {
        name: Target(pod=name, ip=host, metrics_url=f"http://{host}:{port}/{name}/metrics", control_url=None)
        for name in ENDPOINTS
    }
    await runner.cleanup()


@pytest.mark.timeout(60)
async def test_hostile_metrics_endpoints_are_bounded_in_time_and_memory(pods):
    config = SimpleNamespace(scrape_timeout=2.0, prometheus_url=None)
    session = pod_client.open_session()
    try:
        tracemalloc.start()
        started = time.monotonic()
        snaps, _ = await pod_client.read_counters(session, config, "ns", list(pods.values()), now=0.0)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        await session.close()
    by_pod = {s.pod: s for s in snaps}
    from tests.chaos.chaoslib import Outcome

    Outcome(
        "hostile /metrics",
        "one scrape of 5 pods whose /metrics hang, return garbage, 401, 30 MB chunked, 30 MB with Content-Length",
        round(elapsed, 2),
        0,
        0,
        0,
        round(peak / 2**20, 1),
        backend="aiohttp",
        notes={
            "peak is": "Python allocations during the scrape (tracemalloc), not process RSS",
            "reasons": sorted({(s.error or "; ".join(s.problems))[:60] for s in snaps}),
        },
    ).record()
    assert elapsed < config.scrape_timeout + 1.5, elapsed  # the hanging pod costs one timeout, in parallel
    assert peak < 3 * pod_client.MAX_SCRAPE_BYTES, f"peak {peak / 1e6:.1f} MB while reading 2 x 30 MB bodies"
    assert "TimeoutError" in by_pod["hang"].error
    assert "HTTP 401" in by_pod["unauthorized"].error
    assert "metrics too large" in by_pod["huge"].error
    assert "metrics too large" in by_pod["huge-declared"].error
    garbage = by_pod["garbage"]
    assert not garbage.ok and (garbage.error or garbage.problems)
