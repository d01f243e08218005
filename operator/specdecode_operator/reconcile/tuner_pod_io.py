"""The tuner's HTTP traffic with the pods (and Prometheus): reading counters and pushing step tables.

Why one HTTP session for the whole operator (``open_session``, made by the kopf startup handler and closed by the
cleanup handler, after kopf has stopped the daemons): a ``ClientSession`` per object costs a connector, a cookie
jar and their buffers per object (~15-20 MB at 500 objects) and re-creating them at every daemon start. The
shared one is bounded: ``HTTP_LIMIT`` connections in all, ``HTTP_LIMIT_PER_HOST`` per pod port (an object sends a
pod one scrape and at most one push per interval); the request timeout includes waiting for a free connection,
so the total limit is well above what one interval of every object needs at once. Cookies are never kept (a
``DummyCookieJar``): nothing a pod sends may leak into another object's requests.

Bad answers are data, not exceptions: a failed scrape is a ``down`` snapshot, a failed push a ``PushResult``.
"""

from __future__ import annotations

import asyncio
from typing import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.metrics import NCCL_LATENCY

from ..render import names
from ..tuner import actuate, scrape
from ..tuner.tuner import Decision, Tuner
from . import secret
from .apply import ApiError
from .tuner_pods import Target

HTTP_LIMIT = 256
MAX_SCRAPE_BYTES = 4 * 1024 * 1024  # a runtime pod's /metrics is ~10-50 kB; anything near this is not ours
HTTP_LIMIT_PER_HOST = 4


def open_session() -> aiohttp.ClientSession:
    """The operator's one session for pod and Prometheus requests; call on the event loop that will use it."""
    connector = aiohttp.TCPConnector(limit=HTTP_LIMIT, limit_per_host=HTTP_LIMIT_PER_HOST)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


def nccl_from_text(text: str) -> dict[str, float]:
    """``specdecode_nccl_latency_seconds{op,bytes}`` (the runtime's startup preflight) as microseconds by
    ``op/bytes``; malformed text gives nothing (scrape.parse_metrics reports it)."""
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


async def read_counters(session: aiohttp.ClientSession, config, ns: str, targets: list[Target],
                        now: float, costs_for: Callable[[str], bool] | None = None) -> tuple[list, dict]:
    """(snapshots, mean NCCL latencies) of the pods: their /metrics, or the same series from Prometheus.
    ``costs_for(pod)`` says whether to parse the pod's start-up cost probe this time (``Tuner.wants_costs``)."""
    timeout = config.scrape_timeout
    if not targets:
        return [], {}
    if config.prometheus_url:
        pods = [t.pod for t in targets]
        snaps = await actuate.query_prometheus(session, config.prometheus_url, ns, pods, now, timeout_s=timeout)
        return snaps, await _prometheus_nccl(session, config.prometheus_url, ns, pods, timeout)

    async def one(t: Target):
        if t.metrics_url is None:
            return scrape.down(t.pod, now, "the endpoint has no port named http"), {}
        try:
            async with session.get(t.metrics_url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status != 200:
                    return scrape.down(t.pod, now, f"GET {t.metrics_url} returned HTTP {resp.status}"), {}
                body = bytearray()  # bounded: a pod's answer is untrusted (the total timeout bounds the time)
                if (resp.content_length or 0) <= MAX_SCRAPE_BYTES:
                    async for chunk in resp.content.iter_chunked(64 * 1024):
                        body += chunk
                        if len(body) > MAX_SCRAPE_BYTES:
                            break
                if len(body) > MAX_SCRAPE_BYTES or (resp.content_length or 0) > MAX_SCRAPE_BYTES:
                    return scrape.down(t.pod, now, f"GET {t.metrics_url}: body larger than {MAX_SCRAPE_BYTES} "
                                       "bytes (metrics too large)"), {}
                text = body.decode("utf-8")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, UnicodeDecodeError) as exc:
            return scrape.down(t.pod, now, f"GET {t.metrics_url} failed: {type(exc).__name__}: {exc}"), {}
        costs = costs_for(t.pod) if costs_for is not None else True
        return scrape.parse_metrics(text, t.pod, now, costs=costs), nccl_from_text(text)

    results = await asyncio.gather(*(one(t) for t in targets))
    return [r[0] for r in results], mean_nccl([r[1] for r in results if r[1]])


async def _prometheus_nccl(session, url: str, ns: str, pods: list[str], timeout: float) -> dict[str, float]:
    sel = f'namespace="{ns}",pod=~"{"|".join(pods)}"'
    try:
        async with session.get(url.rstrip("/") + "/api/v1/query", params={"query": f"{NCCL_LATENCY}{{{sel}}}"},
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            data = await resp.json(content_type=None)
        per_pod: dict[str, dict[str, float]] = {}
        for s in data["data"]["result"]:
            labels, value = s["metric"], float(s["value"][1])
            if value == value and value >= 0:
                per_pod.setdefault(labels.get("pod", ""), {})[
                    f"{labels.get('op', '?')}/{labels.get('bytes', '?')}"] = round(value * 1e6, 2)
        return mean_nccl(list(per_pod.values()))
    except Exception:  # optional field: absent when Prometheus cannot say
        return {}


class TablePusher:
    """Live mode's actuation for one object: PUT the step table to the pods that do not run it yet, with the
    bearer token from the operator's Secret (cached; a 401 re-reads it once, the Secret may have been re-created).

    ``warn(reason, message)`` posts a Warning Event once per distinct message; ``clear(reason)`` re-arms it."""

    def __init__(self, session: aiohttp.ClientSession, client, config, metrics, log,
                 warn: Callable[[str, str], None], clear: Callable[[str], None]):
        self.session, self.client, self.config, self.metrics, self.log = session, client, config, metrics, log
        self.warn, self.clear = warn, clear
        self.token: str | None = None

    async def push(self, ns: str, name: str, tuner: Tuner, d: Decision, targets: list[Target], snaps: list) -> None:
        """Until the tuner's first change the pods run the rendered step count, which is its starting table; after
        an operator restart that keeps the table the pods already run until the tuner decides again."""
        if tuner.changes == 0 and not d.changed:
            return
        stale = _stale(tuner, d, targets, snaps)
        if not stale:
            return
        token = await self._token(ns, name)
        if token is None:
            self.warn("StepTablePushFailed", f"no control token in Secret {names.control_secret(name)} yet")
            return
        body = d.step_table_body()
        urls = {t.pod: t.control_url for t in stale}
        timeout = self.config.scrape_timeout
        results = await actuate.push_all(self.session, urls, body, token, timeout)
        if any(r.status == 401 for r in results):
            self.token = None
            token = await self._token(ns, name)
            retry = {r.pod: urls[r.pod] for r in results if r.status == 401}
            if token and retry:
                again = {r.pod: r for r in await actuate.push_all(self.session, retry, body, token, timeout)}
                results = [again.get(r.pod, r) for r in results]
        failed = []
        for r in results:
            self.metrics.tuner_pushes.labels("ok" if r.ok else "unauthorized" if r.status == 401 else "error").inc()
            if not r.ok:
                failed.append(f"{r.pod}: {r.status or ''} {r.detail}".strip())
        if failed:
            self.warn("StepTablePushFailed", "step table not applied on " + "; ".join(sorted(failed)))
        else:
            self.clear("StepTablePushFailed")

    async def _token(self, ns: str, name: str) -> str | None:
        if self.token is None:
            try:
                obj = await self.client.get("v1", "secrets", ns, names.control_secret(name))
            except ApiError as e:
                self.log.warning("tuner %s/%s: control token not read: %s", ns, name, e)
                return None
            self.token = secret.token_of(obj)
        return self.token


def _stale(tuner: Tuner, d: Decision, targets: list[Target], snaps: list) -> list[Target]:
    """Pods with a control port whose published step counts differ from the table (all of them after a change,
    and pods not scraped cleanly this interval)."""
    want = dict(d.table)
    by_pod = {s.pod: s for s in snaps}
    lo_of = tuner.labels
    stale = []
    for t in targets:
        snap = by_pod.get(t.pod)
        if t.control_url is None:
            continue
        if d.changed or snap is None or not snap.ok:
            stale.append(t)
        elif any(b.num_steps is not None and label in lo_of and b.num_steps != want.get(lo_of[label])
                 for label, b in snap.buckets.items()):
            stale.append(t)
    return stale
