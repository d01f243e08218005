import pytest
from aiohttp import web
from helpers import FakePod

from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_operator.tuning.pod_client import scrape


def test_parses_contract_counters_per_bucket_and_position():
    pod = FakePod()
    pod.run(50, batch=1, steps=3, alphas=[0.8])
    pod.metrics.set_candidates([0, 1, 3])
    snap = pod.snapshot(10.0)
    assert snap.ok and snap.simulated and not snap.problems
    b = snap.buckets["1"]
    assert b.cycles == 50 and b.requests == 50 and b.draft_steps == 150 and b.num_steps == 3
    assert b.attempts[1] == 50 and 0 < b.accepted[1] <= 50
    assert set(b.phase_sum) == {"draft", "verify", "draft_extend", "other"}
    assert b.phase_sum["verify"] == pytest.approx(0.5)
    assert snap.candidates == [0, 1, 3]
    assert snap.tokens_total == b.requests + sum(b.accepted.values())


def test_nan_samples_are_reported_not_raised():
    text = 'specdecode_verify_cycles_total{bucket="1"} NaN\nspecdecode_tokens_generated_total 5\n'
    snap = parse_metrics(text, "p", 1.0)
    assert snap.problems and "NaN" in snap.problems[0].replace("nan", "NaN")


@pytest.mark.parametrize("text", ["this is { not prometheus", "", "other_metric 1\n"])
def test_garbage_or_foreign_text_marks_the_pod_unusable(text):
    snap = parse_metrics(text, "p", 1.0)
    assert not snap.ok and snap.error


async def test_fetch_reports_down_and_http_errors_without_raising(aiohttp_unused_port=None):
    pod = FakePod()
    pod.run(5, 1, 2, [0.7])

    async def ok(_):
        return web.Response(text=pod.text())

    async def broken(_):
        return web.Response(status=500, text="boom")

    app = web.Application()
    app.router.add_get("/metrics", ok)
    app.router.add_get("/broken", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    import aiohttp

    try:
        async with aiohttp.ClientSession() as s:
            urls = {
                "good": f"http://127.0.0.1:{port}/metrics",
                "bad": f"http://127.0.0.1:{port}/broken",
                "down": "http://127.0.0.1:1/metrics",
            }
            snaps = [(await scrape(s, url, pod, 1.0, timeout_s=2.0))[0] for pod, url in urls.items()]
    finally:
        await runner.cleanup()
    by = {s.pod: s for s in snaps}
    assert by["good"].ok and by["good"].buckets["1"].cycles == 5
    assert "HTTP 500" in by["bad"].error
    assert not by["down"].ok and "failed" in by["down"].error
