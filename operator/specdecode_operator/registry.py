"""kopf registration: watch-cache indexes of our children, one idempotent reconcile for every trigger, and one
tuning loop per object.

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

import kopf

from .api.models import GROUP, PLURAL, VERSION
from .config import OperatorConfig
from .context import OperatorContext
from .endpoints import Endpoints
from .object_state import ObjectState, state_of
from .reconcile import children
from .render.names import MANAGED_BY
from .tuning import loop as tuning_loop

log = logging.getLogger("specdecode.operator")
FINALIZER = "specdecode.io/kopf-finalizer"  # kopf's, required by its timers and daemons
ERROR_RETRY_MAX_SECONDS = 4.0  # a failed pass is retried after 0.5, 1, 2, 4, 4 ... s (with jitter), not at resync
GAUGE_PERIOD_SECONDS = 1.0  # the managed-objects gauge is recounted at most this often


def make_registry(context: OperatorContext, *, serve_metrics: bool = True) -> kopf.OperatorRegistry:
    """The kopf registry of an operator whose shared parts are ``context``. ``serve_metrics``: serve /metrics from
    kopf's startup (False when the process serves it)."""
    registry = kopf.OperatorRegistry()
    _register_login(registry, context.config)
    _register_lifecycle(registry, context, serve_metrics)
    index_ids = _register_child_indexes(registry)
    passes = ReconcilePasses(context, index_ids)
    _register_object_handlers(registry, context, passes)
    return registry


# ---------------------------------------------------------------------------------------------- stages
def _register_login(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
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


def _register_lifecycle(registry: kopf.OperatorRegistry, context: OperatorContext, serve_metrics: bool) -> None:
    """Startup: kopf's settings, then the context's client and session (on kopf's loop). Cleanup: close them."""
    config, metrics = context.config, context.metrics
    endpoints: list[Endpoints] = []

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_):
        _configure_kopf(settings, config)
        context.start()
        if serve_metrics and config.metrics_port:
            endpoints.append(await Endpoints(metrics.registry, lambda: (True, {}), metrics_port=config.metrics_port,
                                             health_port=None).start())

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        await context.close()  # kopf has stopped the daemons before cleanup
        while endpoints:
            await endpoints.pop().stop()
        await _release_abandoned_pause_waiters()

    @kopf.on.probe(id="reconciles", registry=registry)
    def probe(**_):
        return sum(s.value for m in metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total"))


PAUSE_WAITER_PREFIX = "pause-waiter for "  # kopf's name for a watch stream's pause-signal task


async def _release_abandoned_pause_waiters() -> None:
    """Cancel the pause-signal tasks of kopf watch streams that were abandoned mid-stream.

    Why: each kopf watch stream runs a pause-waiter task that the stream's own ``finally`` cancels. A watcher
    cancelled while it handled an event (not while it waited for the next one) leaves its stream suspended at a
    ``yield``, and the cancelled tasks keep that stream reachable until kopf's run returns, so nothing closes it:
    kopf's shutdown then waits its 5 s timeout for the waiter, on every such stop (a pod's SIGTERM included). The
    cleanup activity runs after every root task, watchers included, has ended, so a waiter still pending here
    belongs to no live stream: cancel it, as the stream would have."""
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks()
                 if task is not current and not task.done() and task.get_name().startswith(PAUSE_WAITER_PREFIX)]
    for task in leftovers:
        task.cancel()
    if leftovers:
        await asyncio.wait(leftovers, timeout=1.0)
        log.debug("released %d pause waiter(s) of abandoned watch streams", len(leftovers))


def _configure_kopf(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    settings.posting.level = logging.WARNING  # Events come from reconcile/events.py, not from every log line
    settings.networking.request_timeout = config.request_timeout * 3
    # Watches end on the server after watch_timeout; the client cuts one that outlives that by a grace period or
    # stays silent that long (a half-open connection never errors by itself), and kopf reopens it. The grace is a
    # quarter of the timeout, 5 to 15 s: a stalled watch is replaced within 1.25 timeouts (at least 5 s more).
    settings.watching.server_timeout = int(config.watch_timeout_seconds)  # timeoutSeconds: an integer
    if config.namespaces and not any(c in ns for ns in config.namespaces for c in "*?!,"):
        # Exact namespace names: no need to list namespaces (the chart's namespaced mode does not grant it;
        # kopf would retry the 403 for seconds before falling back to the names) or to watch CRDs.
        settings.scanning.disabled = True
    grace = min(15.0, max(5.0, config.watch_timeout_seconds / 4))
    settings.watching.client_timeout = config.watch_timeout_seconds + grace
    settings.watching.inactivity_timeout = config.watch_timeout_seconds + grace
    settings.watching.connect_timeout = config.request_timeout
    settings.watching.reconnect_backoff = 0.5
    settings.networking.connect_timeout = config.request_timeout
    settings.networking.error_backoffs = config.api_error_backoffs
    settings.persistence.finalizer = FINALIZER


def _register_child_indexes(registry: kopf.OperatorRegistry) -> dict[str, str]:
    """kopf indexes of our children by (namespace, controller uid); plural -> index id."""
    index_ids = {}
    for api_version, _kind, plural, _ in children.INDEXED_KINDS:
        group, version = _split(api_version)
        index_id = f"children_{plural}"
        index_ids[plural] = index_id
        kopf.index(group, version, plural, id=index_id, registry=registry,
                   labels={children.MANAGED_BY_LABEL: MANAGED_BY})(_index_fn)
    return index_ids


def _register_object_handlers(registry: kopf.OperatorRegistry, context: OperatorContext,
                              passes: "ReconcilePasses") -> None:
    config = context.config
    labels = config.labels or None

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, labels=labels)
    async def on_event(event, body, memo, **kwargs):
        if event.get("type") == "DELETED":
            return
        if FINALIZER not in (body["metadata"].get("finalizers") or []):
            # A new object: kopf adds its finalizer after this handler, by a JSON patch that tests the
            # resourceVersion it saw. A status write here would make that patch fail (422) and kopf would retry
            # on every following event; the finalizer's own MODIFIED event starts the first pass instead.
            return
        state = state_of(memo)
        if body["metadata"].get("resourceVersion") in state.own_status_rvs:
            return  # the echo of our own status write: the object is exactly what that pass (or tuner) left
        await passes.run(body, state, kwargs)

    @kopf.timer(GROUP, VERSION, PLURAL, interval=config.resync_seconds, registry=registry, labels=labels,
                when=context.spawning)
    async def resync(body, memo, **kwargs):
        # The level-based fallback for what sends no event (children's drift and readiness): a pass that ran
        # within the period already looked. During a creation wave every object has event-driven passes, and
        # ticks on top of them would queue a pass per object per period behind the wave.
        state = state_of(memo)
        if time.monotonic() - state.passed_at < config.resync_seconds:
            return
        await passes.run(body, state, kwargs)

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, labels=labels, cancellation_timeout=5.0,
                 when=context.spawning)
    async def tune(body, memo, stopped, **kwargs):
        """The step tuner, one loop per object (tuning/loop.py); it re-renders through ``passes.run``."""
        while FINALIZER not in (body["metadata"].get("finalizers") or []) and not stopped:
            await stopped.wait(0.2)  # as in on_event: no status write before kopf's finalizer patch is in
        state = state_of(memo)
        await tuning_loop.run(context, body, state, stopped, reconcile=lambda: passes.run(body, state, kwargs))


# ---------------------------------------------------------------------------------------------- passes
class ReconcilePasses:
    """Runs the reconciler for kopf's triggers: one pass per object at a time, a retry soon after a failed one."""

    def __init__(self, context: OperatorContext, index_ids: dict[str, str]):
        self.context = context
        self.index_ids = index_ids
        self._gauge_at = -GAUGE_PERIOD_SECONDS

    async def run(self, body, state: ObjectState, kwargs) -> None:
        if body["metadata"].get("deletionTimestamp"):
            return  # deletion belongs to the garbage collector: children carry our owner reference
        state.latest = (body, kwargs, time.monotonic())
        async with state.lock:
            result = await self.context.reconciler.reconcile(body, state, self._live_from(kwargs))
            state.passed_at = time.monotonic()
        self._update_gauges(kwargs)
        if result == "error":
            self._retry_soon(state)
        else:
            state.retry_delay = None

    def _live_from(self, kwargs):
        def live(namespace: str, uid: str):
            for index_id in self.index_ids.values():
                index = kwargs.get(index_id)
                if index is not None:
                    yield from index.get((namespace, uid), [])
        return live

    def _update_gauges(self, kwargs) -> None:
        now = time.monotonic()
        if now - self._gauge_at < GAUGE_PERIOD_SECONDS:
            return
        self._gauge_at = now
        for plural, index_id in self.index_ids.items():
            index = kwargs.get(index_id)
            if index is not None:
                self.context.metrics.managed_objects.labels(plural).set(sum(len(index[k]) for k in index))

    def _retry_soon(self, state: ObjectState) -> None:
        """After a failed pass (API errors that outlasted the client's retries), try again within seconds rather
        than at the next resync: convergence after an API outage then follows the outage's end by at most
        ERROR_RETRY_MAX_SECONDS plus one pass. One pending retry per object; it uses the newest body kopf gave us
        and gives up when kopf has not handed this object over for a while (deleted, or no longer ours)."""
        pending = state.retry_task
        if pending is not None and not pending.done():
            return
        delay = min((state.retry_delay or 0.25) * 2, ERROR_RETRY_MAX_SECONDS)
        state.retry_delay = delay
        resync_seconds = self.context.config.resync_seconds

        async def again():
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            body, kwargs, seen = state.latest
            if time.monotonic() - seen < 2 * resync_seconds + 10:
                await self.run(body, state, kwargs)

        state.retry_task = asyncio.get_running_loop().create_task(again())


# ---------------------------------------------------------------------------------------------- helpers
def _split(api_version: str) -> tuple[str, str]:
    return tuple(api_version.split("/")) if "/" in api_version else ("", api_version)  # type: ignore[return-value]


def _index_fn(namespace, body, **_):
    """Key children by (namespace, controller uid); keep a slim record (``children.cache_record``), not the body."""
    uid = children.controller_uid(body)
    return {(namespace, uid): children.cache_record(body)} if uid else {}
