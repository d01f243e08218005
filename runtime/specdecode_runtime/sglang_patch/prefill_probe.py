"""Where a prefill's time goes under speculation: the target's extend, the draft's extend over the prompt, and the
processing of its result, on the host and, on CUDA, on the device.

Under speculation every new request's prefill runs two forwards where a server without speculation runs one (the
target's extend, capturing the hidden states the EAGLE-3 draft reads, then the draft's own extend over the whole
prompt), both eager. At a large batch with short requests a prefill lands every few decode cycles, so what those
forwards cost decides whether speculation can win there at all. The cycle clock already keeps prefill host time
out of the decode phases (``specdecode_prefill_seconds``); this probe splits each prefill batch into its parts so
that a slow prefill can be pinned on the target, the draft, the host's launch work or the result processing:

* ``launch``: host time of the scheduler's whole ``run_batch`` for the prefill batch;
* ``target`` / ``draft``: host time of the target's extend (to the point SGLang publishes its sequence lengths,
  just before the draft's extend) and of the draft's extend after it; with CUDA, the same two spans on the device,
  from events recorded on the forward stream, read back once they completed (never a synchronize);
* ``result``: host time of processing the prefill batch's result (where the scheduler waits for it on the device).

Counted on the rank that exports metrics; off (one attribute check per prefill) while no sink is installed.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

PHASES_HOST = ("launch", "target", "draft", "result")
PHASES_DEVICE = ("target", "draft")
MAX_PENDING = 256  # device spans waiting for their events; beyond it the oldest are counted as unresolved


@dataclass
class _Pending:
    events: tuple[Any, Any, Any]  # start, target done, draft done (torch.cuda.Event with timing)


@dataclass
class PrefillProbe:
    """Accumulates prefill phases and hands them to ``sink(phase, clock, seconds)`` (metrics) as they resolve.

    ``device_events`` makes the CUDA event pairs; None on CPU (host phases only)."""

    sink: Callable[[str, str, float], None]
    on_batch: Callable[[int, int], None] | None = None  # (requests, prompt tokens) per prefill batch
    device_events: Callable[[], Any] | None = None
    now: Callable[[], float] = time.perf_counter
    pending: deque[_Pending] = field(default_factory=deque)
    unresolved: int = 0

    def _event(self) -> Any:
        assert self.device_events is not None
        ev = self.device_events()
        ev.record()
        return ev

    def run_prefill(self, orig: Callable[..., Any], worker: Any, batch: Any, on_publish: Any, *rest: Any) -> Any:
        """``orig(worker, batch, marked_on_publish, *rest)`` with the target/draft boundary marked where SGLang
        publishes the target's sequence lengths (before the draft's extend)."""
        marks: list[Any] = []

        def published(seq_lens: Any) -> None:
            marks.append(self.now())
            if self.device_events is not None:
                marks.append(self._event())
            if on_publish is not None:
                on_publish(seq_lens)

        t0 = self.now()
        e0 = self._event() if self.device_events is not None else None
        out = orig(worker, batch, published, *rest)
        t2 = self.now()
        e2 = self._event() if self.device_events is not None else None
        t1 = marks[0] if marks else t2
        self.sink("target", "host", max(t1 - t0, 0.0))
        self.sink("draft", "host", max(t2 - t1, 0.0))
        if self.on_batch is not None:
            lens = getattr(batch, "extend_lens", None) or []
            self.on_batch(len(lens), int(sum(lens)))
        if e0 is not None and len(marks) > 1:
            self.pending.append(_Pending((e0, marks[1], e2)))
            while len(self.pending) > MAX_PENDING:
                self.pending.popleft()
                self.unresolved += 1
        self.resolve()
        return out

    def host(self, phase: str, seconds: float) -> None:
        """A host interval measured by the scheduler's hooks (``launch`` or ``result``)."""
        if seconds > 0.0:
            self.sink(phase, "host", seconds)

    def resolve(self) -> None:
        """Device spans of the prefills whose last event completed, oldest first (events complete in order)."""
        while self.pending and self.pending[0].events[2].query():
            e0, e1, e2 = self.pending.popleft().events
            self.sink("target", "device", max(e0.elapsed_time(e1), 0.0) / 1e3)
            self.sink("draft", "device", max(e1.elapsed_time(e2), 0.0) / 1e3)


def cuda_events() -> Callable[[], Any] | None:
    """A maker of timing events when this process drives a CUDA device, else None."""
    import torch

    if not torch.cuda.is_available():
        return None
    return lambda: torch.cuda.Event(enable_timing=True)
