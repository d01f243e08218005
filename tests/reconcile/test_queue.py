"""The work queue's contract (client-go's workqueue semantics): deduplication, one worker per key, a change during
processing queued once more, per-key back-off."""

from __future__ import annotations

import asyncio

import pytest

from specdecode_operator.reconcile.queue import ShutDown, WorkQueue


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 5))


def test_a_key_is_queued_at_most_once():
    async def main():
        q = WorkQueue()
        for key in ("a", "b", "a", "a", "b"):
            q.add(key)
        assert len(q) == 2 and q.adds == 2
        assert [await q.get(), await q.get()] == ["a", "b"]
        assert len(q) == 0

    run(main())


def test_a_key_being_processed_is_not_handed_out_and_a_change_meanwhile_requeues_it_once():
    async def main():
        q = WorkQueue()
        q.add("a")
        key = await q.get()
        q.add("a")
        q.add("a")  # two changes during the pass: one more pass
        assert len(q) == 0  # not handed to a second worker while the first holds it
        second = asyncio.ensure_future(q.get())
        await asyncio.sleep(0.01)
        assert not second.done()
        q.done(key)
        assert await second == "a"
        q.done("a")
        assert len(q) == 0 and q.processing == 0

    run(main())


def test_done_without_a_change_does_not_requeue():
    async def main():
        q = WorkQueue()
        q.add("a")
        q.done(await q.get())
        assert len(q) == 0

    run(main())


def test_failures_back_off_per_key_and_forget_resets():
    async def main():
        q = WorkQueue(backoff_base=0.01, backoff_max=0.04)
        delays = [q.add_rate_limited("a") for _ in range(4)]
        # 0.01, 0.02, 0.04, 0.04 with +-25 % jitter
        for got, want in zip(delays, (0.01, 0.02, 0.04, 0.04)):
            assert want * 0.75 <= got <= want * 1.25
        assert q.failures("a") == 4 and q.failures("b") == 0
        assert len(q) == 0  # not before its back-off
        assert await q.get() == "a"  # the earliest pending delay wins; later ones do not queue it twice
        q.done("a")
        await asyncio.sleep(0.06)
        assert len(q) == 0
        q.forget("a")
        assert 0.0075 <= q.add_rate_limited("a") <= 0.0125

    run(main())


def test_shut_down_wakes_workers():
    async def main():
        q = WorkQueue()
        waiting = asyncio.ensure_future(q.get())
        await asyncio.sleep(0)
        q.add_after("later", 10)
        q.shut_down()
        with pytest.raises(ShutDown):
            await waiting
        q.add("a")
        with pytest.raises(ShutDown):
            await q.get()

    run(main())
