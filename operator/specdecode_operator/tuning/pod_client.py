"""The operator's only HTTP client toward the runtime pods and Prometheus: read counters, push step tables.

Why one HTTP session for the whole operator (``open_session``, made by the kopf startup handler and closed by the
cleanup handler, after kopf has stopped the daemons): a ``ClientSession`` per object costs a connector, a cookie
jar and their buffers per object (~15-20 MB at 500 objects) and re-creating them at every daemon start. The
shared one is bounded: ``HTTP_LIMIT`` connections in all, ``HTTP_LIMIT_PER_HOST`` per pod port (an object sends a
pod one scrape and at most one push per interval); the request timeout includes waiting for a free connection,
so the total limit is well above what one interval of every object needs at once. Cookies are never kept (a
``DummyCookieJar``): nothing a pod sends may leak into another object's requests.

Every answer is untrusted and bounded (size and time), and bad answers are data, not exceptions: a failed read is
a ``down`` snapshot, a failed push a ``PushResult``, a failed Prometheus query marks the pods down for the
interval. One unreachable pod must never stop the others being tuned.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract import metric_names as contract
from specdecode_runtime.contract.metric_names import NCCL_LATENCY
from specdecode_runtime.contract.step_table import STEPS_PATH

from ..tuner.snapshot import PodSnapshot, down, parse_metrics
from .pods import Target

HTTP_LIMIT = 256
HTTP_LIMIT_PER_HOST = 4
MAX_SCRAPE_BYTES = 4 * 1024 * 1024  # a runtime pod's /metrics is ~10-50 kB; anything near this is not ours
MAX_PUSH_ANSWER_BYTES = 2048
_FAILURES = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def open_session() -> aiohttp.ClientSession:
    """The operator's one session for pod and Prometheus requests; call on the event loop that will use it."""
    connector = aiohttp.TCPConnector(limit=HTTP_LIMIT, limit_per_host=HTTP_LIMIT_PER_HOST)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


# ---------------------------------------------------------------------------------------------- reading counters
async def read_counters(
    session: aiohttp.ClientSession,
    config,
    ns: str,
    targets: list[Target],
    now: float,
    costs_for: Callable[[str], bool] | None = None,
) -> tuple[list, dict]:
    """(snapshots, mean NCCL latencies) of the pods: their /metrics, or the same series from Prometheus
    (``config.prometheus_url``). ``costs_for(pod)`` says whether to parse the pod's start-up cost probe this time
    (``Tuner.wants_costs``)."""
    timeout = config.scrape_timeout
    if not targets:
        return [], {}
    if config.prometheus_url:
        pods = [t.pod for t in targets]
        snaps = await query_prometheus(session, config.prometheus_url, ns, pods, now, timeout_s=timeout)
        return snaps, await _prometheus_nccl(session, config.prometheus_url, ns, pods, timeout)

    async def one(t: Target) -> tuple[PodSnapshot, dict[str, float]]:
        if t.metrics_url is None:
            return down(t.pod, now, "the endpoint has no port named http"), {}
        costs = costs_for(t.pod) if costs_for is not None else True
        return await scrape(session, t.metrics_url, t.pod, now, timeout, costs=costs)

    results = await asyncio.gather(*(one(t) for t in targets))
    return [r[0] for r in results], mean_nccl([r[1] for r in results if r[1]])


async def scrape(
    session: aiohttp.ClientSession, url: str, pod: str, now: float, timeout_s: float, costs: bool = True
) -> tuple[PodSnapshot, dict[str, float]]:
    """GET one pod's /metrics, at most ``MAX_SCRAPE_BYTES`` within ``timeout_s``: (snapshot, NCCL latencies)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return down(pod, now, f"GET {url} returned HTTP {resp.status}"), {}
            body = bytearray()
            if (resp.content_length or 0) <= MAX_SCRAPE_BYTES:
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > MAX_SCRAPE_BYTES:
                        break
            if len(body) > MAX_SCRAPE_BYTES or (resp.content_length or 0) > MAX_SCRAPE_BYTES:
                return down(pod, now, f"GET {url}: body larger than {MAX_SCRAPE_BYTES} bytes (metrics too large)"), {}
            text = body.decode("utf-8")
    except (*_FAILURES, UnicodeDecodeError) as exc:
        return down(pod, now, f"GET {url} failed: {type(exc).__name__}: {exc}"), {}
    return parse_metrics(text, pod, now, costs=costs), nccl_from_text(text)


def nccl_from_text(text: str) -> dict[str, float]:
    """``specdecode_nccl_latency_seconds{op,bytes}`` (the runtime's startup preflight) as microseconds by
    ``op/bytes``; malformed text gives nothing (``parse_metrics`` reports it)."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == NCCL_LATENCY and s.value == s.value and s.value >= 0:
                    out[f"{s.labels.get('op', '?')}/{s.labels.get('bytes', '?')}"] = round(s.value * 1e6, 2)
    except Exception:  # garbage from a pod is reported by parse_metrics, not here
        return {}
    return out


def mean_nccl(per_pod: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for d in per_pod for k in d}
    return {k: round(sum(d[k] for d in per_pod if k in d) / sum(1 for d in per_pod if k in d), 2) for k in sorted(keys)}


# ---------------------------------------------------------------------------------------------- Prometheus
class PrometheusError(Exception):
    pass


def _prometheus_rows() -> list[contract.Metric]:
    """The rows of the metric table the estimator takes per interval, and the cost probe (constant per pod, a few
    dozen series): as instant vectors per pod, Prometheus keeps the raw counter values, so the estimator's own deltas
    and reset handling apply unchanged. The step switches and the captured candidates are read from /metrics only."""
    return [row for row in contract.tuner_rows() if row.axis in (*contract.INTERVAL_AXES, "probe")]


def prometheus_series() -> list[str]:
    """The sample names the Prometheus path queries, one instant query each."""
    return [name for row in _prometheus_rows() for name in row.sample_names()]


def prometheus_labels() -> frozenset[str]:
    """The labels kept from Prometheus's answer: what the rows' axes read, and ``simulated``."""
    return frozenset({"simulated", *(label for row in _prometheus_rows() for label in row.labels)})


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def _selector(namespace: str, pods: list[str], pod_label: str = "pod") -> str:
    return f'namespace="{_label_value(namespace)}",{pod_label}=~"{"|".join(_label_value(p) for p in pods)}"'


async def _instant_query(
    session: aiohttp.ClientSession, prometheus_url: str, query: str, time: float | None, timeout_s: float
) -> list[dict]:
    """The result vector of one ``/api/v1/query`` (at ``time``; None: the server's now); PrometheusError says why
    there is none."""
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    params = {"query": query} if time is None else {"query": query, "time": str(time)}
    try:
        async with session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            data = await resp.json(content_type=None)
    except (*_FAILURES, ValueError) as exc:
        raise PrometheusError(f"{type(exc).__name__}: {exc}") from exc
    if resp.status != 200 or not isinstance(data, dict) or data.get("status") != "success":
        raise PrometheusError(
            data.get("error", f"HTTP {resp.status}") if isinstance(data, dict) else f"HTTP {resp.status}"
        )
    result = (data.get("data") or {}).get("result") or []
    return result if isinstance(result, list) else []


async def query_prometheus(
    session: aiohttp.ClientSession,
    prometheus_url: str,
    namespace: str,
    pods: list[str],
    time: float,
    pod_label: str = "pod",
    timeout_s: float = 10.0,
) -> list[PodSnapshot]:
    """One instant query per metric, regrouped per pod into exposition text, so the same parser and estimator serve
    both paths. A failed query marks every pod down for this interval."""
    sel = _selector(namespace, pods, pod_label)
    texts: dict[str, list[str]] = {p: [] for p in pods}
    kept = prometheus_labels()
    for metric in prometheus_series():
        try:
            result = await _instant_query(session, prometheus_url, f"{metric}{{{sel}}}", time, timeout_s)
        except PrometheusError as e:
            return [down(p, time, f"Prometheus query {metric} failed: {e}") for p in pods]
        for series in result:
            labels = dict(series.get("metric", {}))
            pod = labels.get(pod_label)
            if pod not in texts:
                continue
            keep = {k: v for k, v in labels.items() if k in kept}
            lab = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(keep.items()))
            texts[pod].append(f"{metric}{{{lab}}} {series['value'][1]}")
    return [
        parse_metrics("\n".join(lines) + "\n", p, time) if lines else down(p, time, "no series in Prometheus")
        for p, lines in texts.items()
    ]


async def _prometheus_nccl(
    session: aiohttp.ClientSession, url: str, ns: str, pods: list[str], timeout_s: float
) -> dict[str, float]:
    """Mean NCCL latencies of the pods from Prometheus; an optional field: empty when Prometheus cannot say."""
    try:
        result = await _instant_query(session, url, f"{NCCL_LATENCY}{{{_selector(ns, pods)}}}", None, timeout_s)
        per_pod: dict[str, dict[str, float]] = {}
        for s in result:
            labels, value = s["metric"], float(s["value"][1])
            if value == value and value >= 0:
                per_pod.setdefault(labels.get("pod", ""), {})[f"{labels.get('op', '?')}/{labels.get('bytes', '?')}"] = (
                    round(value * 1e6, 2)
                )
        return mean_nccl(list(per_pod.values()))
    except (PrometheusError, KeyError, TypeError, ValueError, IndexError):
        return {}


# ---------------------------------------------------------------------------------------------- pushing tables
@dataclass(frozen=True)
class PushResult:
    pod: str
    ok: bool
    status: int | None
    detail: str


async def push_table(
    session: aiohttp.ClientSession, base_url: str, pod: str, body: dict, token: str, timeout_s: float = 5.0
) -> PushResult:
    """PUT the table to one pod's control endpoint with ``token``: the deployment's own ServiceAccount token
    (checked by ``control_identity`` before it gets here) or its control-token Secret."""
    url = base_url.rstrip("/") + STEPS_PATH
    try:
        async with session.put(
            url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            text = (await resp.content.read(MAX_PUSH_ANSWER_BYTES)).decode("utf-8", "replace")
            return PushResult(pod, resp.status == 200, resp.status, text[:500])
    except _FAILURES as exc:
        return PushResult(pod, False, None, f"{type(exc).__name__}: {exc}")


async def push_all(
    session: aiohttp.ClientSession, control_urls: dict[str, str], body: dict, token: str, timeout_s: float = 5.0
) -> list[PushResult]:
    """PUT the table to every pod concurrently (``control_urls``: pod name -> control base URL)."""
    return list(
        await asyncio.gather(
            *(push_table(session, url, pod, body, token, timeout_s) for pod, url in control_urls.items())
        )
    )
