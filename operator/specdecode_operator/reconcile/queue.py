"""A deduplicating, rate-limited work queue of object keys, with the semantics of client-go's workqueue (the one
controller-runtime reconciles from).

Why these rules: a watch event, a child's event, the resync sweep and the tuner may all ask for the same object
within milliseconds; one pass on the newest body answers all of them. So:

- a key is queued at most once (``add`` of a queued key does nothing);
- one worker per key at a time: a key being processed is not handed out again;
- a key added while it is processed is marked dirty and queued once more when its worker is ``done`` with it, so a
  change that arrives mid-pass is never lost and never runs concurrently with the pass;
- a failing key is re-added after a per-key exponential back-off (``add_rate_limited``), reset by ``forget``;
- ``add_after`` re-adds a key later (a timer per key, the earliest wins).

Keys are handed out first in, first out. Everything runs on one event loop; nothing here is thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import random
from typing import Generic, Hashable, TypeVar

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 4.0  # a failing key is retried after 0.5, 1, 2, 4, 4 ... s (with jitter)


class ShutDown(Exception):
    """``get`` on a queue that was shut down."""


K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, backoff_base: float = BACKOFF_BASE_SECONDS, backoff_max: float = BACKOFF_MAX_SECONDS):
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self._order: collections.deque = collections.deque()  # keys waiting for a worker, each once
        self._dirty: set = set()  # keys waiting, or to be queued again once their worker is done
        self._processing: set = set()
        self._failures: dict = {}  # key -> consecutive failures (back-off exponent)
        self._timers: dict = {}  # key -> (due loop time, TimerHandle) of a delayed add
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._shut = False
        self.adds = 0  # add calls that queued a key (not the deduplicated ones)

    def __len__(self) -> int:
        return len(self._order)

    @property
    def processing(self) -> int:
        return len(self._processing)

    def add(self, key: K) -> None:
        if self._shut or key in self._dirty:
            return
        self._dirty.add(key)
        self.adds += 1
        if key in self._processing:
            return  # queued again by ``done``
        self._order.append(key)
        self._wake()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._timers[key] = (due, loop.call_at(due, self._fire, key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: K) -> float:
        """Queue ``key`` after its back-off (doubling per consecutive failure); returns the delay."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self.backoff_base * 2**n, self.backoff_max) * (0.75 + random.random() / 2)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure backs off from the start again."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def discard(self, key: K) -> None:
        """The object is gone: drop its delayed add and back-off (a queued key is dropped by its worker)."""
        self._failures.pop(key, None)
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()

    async def get(self) -> K:
        """The next key, now marked as processing: the caller must call ``done(key)``."""
        while not self._order or self._shut:
            if self._shut:
                raise ShutDown()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                raise
        key = self._order.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty and not self._shut:
            self._order.append(key)
            self._wake()

    def shut_down(self) -> None:
        self._shut = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
