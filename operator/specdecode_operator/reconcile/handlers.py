"""kopf registration: watch-cache indexes of our children, and one idempotent reconcile for every trigger.

Why these handler types: ``on.event`` runs on each watch event of a SpecDecodeDeployment without kopf's diff-base
annotation or progress records (nothing of kopf lands in the object but its finalizer, needed by the timer), and
the ``timer`` makes the loop level-based: drift, deleted children and workload readiness are picked up within
``resync_seconds`` even when no event arrives. Errors never escape to kopf's retry machinery: the API client
retries transient faults with backoff, and whatever remains is a Degraded condition until the next tick.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Callable

import kopf
import kubernetes

from ..api.models import GROUP, PLURAL, VERSION
from ..endpoints import Endpoints
from ..opmetrics import OperatorMetrics
from ..render.names import MANAGED_BY
from . import children, tuner_pod_io, tuning_loop
from .apply import KubeClient
from .reconciler import Reconciler

log = logging.getLogger("specdecode.operator")
FINALIZER = "specdecode.io/kopf-finalizer"  # kopf's, required by its timers and daemons
ERROR_RETRY_MAX_SECONDS = 4.0  # a failed pass is retried after 0.5, 1, 2, 4, 4 ... s (with jitter), not at resync


def _split(api_version: str) -> tuple[str, str]:
    return tuple(api_version.split("/")) if "/" in api_version else ("", api_version)  # type: ignore[return-value]


def _index_fn(namespace, body, **_):
    """Key children by (namespace, controller uid); keep a slim record (``children.cache_record``), not the body."""
    uid = children.controller_uid(body)
    return {(namespace, uid): children.cache_record(body)} if uid else {}


def kube_configuration(config) -> kubernetes.client.Configuration:
    """The kubernetes client's configuration: a fixed server (tests, demo), in-cluster, or kubeconfig."""
    if config.server:
        cfg = kubernetes.client.Configuration()
        cfg.host = config.server
        cfg.verify_ssl = False
        if config.token:
            cfg.api_key = {"BearerToken": config.token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return cfg
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.Configuration.get_default_copy()


def make_registry(config, metrics: OperatorMetrics | None = None, *, fence: Callable[[], bool] | None = None,
                  serve_metrics: bool = True) -> kopf.OperatorRegistry:
    """The kopf registry. ``fence``: writes are refused unless it returns True (the Lease is held, see
    leadership.py). ``serve_metrics``: serve /metrics from kopf's startup (False when the process serves it)."""
    registry = kopf.OperatorRegistry()
    metrics = metrics or OperatorMetrics()
    reconciler = Reconciler(config, metrics)
    registry.reconciler = reconciler  # type: ignore[attr-defined]  # for tests, benchmarks and the demo
    labels = config.labels or None
    index_ids = {}
    endpoints: list[Endpoints] = []

    if config.server:
        @kopf.on.login(registry=registry)
        def login(**_):
            return kopf.ConnectionInfo(server=config.server, insecure=True, token=config.token)
    else:
        # kopf registers its credential discovery only in its default registry; ours is our own: in-cluster
        # service account, else KUBECONFIG / ~/.kube/config, through the kubernetes client as everywhere else.
        @kopf.on.login(registry=registry)
        def login(**kwargs):
            return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_):
        settings.posting.level = logging.WARNING  # Events come from events.py, not from every log line
        settings.networking.request_timeout = config.request_timeout * 3
        # Watches end on the server after watch_timeout; the client cuts one that outlives that by 15 s or stays
        # silent that long (a half-open connection never errors by itself), and kopf reopens it.
        settings.watching.server_timeout = int(config.watch_timeout_seconds)  # timeoutSeconds: an integer
        if config.namespaces and not any(c in ns for ns in config.namespaces for c in "*?!,"):
            # Exact namespace names: no need to list namespaces (the chart's namespaced mode does not grant it;
            # kopf would retry the 403 for seconds before falling back to the names) or to watch CRDs.
            settings.scanning.disabled = True
        settings.watching.client_timeout = config.watch_timeout_seconds + 15
        settings.watching.inactivity_timeout = config.watch_timeout_seconds + 15
        settings.watching.connect_timeout = config.request_timeout
        settings.watching.reconnect_backoff = 0.5
        settings.networking.connect_timeout = config.request_timeout
        settings.networking.error_backoffs = config.api_error_backoffs
        settings.persistence.finalizer = FINALIZER
        reconciler.client = KubeClient(kube_configuration(config), metrics=metrics, timeout=config.request_timeout,
                                       retries=config.retries, backoff=config.backoff_seconds,
                                       workers=config.api_workers, fence=fence)
        reconciler.http = tuner_pod_io.open_session()  # one for all tuner daemons, on kopf's loop
        if serve_metrics and config.metrics_port:
            endpoints.append(await Endpoints(metrics.registry, lambda: (True, {}), metrics_port=config.metrics_port,
                                             health_port=None).start())

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        if reconciler.client:
            reconciler.client.close()
        if reconciler.http is not None:  # kopf has stopped the daemons before cleanup
            await reconciler.http.close()
            reconciler.http = None
        while endpoints:
            await endpoints.pop().stop()

    @kopf.on.probe(id="reconciles", registry=registry)
    def probe(**_):
        return sum(s.value for m in metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))

    for api_version, kind, plural, _ in children.INDEXED_KINDS:
        group, version = _split(api_version)
        index_id = f"children_{plural}"
        index_ids[plural] = index_id
        kopf.index(group, version, plural, id=index_id, registry=registry,
                   labels={children.MANAGED_BY_LABEL: MANAGED_BY})(_index_fn)

    def live_from(kwargs):
        def live(namespace: str, uid: str):
            for index_id in index_ids.values():
                index = kwargs.get(index_id)
                if index is not None:
                    yield from index.get((namespace, uid), [])
        return live

    def update_gauges(kwargs):
        now = time.monotonic()
        if now - reconciler._gauge_at < 1.0:
            return
        reconciler._gauge_at = now
        for plural, index_id in index_ids.items():
            index = kwargs.get(index_id)
            if index is not None:
                metrics.managed_objects.labels(plural).set(sum(len(index[k]) for k in index))

    async def run(body, memo, kwargs):
        if body["metadata"].get("deletionTimestamp"):
            return  # deletion belongs to the garbage collector: children carry our owner reference
        memo["latest"] = (body, kwargs, time.monotonic())
        lock = memo.setdefault("lock", asyncio.Lock())
        async with lock:
            result = await reconciler.reconcile(body, memo, live_from(kwargs))
            memo["passed_at"] = time.monotonic()
        update_gauges(kwargs)
        if result == "error":
            retry_soon(memo)
        else:
            memo.pop("retry_delay", None)

    def retry_soon(memo) -> None:
        """After a failed pass (API errors that outlasted the client's retries), try again within seconds rather
        than at the next resync: convergence after an API outage then follows the outage's end by at most
        ERROR_RETRY_MAX_SECONDS plus one pass. One pending retry per object; it uses the newest body kopf gave us
        and gives up when kopf has not handed this object over for a while (deleted, or no longer ours)."""
        pending = memo.get("retry_task")
        if pending is not None and not pending.done():
            return
        delay = min(memo.get("retry_delay", 0.25) * 2, ERROR_RETRY_MAX_SECONDS)
        memo["retry_delay"] = delay

        async def again():
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            body, kwargs, seen = memo["latest"]
            if time.monotonic() - seen < 2 * config.resync_seconds + 10:
                await run(body, memo, kwargs)

        memo["retry_task"] = asyncio.get_running_loop().create_task(again())

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, labels=labels)
    async def on_event(event, body, memo, **kwargs):
        if event.get("type") == "DELETED":
            return
        if FINALIZER not in (body["metadata"].get("finalizers") or []):
            # A new object: kopf adds its finalizer after this handler, by a JSON patch that tests the
            # resourceVersion it saw. A status write here would make that patch fail (422) and kopf would retry
            # on every following event; the finalizer's own MODIFIED event starts the first pass instead.
            return
        if body["metadata"].get("resourceVersion") in memo.get("own_status_rvs", ()):
            return  # the echo of our own status write: the object is exactly what that pass (or tuner) left
        await run(body, memo, kwargs)

    @kopf.timer(GROUP, VERSION, PLURAL, interval=config.resync_seconds, registry=registry, labels=labels)
    async def resync(body, memo, **kwargs):
        # The level-based fallback for what sends no event (children's drift and readiness): a pass that ran
        # within the period already looked. During a creation wave every object has event-driven passes, and
        # ticks on top of them would queue a pass per object per period behind the wave.
        if time.monotonic() - memo.get("passed_at", float("-inf")) < config.resync_seconds:
            return
        await run(body, memo, kwargs)

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, labels=labels, cancellation_timeout=5.0)
    async def tune(body, memo, stopped, **kwargs):
        """The step tuner, one loop per object (reconcile/tuning_loop.py); it re-renders through ``run``."""
        while FINALIZER not in (body["metadata"].get("finalizers") or []) and not stopped:
            await stopped.wait(0.2)  # as in on_event: no status write before kopf's finalizer patch is in
        await tuning_loop.run(reconciler, body, memo, stopped, reconcile=lambda: run(body, memo, kwargs))

    return registry
