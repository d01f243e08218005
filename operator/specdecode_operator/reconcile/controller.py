"""The operator's control loop: kopf's watch events feed one work queue, a bounded set of workers reconciles each
queued object on the newest body, and one periodic sweep stands in for per-object timers.

Why this shape and not a kopf handler per trigger: a handler that runs the pass itself holds kopf's per-object
worker for the whole pass, so kopf falls behind on that object's events and later passes work on stale bodies;
per-object timers and daemons make kopf put a finalizer on every object (one more write, and a second pass for
its event) and fire during a creation wave, so the passes per object grew with the number of objects. Here a watch
event only records the body and queues the object's uid (``reconcile/queue.py``: at most once, one worker per
uid, a change during a pass queues it once more); a pass always reads the newest body; the number of passes in
flight is bounded, so each takes a fraction of the wave instead of the whole wave.

Triggers: the object's own watch events (not the echoes of our status writes), a child's watch event that is not
the echo of our own write (a Deployment becoming ready, someone else's edit), the tuner (Rollout: re-render), the
sweep (every ``resync_seconds``, objects whose last pass is older than that: drift that sends no event, such as
a deleted child or the control-token Secret, which is not watched) and a failed pass's per-object back-off.
Deletion needs no hook: the children carry our controller owner reference and the garbage collector removes them.
A pass still in flight when the object's deletion arrives applies no more children (``ObjectState.deleted``): one
written after the deletion would name an owner uid that is gone, and the collector would delete it again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..object_state import ObjectState, not_older
from . import children
from .queue import ShutDown, WorkQueue

if TYPE_CHECKING:  # annotations only: the scheduler imports the tuning loop, which imports this package
    from ..tuning.scheduler import TunerScheduler

log = logging.getLogger("specdecode.operator")
GAUGE_PERIOD_SECONDS = 1.0  # the managed-objects gauge is recounted at most this often
MAX_WORKERS = 32


@dataclass
class Entry:
    """One SpecDecodeDeployment the operator follows: the newest body kopf delivered and what passes remember."""

    body: Any
    state: ObjectState


def compact(body) -> dict:
    """The body as the controller keeps it until the next event: without managedFields (often the largest part of
    an object, and read by nobody here), in containers of its own with interned strings (``children.slim``): the
    spec's defaulted fields and the status conditions repeat the same keys and most values in every object, and
    each watch event decodes them afresh."""
    out = {}
    for key in body:
        value = body[key]
        if key == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "managedFields"}
        out[sys.intern(key)] = children.slim(value)
    return out


class Controller:
    """Queue, workers and sweep for one operator, on kopf's loop; ``stop`` before the client closes."""

    def __init__(self, context, index_ids: dict[str, str]):
        self.context = context
        self.index_ids = index_ids
        self.indexes: dict[str, Any] = {}  # index id -> kopf's live index (the same object in every handler call)
        self.objects: dict[str, Entry] = {}  # uid -> entry
        self.queue: WorkQueue[str] = WorkQueue()
        self.tuner: TunerScheduler | None = None  # from ``_start``
        self.workers = max(2, min(MAX_WORKERS, 2 * context.config.api_workers))
        self._tasks: list[asyncio.Task] = []
        self._gauge_at = -math.inf
        self._labels = context.config.labels
        # uid of an object in a pass -> the events seen meanwhile, judged when the pass ends: the watch may deliver
        # the echo of a write before the write's own answer has been read, and only then is it known as ours.
        self._during_pass: dict[str, list[tuple]] = {}

    # ------------------------------------------------------------------ intake (kopf handlers, on kopf's loop)
    def observe(self, event_type: str | None, body, kwargs: dict) -> None:
        """A watch event of a SpecDecodeDeployment: remember the body, queue the object unless nothing changed."""
        md = body["metadata"]
        uid = md.get("uid")
        if not uid:
            return
        if event_type == "DELETED" or not self._selected(md):
            if event_type == "DELETED" and uid in self.objects:
                self.objects[uid].state.deleted = True  # a pass in flight stops applying children
            self.forget(uid)
            return
        if self.context.stopping.is_set():
            return  # the operator is stopping: no new work
        if not self._tasks:
            self.indexes = {i: kwargs[i] for i in self.index_ids.values() if i in kwargs}
            self._start()
        body = compact(body)
        entry = self.objects.get(uid)
        if entry is None:
            entry = self.objects[uid] = Entry(body, ObjectState())
        entry.body = body
        if self.tuner is not None:  # made by ``_start`` above
            self.tuner.consider(uid, entry)
        if md.get("deletionTimestamp"):
            entry.state.deleted = True  # a pass in flight stops applying children
            return  # the garbage collector's part: nothing to reconcile
        seen = self._during_pass.get(uid)
        if seen is not None:
            seen.append((None, md.get("resourceVersion")))
        elif not self._echo(entry, None, md.get("resourceVersion")):
            self.queue.add(uid)

    def _selected(self, md) -> bool:
        """Whether the object carries the operator's label selector (an object relabelled out of this shard is
        forgotten at that event; kopf would filter the event itself out, and the sweep would go on with it)."""
        labels = md.get("labels") or {}
        return all(labels.get(k) == v for k, v in self._labels.items())

    def child_seen(self, body) -> bool:
        """A watch event of one of our children (from the index function): queue its owner unless the event is
        the echo of our own write. True when it is that echo: the index then keeps no copy of the fields (what we
        wrote is known, see ``children.cache_record``)."""
        uid = children.controller_uid(body)
        entry = self.objects.get(uid) if uid else None
        if uid is None or entry is None:
            return False
        key = children.key_of(body)
        rv = body["metadata"].get("resourceVersion")
        if self._echo(entry, key, rv):
            return True
        seen = self._during_pass.get(uid)
        if seen is not None:
            seen.append((key, rv))
        else:
            self.queue.add(uid)
        return False

    @staticmethod
    def _echo(entry: Entry, key: tuple | None, rv: str | None) -> bool:
        """Whether the event of version ``rv`` of the object (``key`` None) or of one of its children brings
        nothing new: our own status write, our own write of the child, or a child version already checked."""
        state = entry.state
        if key is None:
            return rv in state.own_status_rvs  # exactly what that pass (or the tuner) left
        applied = state.applied.get(key)
        if applied is not None and not_older(rv, applied[1]["metadata"].get("resourceVersion")):
            # The watch has caught up with our write: from here on the index is the truth about this child.
            del state.applied[key]
            if applied[1]["metadata"].get("resourceVersion") == rv:
                return True
        checked = state.checked.get(key)
        return checked is not None and checked[0] == rv

    def enqueue(self, uid: str) -> None:
        if uid in self.objects:
            self.queue.add(uid)

    def forget(self, uid: str) -> None:
        entry = self.objects.pop(uid, None)
        if entry is not None:  # no condition series outlives the object (or its selection)
            md = entry.body["metadata"]
            self.context.metrics.forget_deployment(uid, md["namespace"], md["name"])
        self.queue.discard(uid)
        if self.tuner is not None:
            self.tuner.drop(uid)

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        """Start the workers, the sweep and the tuner's scheduler, at the first event kopf hands over: its handlers
        run in kopf's context (the Event poster's queue lives there), which the tasks made here inherit; and
        kopf hands over nothing before its indexes of the children are complete."""
        from ..tuning.scheduler import TunerScheduler

        loop = asyncio.get_running_loop()
        self.tuner = TunerScheduler(self.context, self)
        self._tasks = [
            loop.create_task(self._worker(), name=f"specdecode reconcile worker {i}") for i in range(self.workers)
        ]
        self._tasks.append(loop.create_task(self._sweep(), name="specdecode resync sweep"))
        self._tasks.append(loop.create_task(self.tuner.run(), name="specdecode tuner scheduler"))

    async def stop(self) -> None:
        self.queue.shut_down()
        if self.tuner is not None:
            await self.tuner.stop()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        self._tasks = []

    # ------------------------------------------------------------------ workers
    async def _worker(self) -> None:
        while True:
            try:
                uid = await self.queue.get()
            except ShutDown:
                return
            try:
                await self._pass(uid)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug costs this object a back-off, never the worker
                log.exception("reconcile of %s failed", self._ref(uid))
                self.queue.add_rate_limited(uid)
            finally:
                self.queue.done(uid)

    async def _pass(self, uid: str) -> None:
        entry = self.objects.get(uid)
        if entry is None:
            return  # deleted while queued
        body = entry.body
        if body["metadata"].get("deletionTimestamp"):
            return
        self._during_pass[uid] = []
        try:
            result = await self.context.reconciler.reconcile(body, entry.state, self._live)
        finally:
            seen = self._during_pass.pop(uid, [])
        entry.state.passed_at = time.monotonic()
        if self.objects.get(uid) is not entry:  # forgotten during the pass, which may have set its conditions since
            md = body["metadata"]
            self.context.metrics.forget_deployment(uid, md["namespace"], md["name"])
        if entry.state.deleted:
            return  # deleted during the pass: nothing to do again (its status write may have failed with 404)
        if any(not self._echo(entry, key, rv) for key, rv in seen):
            self.queue.add(uid)  # a change during the pass: once more, on the newest body
        if result == "error":
            # API errors that outlasted the client's retries: again within seconds (per-object back-off), so
            # convergence follows an outage's end by at most the back-off's cap plus one pass.
            self.queue.add_rate_limited(uid)
        else:
            self.queue.forget(uid)
        self._update_gauges()

    def _live(self, namespace: str, uid: str):
        for index in self.indexes.values():
            yield from index.get((namespace, uid), [])

    def _ref(self, uid: str) -> str:
        entry = self.objects.get(uid)
        md = entry.body["metadata"] if entry else {}
        return f"{md.get('namespace')}/{md.get('name')}" if entry else uid

    def _update_gauges(self) -> None:
        now = time.monotonic()
        if now - self._gauge_at < GAUGE_PERIOD_SECONDS:
            return
        self._gauge_at = now
        for plural, index_id in self.index_ids.items():
            index = self.indexes.get(index_id)
            if index is not None:
                self.context.metrics.managed_objects.labels(plural).set(sum(len(index[k]) for k in index))

    # ------------------------------------------------------------------ the resync sweep
    async def _sweep(self) -> None:
        """Every ``resync_seconds``, queue the objects whose last pass ended at least half that long ago: the
        level-based fallback for what sends no event, so every object is looked at once per period. An object with
        a recent pass (an event within the last half period) already looked.

        While the queue still holds event-driven work or passes are in flight (a creation wave), the sweep waits for
        them to finish, for at most one more period: its passes would only find what the queued and running ones are
        about to do, and would delay the wave's last objects (at 1000 new objects the queue empties several seconds
        before its last passes end, and a sweep then re-passed the 700 objects done first)."""
        period = self.context.config.resync_seconds
        while True:
            await asyncio.sleep(period)
            waited = 0.0
            while (len(self.queue) or self.queue.processing) and waited < period:
                step = min(1.0, period / 10)
                await asyncio.sleep(step)
                waited += step
            now = time.monotonic()
            for uid, entry in list(self.objects.items()):
                # half a period, not a whole one: the previous sweep's passes ended just after it fired, so at the
                # next sweep they are a little less than a period old and would wait for a second period
                if now - entry.state.passed_at >= period / 2:
                    self.queue.add(uid)
