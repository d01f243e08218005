"""Client-side CPU per API request: the operator's client (``kube_client.KubeClient``) against one bare aiohttp
session on the event loop, for the two requests a new object's pass is made of (a GET that finds nothing, a
server-side apply that creates a ConfigMap), issued 8 at a time as a pass does. The committed result
(``results/kube_client_cost.json``) was measured while the operator's client was the kubernetes package's client
in a thread pool; it is why the operator now uses one aiohttp session on its loop.

    python bench/operator/kube_client_cost.py --envtest --json     # a fresh kube-apiserver + etcd (TLS, client certificate)
    python bench/operator/kube_client_cost.py --json               # the API emulator (plain HTTP)

What decides whether the operator should move to an asyncio client: the operator process is bound to one core by
the GIL, so each millisecond of client CPU per request is N x requests-per-object milliseconds of wave.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
import uuid
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def configmap(ns: str, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"runtime.yaml": "x" * 2000},
    }


async def with_kube_client(cfg, ns: str, n: int, prefix: str) -> dict:
    from specdecode_operator.kube_client import KubeClient

    client = KubeClient(cfg, workers=16)
    try:
        await client.get("v1", "configmaps", ns, "warm-up")
        out = {}
        for what in ("get_missing", "apply_create"):
            started, cpu = time.perf_counter(), time.process_time()
            for i in range(0, n, 8):
                if what == "get_missing":
                    calls = [client.get("v1", "configmaps", ns, f"none-{j}") for j in range(i, i + 8)]
                else:
                    calls = [client.apply(configmap(ns, f"{prefix}-k-{j}"), "configmaps") for j in range(i, i + 8)]
                await asyncio.gather(*calls)
            out[what] = {
                "cpu_ms_per_request": round((time.process_time() - cpu) * 1000 / n, 3),
                "wall_ms_per_request": round((time.perf_counter() - started) * 1000 / n, 3),
            }
        return out
    finally:
        await client.close()


async def with_aiohttp(cfg, ns: str, n: int, prefix: str) -> dict:
    host = cfg.host.rstrip("/")
    ctx = None
    if host.startswith("https"):
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers = {"Accept": "application/json"}
    token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if token:
        headers["Authorization"] = token if token.startswith("Bearer") else f"Bearer {token}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=16), headers=headers) as http:

        async def get(name):
            async with http.get(f"{host}/api/v1/namespaces/{ns}/configmaps/{name}") as r:
                return r.status, await r.json()

        async def apply(obj):
            async with http.patch(
                f"{host}/api/v1/namespaces/{ns}/configmaps/{obj['metadata']['name']}",
                params={"fieldManager": "bench", "force": "true"},
                data=json.dumps(obj),
                headers={"Content-Type": "application/apply-patch+yaml"},
            ) as r:
                return r.status, await r.json()

        await get("warm-up")
        out = {}
        for what in ("get_missing", "apply_create"):
            started, cpu = time.perf_counter(), time.process_time()
            for i in range(0, n, 8):
                if what == "get_missing":
                    calls = [get(f"none-{j}") for j in range(i, i + 8)]
                else:
                    calls = [apply(configmap(ns, f"{prefix}-a-{j}")) for j in range(i, i + 8)]
                results = await asyncio.gather(*calls)
                assert all(s in (200, 201, 404) for s, _ in results), results[:1]
            out[what] = {
                "cpu_ms_per_request": round((time.process_time() - cpu) * 1000 / n, 3),
                "wall_ms_per_request": round((time.perf_counter() - started) * 1000 / n, 3),
            }
        return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--envtest", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import kubernetes

    env = server = None
    if args.envtest:
        from tests.k8s.envtest import Environment

        env = Environment().start()
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(env.kubeconfig), client_configuration=cfg)
        ns = "default"
    else:
        from specdecode_operator.testbed.runner import EmulatorServer

        server = EmulatorServer().__enter__()
        cfg = kubernetes.client.Configuration()
        cfg.host = server.url
        ns = "default"
    try:
        prefix = uuid.uuid4().hex[:6]
        result = {
            "api_server": "kube-apiserver (envtest)" if env else "emulator",
            "requests_per_kind": args.requests,
            "concurrency": 8,
            "operator_client": asyncio.run(with_kube_client(cfg, ns, args.requests, prefix)),
            "aiohttp_on_the_loop": asyncio.run(with_aiohttp(cfg, ns, args.requests, prefix)),
        }
    finally:
        if env is not None:
            env.stop()
        if server is not None:
            server.__exit__(None, None, None)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
