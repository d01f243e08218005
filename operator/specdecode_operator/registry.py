"""kopf registration: watch-cache indexes of our children, and one event handler that hands every
SpecDecodeDeployment watch event to the controller's work queue (reconcile/controller.py).

Why these handler types: ``on.event`` runs on each watch event of a SpecDecodeDeployment without kopf's diff-base
annotation or progress records, and the index function of each child kind both keeps kopf's watch cache of our
children and tells the controller which owner a child's event concerns. No kopf timer or daemon: those need a
finalizer on every object (one write each, and a deletion that waits for the operator); the controller's one
resync sweep and the tuner's one scheduler replace them. kopf removes the finalizer that earlier versions put on
objects at its first event of each (no handler requires it any more), so their deletions never wait on it.
Errors never escape to kopf's retry machinery: the API client retries transient faults with backoff, and whatever
remains is a Degraded condition and a per-object back-off in the work queue.
"""

from __future__ import annotations

import asyncio
import logging

import kopf

from .api.models import GROUP, PLURAL, VERSION
from .config import OperatorConfig
from .context import OperatorContext
from .endpoints import Endpoints
from .reconcile import children
from .reconcile.controller import Controller
from .render.names import MANAGED_BY

log = logging.getLogger("specdecode.operator")
# kopf's finalizer, which earlier versions put on every object for their timers and daemons; kopf removes it from
# an object at its first event, since no handler of this registry requires it.
FINALIZER = "specdecode.io/kopf-finalizer"
KOPF_WORKER_IDLE_SECONDS = 0.5  # kopf's default is 5 s (see _configure_kopf)


def make_registry(context: OperatorContext, *, serve_metrics: bool = True) -> kopf.OperatorRegistry:
    """The kopf registry of an operator whose shared parts are ``context``. ``serve_metrics``: serve /metrics from
    kopf's startup (False when the process serves it)."""
    registry = kopf.OperatorRegistry()
    _register_login(registry, context.config)
    index_ids = {plural: f"children_{plural}" for _, _, plural, _ in children.INDEXED_KINDS}
    controller = context.controller = Controller(context, index_ids)
    _register_lifecycle(registry, context, controller, serve_metrics)
    _register_child_indexes(registry, controller, index_ids)
    _register_object_handlers(registry, context, controller)
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


def _register_lifecycle(
    registry: kopf.OperatorRegistry, context: OperatorContext, controller: Controller, serve_metrics: bool
) -> None:
    """Startup: kopf's settings, then the context's client and session (on kopf's loop). Cleanup: stop the
    controller's workers, then close the client and session."""
    config, metrics = context.config, context.metrics
    endpoints: list[Endpoints] = []

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_):
        _configure_kopf(settings, config)
        context.start()
        if serve_metrics and config.metrics_port:
            endpoints.append(
                await Endpoints(
                    metrics.registry, lambda: (True, {}), metrics_port=config.metrics_port, health_port=None
                ).start()
            )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        await controller.stop()
        await context.close()
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
    leftovers = [
        task
        for task in asyncio.all_tasks()
        if task is not current and not task.done() and task.get_name().startswith(PAUSE_WAITER_PREFIX)
    ]
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
    # kopf's per-object worker keeps the object's last event (the whole decoded body, managedFields included)
    # while it waits idle_timeout for the next one. Our handlers return at once (the work queue does the work), so
    # a worker that is idle for half a second can go: in a creation wave of N objects and 7 kinds this was the largest
    # transient share of the operator's memory, and a later event only starts a new worker.
    settings.queueing.idle_timeout = KOPF_WORKER_IDLE_SECONDS
    settings.persistence.finalizer = FINALIZER
    settings.persistence.diffbase_storage = NoEssence()


class NoEssence(kopf.DiffBaseStorage):
    """kopf's diff base, for an operator without change-detecting handlers: nothing kept, nothing built.

    kopf builds the "essence" of every watched object (a deep copy of the body) on each of its events, to diff it
    with the last handled one for on.create/on.update/on.field handlers. None are registered here (a pass reads the
    whole newest body), so the copy was pure cost: about a twentieth of the operator's CPU in a creation wave."""

    def build(self, *, body, extra_fields=None):
        return {}

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence) -> None:
        return None


def _register_child_indexes(registry: kopf.OperatorRegistry, controller: Controller, index_ids: dict[str, str]) -> None:
    """kopf indexes of our children by (namespace, controller uid); each child event also reaches the controller.

    Key children by (namespace, controller uid) and keep a slim record (``children.cache_record``), not the body:
    without the fields when the event is the echo of our own write. Asynchronous, so kopf calls it on its loop
    instead of handing every child event to its thread pool."""

    async def index_fn(namespace, body, **_):
        uid = children.controller_uid(body)
        if not uid:
            return {}
        echo = controller.child_seen(body)
        return {(namespace, uid): children.cache_record(body, fields=not echo)}

    for api_version, _kind, plural, _ in children.INDEXED_KINDS:
        group, version = _split(api_version)
        kopf.index(
            group,
            version,
            plural,
            id=index_ids[plural],
            registry=registry,
            labels={children.MANAGED_BY_LABEL: MANAGED_BY},
        )(index_fn)


def _register_object_handlers(
    registry: kopf.OperatorRegistry, context: OperatorContext, controller: Controller
) -> None:
    """Every event of every SpecDecodeDeployment goes to the controller, which applies the label selector itself
    (so that it also sees an object leave the selection)."""

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def on_event(event, body, **kwargs):
        controller.observe(event.get("type"), body, kwargs)


# ---------------------------------------------------------------------------------------------- helpers
def _split(api_version: str) -> tuple[str, str]:
    return tuple(api_version.split("/")) if "/" in api_version else ("", api_version)  # type: ignore[return-value]
