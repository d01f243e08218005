"""Loading a new draft in place: the request on TP rank 0, the agreement of every rank, the copy (docs/runtime.md
"Loading a new draft in place").

**Route to the ranks.** ``POST /specdecode/v1/draft`` (:mod:`.control`) queues the source on rank 0
(:class:`DraftRequests`); the next step-table exchange (:class:`~.control.StepControlChannel`, the int64 broadcast
every rank already runs in ``Scheduler.ingest_requests``) carries its sequence number in the message's last slot and,
when there is one, the path in one ``broadcast_object_list`` after it. So every rank learns of the swap at the same
scheduler iteration, the same way a step table reaches it.

**Agreement, then copy.** Each rank that holds the draft (every rank with the sharded layout, S with the split one)
and rank 0 (for the identity) read and validate the checkpoint in a background thread
(:func:`.draft_checkpoint.load`: config and every tensor's name, dtype and shape against the served draft's, then the
bytes and their digest), while serving goes on. At every later exchange iteration the ranks all-reduce "ready"; once
all are, they all-gather their verdicts and each decides the same way (:func:`decide`): every rank valid and every
digest equal, or nobody copies. Then the ranks holding the draft copy it in place (:class:`DraftTarget`, bound to
SGLang in :mod:`.sglang_patch.draft_swap`) after a host backup of what they overwrite, and all-gather the copy's
outcome; if one rank failed, every rank restores its backup. The scheduler loop pauses only for this last step.

Rank 0 answers the request (the new identity, or the refusal's cause and message), exports
``specdecode_draft_info`` / ``specdecode_draft_swaps_total`` / ``specdecode_draft_swap_seconds`` and keeps the
identity ``GET`` returns.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from . import draft_checkpoint as ck
from .contract import draft_swap as ds
from .contract.draft_swap import DraftIdentity, SwapBusy

log = logging.getLogger("specdecode.draft_swap")

DEFAULT_DEADLINE_S = 600.0  # a rank still reading the checkpoint after this refuses it (the old draft serves on)
MAX_RANKS_QUOTED = 4


class DraftTarget(Protocol):
    """The draft of one rank as the swap sees it."""

    @property
    def holds_draft(self) -> bool: ...  # False outside S (split layout): nothing to copy here

    @property
    def unsupported(self) -> str | None: ...  # why this draft cannot be reloaded in place, else None

    def snapshot(self) -> Any: ...  # a host copy of everything ``load`` writes

    def load(self, tensors: Mapping[str, Any]) -> None: ...  # write the checkpoint into the served tensors in place

    def restore(self, backup: Any) -> None: ...  # write a snapshot back


@dataclass
class Outcome:
    """How one swap ended; the same on every rank (rank 0's answer to the request)."""

    seq: int
    source: str
    ok: bool
    identity: DraftIdentity  # served after the swap: the new one, or the unchanged old one
    previous: DraftIdentity
    cause: str | None = None
    error: str | None = None
    ranks: list[int] = field(default_factory=list)  # the ranks that refused or failed
    seconds: float = 0.0  # from the ranks learning of the swap to its outcome (they serve meanwhile)
    pause_seconds: float = 0.0  # the scheduler loop's pause: verdicts gathered, the copy, its agreement

    @property
    def result(self) -> str:
        return ds.RESULT_OK if self.ok else ds.RESULT_REFUSED

    @property
    def status(self) -> int:
        return 200 if self.ok else ds.CAUSE_STATUS.get(self.cause or "", 422)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "result": self.result,
            "source": self.source,
            "seconds": round(self.seconds, 4),
            "pauseSeconds": round(self.pause_seconds, 4),
        }
        if self.ok:
            out.update(draft=self.identity.to_json(), previous=self.previous.to_json())
        else:
            out.update(error=self.error, cause=self.cause, field="source", draft=self.identity.to_json())
            if self.ranks:
                out["ranks"] = self.ranks
        return out


@dataclass
class _Request:
    seq: int
    source: str
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class DraftRequests:
    """Rank 0: the endpoint's side of the swap (any thread) and the exchange's (the scheduler thread)."""

    def __init__(self, identity: DraftIdentity) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._queued: _Request | None = None
        self._running: _Request | None = None
        self.identity = identity
        self.last: Outcome | None = None

    def submit(self, source: str) -> concurrent.futures.Future:
        """Queue a swap; the future resolves to its :class:`Outcome`. :class:`SwapBusy` while one is queued or
        running."""
        with self._lock:
            busy = self._queued or self._running
            if busy is not None:
                raise SwapBusy(
                    f"a draft swap to {ck.describe_source(busy.source)} is already running; retry when it ends"
                )
            self._seq += 1
            req = self._queued = _Request(self._seq, source)
            return req.future

    def take(self) -> tuple[int, str] | None:
        """The queued swap, now travelling to the ranks (called by the exchange on rank 0)."""
        with self._lock:
            req, self._queued = self._queued, None
            if req is None:
                return None
            self._running = req
            return req.seq, req.source

    def finish(self, outcome: Outcome) -> None:
        with self._lock:
            req = self._running if self._running is not None and self._running.seq == outcome.seq else None
            self._running = None
            self.last = outcome
            self.identity = outcome.identity
        if req is not None and not req.future.done():
            try:
                req.future.set_result(outcome)
            except concurrent.futures.InvalidStateError:  # the caller went away: the outcome stays in ``last``
                pass

    def status(self) -> dict[str, Any]:
        with self._lock:
            busy = self._running or self._queued
            out: dict[str, Any] = {
                "draft": self.identity.to_json(),
                "swapping": {"source": busy.source} if busy is not None else None,
                "lastSwap": self.last.to_json() if self.last is not None else None,
            }
        return out


@dataclass
class _Pending:
    seq: int
    source: str
    t0: float
    done: threading.Event = field(default_factory=threading.Event)
    checkpoint: ck.Checkpoint | None = None
    refusal: tuple[str, str] | None = None  # (cause, message)
    backup: Any = None


def decide(views: list[dict[str, Any]], source: str) -> tuple[str | None, str | None, list[int], str | None]:
    """(cause, message, ranks, digest) from every rank's verdict; cause None: every rank copies. The same inputs on
    every rank give the same decision."""
    refused = sorted((v for v in views if not v["ok"]), key=lambda v: v["rank"])
    if refused:
        ranks = [v["rank"] for v in refused]
        msgs = {v["error"] for v in refused}
        if len(msgs) == 1:
            msg = refused[0]["error"]
            if len(views) > 1:
                msg += f" (on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:MAX_RANKS_QUOTED]))})"
        else:
            msg = "; ".join(f"rank {v['rank']}: {v['error']}" for v in refused[:MAX_RANKS_QUOTED])
        return refused[0]["cause"], msg, ranks, None
    digests = {v["rank"]: v["digest"] for v in views if v.get("digest") is not None}
    if len(set(digests.values())) > 1:
        shown = ", ".join(f"rank {r}: {d[:19]}" for r, d in sorted(digests.items())[:MAX_RANKS_QUOTED])
        return (
            ds.RANKS_DISAGREE,
            f"the ranks read different checkpoints at {ck.describe_source(source)} ({shown})",
            sorted(digests),
            None,
        )
    if not any(v["holds"] for v in views):
        return ds.UNSUPPORTED, "no rank holds a draft that can be reloaded in place", [], None
    return None, None, [], next(iter(digests.values()), None)


class DraftSwapper:
    """Every rank: the swap protocol on the scheduler thread. ``begin`` and ``poll`` are called at the same scheduler
    iterations on every rank (the step-table exchange's)."""

    def __init__(
        self,
        target: DraftTarget,
        *,
        source: str,
        is_src: bool,
        rank: int,
        group: Any = None,
        src: int = 0,
        requests: DraftRequests | None = None,
        metrics: Any = None,
        prepare: Callable[[str, ck.Reference], ck.Checkpoint] = ck.load,
        deadline_s: float = DEFAULT_DEADLINE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target, self.is_src, self.rank, self.group, self.src = target, is_src, rank, group, src
        self.requests, self.metrics, self.prepare = requests, metrics, prepare
        self.deadline_s, self.clock = deadline_s, clock
        self.prepares = bool(target.holds_draft) or is_src
        self.reference: ck.Reference | None = None
        self.reference_error: str | None = None
        self.identity = DraftIdentity(source, None)
        self._pending: _Pending | None = None
        self.outcomes: list[Outcome] = []

    # ---- start-up (every rank, same order: one broadcast) ----------------------------------------------------------
    def start(self) -> DraftSwapper:
        """Read the served checkpoint's reference where it is needed, and the identity on rank 0 (its digest reads
        the tensors once); every rank learns the identity from rank 0. A checkpoint that cannot be read leaves swaps
        refused with the reason, never stops serving."""
        if self.prepares:
            try:
                self.reference = ck.reference(self.identity.source)
            except ck.Refused as e:
                self.reference_error = f"the served draft's checkpoint cannot be read: {e.message}"
            except Exception as e:  # noqa: BLE001 - serving goes on without swaps
                self.reference_error = f"the served draft's checkpoint cannot be read: {type(e).__name__}: {e}"
        identity = self.identity
        if self.is_src and self.reference is not None:
            try:
                identity = DraftIdentity(self.identity.source, ck.digest(self.identity.source))
            except Exception as e:  # noqa: BLE001 - the identity then has no digest
                log.warning("specdecode: no digest of the served draft %s: %s", self.identity.source, e)
        self.identity = self._broadcast(identity)
        if self.requests is not None:
            self.requests.identity = self.identity
        if self.metrics is not None:
            self.metrics.set_draft(self.identity.source, self.identity.digest or "")
        if self.reference_error:
            log.warning("specdecode: draft swaps will be refused: %s", self.reference_error)
        return self

    # ---- per exchange iteration --------------------------------------------------------------------------------------
    def begin(self, seq: int, source: str) -> None:
        """A swap reached this rank: start reading the checkpoint in the background (ranks that read it)."""
        if self._pending is not None:  # rank 0 sends one at a time (busy until settled): never crash serving on it
            log.error("specdecode: draft swap %s arrived while swap %s is pending; ignored", seq, self._pending.seq)
            return
        p = self._pending = _Pending(seq, source, self.clock())
        if not self.prepares:
            p.done.set()
            return
        threading.Thread(target=self._read, args=(p,), name="specdecode-draft-read", daemon=True).start()

    def _read(self, p: _Pending) -> None:
        try:
            if self.target.holds_draft and self.target.unsupported:
                raise ck.Refused(
                    ds.UNSUPPORTED, f"the served draft cannot be reloaded in place: {self.target.unsupported}"
                )
            if self.reference is None:
                raise ck.Refused(ds.UNSUPPORTED, self.reference_error or "no reference checkpoint")
            p.checkpoint = self.prepare(p.source, self.reference)
        except ck.Refused as e:
            p.refusal = (e.cause, e.message)
        except MemoryError:
            p.refusal = (ds.UNREADABLE, "out of host memory while reading the checkpoint")
        except Exception as e:  # noqa: BLE001 - any failure to read is a refusal, never a crash
            p.refusal = (ds.UNREADABLE, f"{type(e).__name__}: {str(e)[:300]}")
        finally:
            p.done.set()

    def poll(self) -> Outcome | None:
        """Every rank at every exchange iteration: settle the pending swap once every rank has read it."""
        p = self._pending
        if p is None:
            return None
        late = self.prepares and not p.done.is_set() and self.clock() - p.t0 > self.deadline_s
        ready = p.done.is_set() or late
        if not self._all_min(1 if ready else 0):
            return None
        if late:
            p.refusal = (ds.TIMEOUT, f"reading the checkpoint took longer than {self.deadline_s:.0f} s")
        return self.settle(p)

    def _view(self, p: _Pending) -> dict[str, Any]:
        view: dict[str, Any] = {"rank": self.rank, "holds": bool(self.target.holds_draft), "digest": None}
        if p.refusal is not None:
            view.update(ok=False, cause=p.refusal[0], error=p.refusal[1])
        else:
            view.update(ok=True, digest=p.checkpoint.digest if p.checkpoint is not None else None)
        return view

    def settle(self, p: _Pending) -> Outcome:
        """Every rank, the same iteration: agree, copy (or not), agree on the copy, record the outcome."""
        t_pause = self.clock()
        cause, error, ranks, digest = decide(self._all_gather(self._view(p)), p.source)
        if cause is None:
            copied, why = self._copy(p) if self.target.holds_draft else (True, None)
            failed = [v for v in self._all_gather({"rank": self.rank, "ok": copied, "error": why}) if not v["ok"]]
            if failed:
                if copied and p.backup is not None:  # this rank copied: put the old draft back like the others
                    self._restore(p.backup)
                cause, ranks = ds.COPY_FAILED, [v["rank"] for v in failed]
                error = "copying the new draft failed; every rank serves the old draft: " + "; ".join(
                    f"rank {v['rank']}: {v['error']}" for v in failed[:MAX_RANKS_QUOTED]
                )
        previous = self.identity
        ok = cause is None
        if ok:
            self.identity = DraftIdentity(p.source, digest)
        end = self.clock()
        outcome = Outcome(
            seq=p.seq,
            source=p.source,
            ok=ok,
            identity=self.identity,
            previous=previous,
            cause=cause,
            error=error,
            ranks=ranks,
            seconds=end - p.t0,
            pause_seconds=end - t_pause,
        )
        p.checkpoint = p.backup = None  # host memory back before the next cycle
        self._pending = None
        self.outcomes.append(outcome)
        if self.metrics is not None:
            self.metrics.record_draft_swap(outcome.result, outcome.seconds)
            if ok:
                self.metrics.set_draft(self.identity.source, self.identity.digest or "")
        if self.requests is not None:
            self.requests.finish(outcome)
        if self.is_src:
            if ok:
                log.info(
                    "specdecode: draft swapped to %s (%s) in %.3f s, serving paused %.3f s",
                    ck.describe_source(p.source),
                    digest,
                    outcome.seconds,
                    outcome.pause_seconds,
                )
            else:
                log.warning("specdecode: draft swap to %s refused (%s): %s", ck.describe_source(p.source), cause, error)
        return outcome

    def _copy(self, p: _Pending) -> tuple[bool, str | None]:
        if p.checkpoint is None:
            return False, "no checkpoint read on this rank"
        try:
            p.backup = self.target.snapshot()
        except Exception as e:  # noqa: BLE001 - nothing written yet
            return False, f"backing up the served draft failed: {type(e).__name__}: {str(e)[:300]}"
        try:
            self.target.load(p.checkpoint.tensors)
        except Exception as e:  # noqa: BLE001 - reported to every rank, which then restores
            log.exception("specdecode: draft copy failed on rank %s; restoring the served draft", self.rank)
            self._restore(p.backup)
            return False, f"{type(e).__name__}: {str(e)[:300]}"
        return True, None

    def _restore(self, backup: Any) -> None:
        try:
            self.target.restore(backup)
        except Exception:  # noqa: BLE001 - nothing more can be done here; the log names the rank
            log.exception(
                "specdecode: restoring the served draft failed on rank %s: its draft may be damaged", self.rank
            )

    # ---- collectives over the TP group's gloo group ------------------------------------------------------------------
    def _world(self) -> int:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            return 1
        return int(dist.get_world_size(self.group))

    def _all_min(self, value: int) -> int:
        if self._world() == 1:
            return value
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return int(t.item())

    def _all_gather(self, obj: Any) -> list[Any]:
        n = self._world()
        if n == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * n
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _broadcast(self, obj: Any) -> Any:
        if self._world() == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=self.src, group=self.group)
        return box[0]
