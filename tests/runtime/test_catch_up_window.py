"""The catch-up window of tier 0 (sglang_patch/plain_decode.py) on every decode cycle.

Why: a target-only cycle runs under SGLang's overlap scheduler, which launches the next cycle on the GPU while the
host processes the last one. Any device value the window reads on the host (``int(t.max())``, ``.item()``,
``.tolist()``) waits for the GPU and serializes the two: measured on an H100, tier 0's served cycle became 2.4x a
plain server's (4.9 against 2.0 ms at batch 1). Tensors on the ``meta`` device have shapes but no values, so any
host read of one raises: the window's per-cycle and per-prefill work must run on them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specdecode_runtime.sglang_patch.plain_decode import CatchUpWindow, _Retained  # noqa: E402

SLOTS = 48


def _row(pool, window: CatchUpWindow, device: str, hidden: int = 8) -> _Retained:
    bs = pool.shape[0]
    return _Retained(
        pool=pool.clone(),
        epoch=window.epoch_of(pool),
        pos=torch.zeros(bs, dtype=torch.int64, device=device),
        tok_in=torch.zeros(bs, dtype=torch.int64, device=device),
        tok_out=torch.zeros(bs, dtype=torch.int64, device=device),
        hidden=torch.zeros(bs, hidden, device=device),
    )


def test_a_cycle_and_a_prefill_read_no_device_value():
    w = CatchUpWindow(tokens=4)
    pool = torch.empty(6, dtype=torch.int64, device="meta")
    for _ in range(6):  # more cycles than the window keeps
        w.bind(SLOTS, pool.device)
        w.keep(_row(pool, w, "meta"))
    assert len(w.records) == 4
    w.forget(torch.empty(3, dtype=torch.int64, device="meta"))  # a prefill refilling three slots
    assert w.current(w.records[-1]).shape == (6,)


def test_a_refilled_slot_forgets_its_earlier_occupant():
    w = CatchUpWindow(tokens=8)
    pool = torch.tensor([3, 7, 11])
    w.bind(SLOTS, pool.device)
    rec = _row(pool, w, "cpu")
    w.keep(rec)
    w.forget(torch.tensor([7]))  # slot 7 now holds a new request
    assert w.current(rec).tolist() == [True, False, True]
    w.bind(SLOTS, pool.device)  # binding again (every cycle) keeps the epochs
    assert w.current(rec).tolist() == [True, False, True]


def test_binding_a_larger_pool_keeps_what_was_counted():
    w = CatchUpWindow(tokens=8)
    pool = torch.tensor([1, 2])
    w.bind(4, pool.device)
    rec = _row(pool, w, "cpu")
    w.keep(rec)
    w.forget(torch.tensor([2]))
    w.bind(SLOTS, pool.device)
    assert w.epochs.shape[0] == SLOTS
    assert w.current(rec).tolist() == [True, False]
