"""The tuner's I/O toward pods and Prometheus: push a step table, or read the counters from a Prometheus server.

Kept apart from the pure Tuner so the kopf timer owns every network call and its failure handling; each call here
returns a result object instead of raising, because one unreachable pod must never stop the others being tuned.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from specdecode_runtime.control import STEPS_PATH

from .scrape import PodSnapshot, down, parse_metrics


@dataclass(frozen=True)
class PushResult:
    pod: str
    ok: bool
    status: int | None
    detail: str


async def push_table(
    session: aiohttp.ClientSession, base_url: str, pod: str, body: dict, token: str, timeout_s: float = 5.0
) -> PushResult:
    """PUT the table to one pod's control endpoint with the bearer token from the operator's Secret."""
    url = base_url.rstrip("/") + STEPS_PATH
    try:
        async with session.put(url, json=body, headers={"Authorization": f"Bearer {token}"},
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = (await resp.content.read(2048)).decode("utf-8", "replace")  # bounded: pods are untrusted
            return PushResult(pod, resp.status == 200, resp.status, text[:500])
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return PushResult(pod, False, None, f"{type(exc).__name__}: {exc}")


async def push_all(
    session: aiohttp.ClientSession, control_urls: dict[str, str], body: dict, token: str, timeout_s: float = 5.0
) -> list[PushResult]:
    return list(await asyncio.gather(*(push_table(session, url, pod, body, token, timeout_s)
                                       for pod, url in control_urls.items())))


# The counters the estimator needs, as instant vectors per pod (Prometheus keeps the raw counter values, so the
# estimator's own deltas and reset handling apply unchanged).
PROM_METRICS = (
    "specdecode_verify_cycles_total",
    "specdecode_position_attempts_total",
    "specdecode_position_accepted_total",
    "specdecode_cycle_seconds_sum",
    "specdecode_cycle_seconds_count",
    "specdecode_draft_steps_total",
    "specdecode_requests_verified_total",
    "specdecode_tokens_generated_total",
    "specdecode_num_steps",
    "specdecode_cost_seconds",  # the start-up cost probe; constant per pod, a few dozen series
)


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


async def query_prometheus(
    session: aiohttp.ClientSession,
    prometheus_url: str,
    namespace: str,
    pods: list[str],
    time: float,
    pod_label: str = "pod",
    timeout_s: float = 10.0,
) -> list[PodSnapshot]:
    """One instant query per metric via ``/api/v1/query`` and regrouped per pod into exposition text, so the same
    parser and estimator serve both paths. A failed query marks every pod down for this interval."""
    sel = f'namespace="{_label_value(namespace)}",{pod_label}=~"{"|".join(_label_value(p) for p in pods)}"'
    texts: dict[str, list[str]] = {p: [] for p in pods}
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    for metric in PROM_METRICS:
        try:
            async with session.get(url, params={"query": f"{metric}{{{sel}}}", "time": str(time)},
                                   timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            return [down(p, time, f"Prometheus query failed: {type(exc).__name__}: {exc}") for p in pods]
        if resp.status != 200 or data.get("status") != "success":
            err = data.get("error", f"HTTP {resp.status}") if isinstance(data, dict) else f"HTTP {resp.status}"
            return [down(p, time, f"Prometheus query {metric} failed: {err}") for p in pods]
        for series in data.get("data", {}).get("result", []):
            labels = dict(series.get("metric", {}))
            pod = labels.get(pod_label)
            if pod not in texts:
                continue
            keep = {k: v for k, v in labels.items()
                    if k in ("bucket", "position", "phase", "simulated", "stage", "steps", "batch")}
            lab = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(keep.items()))
            texts[pod].append(f"{metric}{{{lab}}} {series['value'][1]}")
    return [parse_metrics("\n".join(lines) + "\n", p, time) if lines else down(p, time, "no series in Prometheus")
            for p, lines in texts.items()]
