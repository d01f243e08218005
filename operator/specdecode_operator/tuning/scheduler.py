"""One scheduler for every object's step tuner: a heap of next-due times instead of a task per object.

Why: an object without ready pods has nothing to measure (no endpoint to list, no counters to read), so its tuner
has nothing to report beyond what the reconciler's first status already carries (MetricsAvailable=False/NoPods,
``hooks.initial_condition``). The scheduler therefore takes an object in only once ``status.readyReplicas`` is
above zero, and keeps it until the object is deleted (pods that go away later are reported as such by the tuner's
next interval). One interval of an object runs at a time, at most ``CONCURRENCY`` objects' intervals at once (an
interval may wait seconds on a pod's /metrics); the next is due ``intervalSeconds`` after one ends. The tuner
writes status only when a decision or a reported value changes (``report.Reporter.write_status``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging

from .loop import TuningLoop

log = logging.getLogger("specdecode.tuner")
CONCURRENCY = 16


def has_ready_pods(body) -> bool:
    return bool((body.get("status") or {}).get("readyReplicas"))


class TunerScheduler:
    def __init__(self, context, controller):
        self.context = context
        self.controller = controller  # reconcile/controller.py: the objects' newest bodies, and the work queue
        self.loops: dict[str, TuningLoop] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._running: dict[str, asyncio.Task] = {}
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self.ticks = 0

    def consider(self, uid: str, entry) -> None:
        """A watch event of the object: start tuning it once its pods are ready."""
        if uid in self.loops or not has_ready_pods(entry.body):
            return

        async def reconcile() -> None:  # Rollout's new step count, or a changed MetricsAvailable: a pass soon
            self.controller.enqueue(uid)

        self.loops[uid] = TuningLoop(self.context, entry.body, entry.state, reconcile)
        self._push(uid, 0.0)

    def drop(self, uid: str) -> None:
        self.loops.pop(uid, None)
        task = self._running.pop(uid, None)
        if task is not None:
            task.cancel()

    def _push(self, uid: str, delay: float) -> None:
        heapq.heappush(self._heap, (asyncio.get_running_loop().time() + delay, next(self._seq), uid))
        self._changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            now = loop.time()
            while self._heap and self._heap[0][0] <= now:
                _, _, uid = heapq.heappop(self._heap)
                tuning = self.loops.get(uid)
                if tuning is not None and uid not in self._running:
                    self._running[uid] = loop.create_task(self._interval(uid, tuning), name=f"tuner {uid}")
            timeout = self._heap[0][0] - now if self._heap else None
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass

    async def _interval(self, uid: str, tuning: TuningLoop) -> None:
        delay = None
        try:
            async with self._slots:
                entry = self.controller.objects.get(uid)
                if entry is None or self.loops.get(uid) is not tuning:
                    return
                tuning.see(entry.body)
                delay = await tuning.tick()
                self.ticks += 1
        finally:
            if self._running.get(uid) is asyncio.current_task():
                del self._running[uid]
        if delay is not None and self.loops.get(uid) is tuning:
            self._push(uid, delay)

    async def stop(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        self._running.clear()
        self.loops.clear()
