import aiohttp
from aiohttp import web

from specdecode_operator.tuning.pod_client import push_all, query_prometheus
from specdecode_runtime.contract.step_table import STEPS_PATH


async def _serve(app):
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def test_push_sends_table_with_bearer_token_and_reports_failures():
    seen = []

    async def put(request):
        seen.append((request.headers.get("Authorization"), await request.json()))
        return (
            web.json_response({"ok": True})
            if request.headers.get("Authorization") == "Bearer s3cret"
            else web.json_response({"error": "bad token"}, status=401)
        )

    app = web.Application()
    app.router.add_put(STEPS_PATH, put)
    runner, url = await _serve(app)
    body = {"table": [{"minBatch": 1, "steps": 3}]}
    try:
        async with aiohttp.ClientSession() as s:
            res = await push_all(s, {"a": url, "down": "http://127.0.0.1:1"}, body, "s3cret", timeout_s=2)
            bad = await push_all(s, {"a": url}, body, "wrong")
    finally:
        await runner.cleanup()
    by = {r.pod: r for r in res}
    assert by["a"].ok and seen[0] == ("Bearer s3cret", body)
    assert not by["down"].ok and by["down"].status is None
    assert not bad[0].ok and bad[0].status == 401


async def test_prometheus_path_builds_snapshots_per_pod():
    async def query(request):
        q = request.query["query"]
        result = []
        if q.startswith("specdecode_verify_cycles_total"):
            result = [
                {
                    "metric": {
                        "__name__": "specdecode_verify_cycles_total",
                        "pod": "p0",
                        "namespace": "ns",
                        "bucket": "1",
                    },
                    "value": [1, "42"],
                }
            ]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner, url = await _serve(app)
    try:
        async with aiohttp.ClientSession() as s:
            snaps = await query_prometheus(s, url, "ns", ["p0", "p1"], 10.0)
            broken = await query_prometheus(s, "http://127.0.0.1:1", "ns", ["p0"], 10.0, timeout_s=2)
    finally:
        await runner.cleanup()
    by = {x.pod: x for x in snaps}
    assert by["p0"].ok and by["p0"].buckets["1"].cycles == 42
    assert not by["p1"].ok
    assert not broken[0].ok and "Prometheus" in broken[0].error
