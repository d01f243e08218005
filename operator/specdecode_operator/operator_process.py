"""The operator process (``specdecode operator run``): its endpoints, then kopf on the one replica that leads.

Order: serve ``/healthz`` and ``/metrics`` (endpoints.py; a standby answers probes too) -> with leader election,
wait for the Lease (leadership.py) doing nothing else: no watch, no list, no write -> run kopf (standalone: the
Lease, not kopf's peering, decides who acts) with every API write fenced on the Lease -> if the Lease is lost,
stop at once: the process exits with status 1 after a short grace period for kopf to stop, and the kubelet
restarts it as a standby. A clean stop (SIGTERM) releases the Lease so that a standby takes over at its next poll.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
from typing import Callable

import kopf
import kubernetes

from .context import OperatorContext
from .endpoints import Endpoints, port_of, secure_metrics
from .kube_client import USER_AGENT, ApiError, kube_configuration
from .leadership import LeaderElector
from .metrics import OperatorMetrics
from .registry import make_registry

log = logging.getLogger("specdecode.operator")
LOST_GRACE_SECONDS = 3.0  # after losing the Lease, kopf gets this long to stop before the process exits
GC_THRESHOLDS = (10_000, 10, 10)  # allocations between young-generation collections, and the older generations'


def freeze_gc() -> None:
    """Once the operator has started: move everything allocated so far (modules, kopf, the client, schemas) out of
    the cyclic garbage collector's sight, and collect the young generation less often.

    Why: the operator allocates many short-lived dicts per watch event and pass; with the default thresholds every
    700 allocations start a collection, and each older collection walks every long-lived object again: about a
    tenth of the operator's CPU in a creation wave. Bodies and records are trees that reference counting frees;
    what does form cycles (finished tasks, HTTP responses, kopf's per-event wrappers) waits for a collection, so
    the threshold is a trade: at 50 000 the garbage between collections held ~10 MB more at 1000 objects
    (``bench/operator/operator_scale.py --census``) than at 10 000, for no measurable CPU difference."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class OperatorProcess:
    """One replica. ``exit_on_lost``: exit the process when the Lease is lost (production); tests running a
    replica in a thread set it False and read ``lost``."""

    def __init__(self, config, *, exit_on_lost: bool = True) -> None:
        self.config = config
        self.exit_on_lost = exit_on_lost
        self.metrics = OperatorMetrics()
        self.elector: LeaderElector | None = None
        self.role = "starting"
        self.endpoints: Endpoints | None = None
        self.context: OperatorContext | None = None
        self.registry: kopf.OperatorRegistry | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kopf_task: asyncio.Task | None = None
        self._release: threading.Thread | None = None  # hands the Lease over on stop; joined before exit

    # ------------------------------------------------------------------ health
    def health(self) -> tuple[bool, dict]:
        alive = self._kopf_task is None or not self._kopf_task.done()
        if self.elector is not None and self.role in ("standby", "leader"):
            alive = alive and self.elector.alive()
        reconciles = sum(
            s.value for m in self.metrics.reconciles.collect() for s in m.samples if s.name.endswith("_total")
        )
        return alive, {"role": self.role, "identity": self.config.identity, "reconciles": reconciles}

    # ------------------------------------------------------------------ control
    def stop(self) -> None:
        """Thread-safe: stop acting now and hand the Lease over, then let kopf shut down. The fence closes first
        (every API write of ours is refused from here on), so releasing the Lease before kopf has finished its
        shutdown cannot give two writers; a standby takes over at its next poll instead of after expiry."""
        if self.elector is not None and self.role != "lost" and self._release is None:
            self._release = threading.Thread(target=self.elector.stop, kwargs={"release": True}, daemon=True)
            self._release.start()
        if self.context is not None:
            self.context.stopping.set()  # before kopf's stop flag: no new work is queued during the shutdown
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)

    def _lost(self) -> None:
        """Called from the election threads when the Lease is lost: stop acting now."""
        self.role = "lost"
        self.stop()
        if self.exit_on_lost:
            timer = threading.Timer(LOST_GRACE_SECONDS, lambda: os._exit(1))
            timer.daemon = True
            timer.start()

    async def main(self) -> int:
        config = self.config
        self._loop = loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.endpoints = await Endpoints(
            self.metrics.registry,
            self.health,
            metrics_port=config.metrics_port,
            health_port=port_of(config.liveness_endpoint),
            **secure_metrics(config),
        ).start()
        try:
            fence: Callable[[], bool] | None = None
            if config.leader_election:
                self.role = "standby"
                lease_cfg = kube_configuration(config)
                lease_cfg.retries = False  # one attempt per call: the election loop retries on its own period
                lease_cfg.connection_pool_maxsize = 1  # at most one kept-alive (possibly half-open) connection
                api = kubernetes.client.ApiClient(lease_cfg)
                api.user_agent = USER_AGENT + " leader-election"
                started = asyncio.Event()
                self.elector = LeaderElector(
                    api,
                    name=config.lease_name,
                    namespace=config.operator_namespace,
                    identity=config.identity,
                    lease_duration=config.lease_duration_seconds,
                    renew_deadline=config.renew_deadline_seconds,
                    retry_period=config.retry_period_seconds,
                    request_timeout=min(config.request_timeout, config.renew_deadline_seconds / 2),
                    on_started=lambda: _call_soon(loop, started.set),
                    on_lost=self._lost,
                ).start()
                log.info("%s waits for Lease %s/%s", config.identity, config.operator_namespace, config.lease_name)
                waiting = [asyncio.ensure_future(started.wait()), asyncio.ensure_future(self._stop.wait())]
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in waiting:
                    task.cancel()
                if self._stop.is_set():
                    return 0 if not self.elector.lost else 1
                fence = lambda: self.elector.leading  # noqa: E731
            self.role = "leader"
            self.context = OperatorContext(config, self.metrics, fence=fence)
            self.registry = make_registry(self.context, serve_metrics=False)
            # kopf installs its own SIGTERM/SIGINT handlers when it starts; they stop kopf but leave its waiter on
            # our stop flag pending, which its shutdown then waits 5 s for. Once kopf is ready, the signals are ours
            # again: the Lease is released and kopf stops through the flag, at once. A callback, not a task, so
            # nothing of ours is left for kopf's shutdown to wait on.
            ready: asyncio.Future = self._loop.create_future()
            ready.add_done_callback(lambda _: self._started())
            self._kopf_task = asyncio.ensure_future(
                kopf.operator(
                    registry=self.registry,
                    clusterwide=not config.namespaces,
                    namespaces=list(config.namespaces),
                    standalone=True,
                    liveness_endpoint=None,
                    stop_flag=self._stop,
                    ready_flag=ready,
                )
            )
            try:
                await self._kopf_task
            except ApiError as err:
                # A handler in flight when the replica stopped (the Lease lost, SIGTERM) met the client already
                # closed, and kopf re-raises what its tasks ended with: that is the stop itself, not a failure.
                if err.reason != "ShuttingDown" or self._stop is None or not self._stop.is_set():
                    raise
                log.info("specdecode: a handler in flight ended with the stop: %s", err)
            return 1 if self.elector is not None and self.role == "lost" else 0
        finally:
            if self.elector is not None:
                self.elector.stop(release=self.role != "lost")
            if self._release is not None:  # a daemon thread still writing at interpreter exit aborts the process
                await asyncio.to_thread(self._release.join, 5.0)
            await self.endpoints.stop()

    def _started(self) -> None:
        """kopf is ready: in the process's main thread (a deployed replica, not a test's replica in a thread),
        take the signals back and freeze the start-up heap out of the garbage collector's sight."""
        self._handle_signals()
        if threading.current_thread() is threading.main_thread():
            freeze_gc()

    def _handle_signals(self) -> None:
        """SIGTERM/SIGINT call ``stop`` (only in the main thread: replicas run in threads by tests keep none)."""
        if self._loop is None or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, self.stop)

    def run(self) -> int:
        return asyncio.run(self.main())


def run(config) -> int:
    """The process entry: SIGTERM/SIGINT stop kopf and release the Lease."""
    logging.getLogger("leaderelection").setLevel(logging.WARNING)  # it logs every poll of a standby at INFO
    process = OperatorProcess(config)

    async def main() -> int:
        process._loop = asyncio.get_running_loop()
        process._handle_signals()  # while waiting for the Lease, before kopf runs
        return await process.main()

    return asyncio.run(main())


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    """``callback`` on ``loop`` from another thread (the elector's)."""
    loop.call_soon_threadsafe(callback)
