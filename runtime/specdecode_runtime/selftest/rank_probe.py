"""What ``selftest`` observes inside each SGLang scheduler process (one per TP rank).

Installed by :func:`specdecode_runtime.scheduler_process.run_scheduler_process` when
``SPECDECODE_SELFTEST_DIR`` is set, after the runtime's own patches, so it sees SGLang exactly as the runtime
serves it. Each rank appends JSON lines to ``rank<r>.jsonl`` in that directory:

* ``target_backend``: the TP group size in force whenever the *target's* attention backend is built (at start-up
  and once per extra step tier). Anything other than the target TP size means the target half ran inside the
  draft's group: its collectives no longer match the other ranks'.
* ``kv_profile``: when SGLang profiles free memory to size the target KV pool, how many bytes of gathered target
  vocabulary this rank already holds for the draft (so the pool is sized with them resident).
* ``kv_cell``: the target's KV bytes per token as SGLang sizes the pool (draft pool included): equal on every rank,
  or the ranks would size different token counts.
* ``verify``: per target verify forward, the KV slots it writes (``out_cache_loc``), its positions, input ids
  (the drafted tokens) and request-pool slots; on rank 0 also the drafts accepted per request, recounted from the
  target's logits. Every rank must write the same slots.
* ``switch``: every step-tier swap, with the decode round it happened at.
* ``draft_call``: every draft forward, decode draft extend and prefill draft extend on the ranks that run the
  draft, with the worker's tier then (the target-only tier must run none; a prefill extend inside a decode round is
  the catch-up after target-only cycles). Tier-0 cycles are ``verify`` records with ``plain: true``: the target's
  own one-token decode, no drafts.
* ``error``: the last line of every error SGLang logs in this process (a scheduler's fatal exception).
* ``draft_swap``: every draft swap as it settles (loaded in place, or refused), with the decode round, the
  checkpoint digests before and after and, on the ranks that hold the draft, a digest of their own weight shards
  before and after (what the swap wrote there).
* ``graph_capture``: per CUDA graph runner built (target verify, draft, draft extend) its tier, seconds and the device
  memory it took, so the report can say what each Live tier costs at start-up.

``rank<r>.log`` keeps every SGLang log line of the rank, so a scheduler that dies is reported with its last lines.
While a file ``quiet`` exists in the directory, ``verify`` records are not taken: they read device tensors back to
the host every cycle, which a timed measurement must not pay.

Hangs: ``SIGUSR1`` dumps every thread's stack to ``rank<r>.stack`` (:mod:`faulthandler`), so the supervising
process can name the rank and the collective it is waiting in without any external tool.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from ..draft_group.broadcaster import ProposalBroadcaster
from ..draft_swap import DraftSwapper
from ..sglang_patch import process_state
from .draft_checks import greedy_accepted

DIR_ENV = "SPECDECODE_SELFTEST_DIR"

_out: Any = None
_lock = threading.Lock()
_rank: int | None = None
_decode_round = 0
_stack_file: Any = None
_quiet_file: Path | None = None


def quiet() -> bool:
    return _quiet_file is not None and _quiet_file.exists()


def record(event: str, **fields: Any) -> None:
    if _out is None:
        return
    line = json.dumps({"event": event, "rank": _rank, **fields}, default=str)
    with _lock:
        _out.write(line + "\n")
        _out.flush()


def install_from_env(tp_rank: int | None) -> bool:
    """Start recording in this scheduler process when ``SPECDECODE_SELFTEST_DIR`` is set."""
    global _out, _rank
    d = os.environ.get(DIR_ENV)
    if not d or _out is not None:
        return False
    _rank = int(tp_rank) if tp_rank is not None else -1
    path = Path(d)
    _out = open(path / f"rank{_rank}.jsonl", "a")  # noqa: SIM115 - lives as long as the process
    register_stack_dump(path, _rank)
    record("start", pid=os.getpid())
    logging.getLogger("sglang").addHandler(_ErrorRecorder())  # survives SGLang re-configuring the root logger
    log_handler = logging.FileHandler(path / f"rank{_rank}.log")
    log_handler.setLevel(logging.INFO)
    log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("sglang").addHandler(log_handler)
    global _quiet_file
    _quiet_file = path / "quiet"
    _wrap_sglang()
    return True


class _ErrorRecorder(logging.Handler):
    """SGLang logs a scheduler's fatal exception (with its traceback) before it signals the parent: keep the
    exception's last line, so the report names the failing rank and why."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)

    def emit(self, rec: logging.LogRecord) -> None:
        try:
            text = rec.getMessage()
        except Exception:  # noqa: BLE001
            return
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        record("error", message=(lines[-1] if lines else "")[:500], logger=rec.name)


def register_stack_dump(directory: str | os.PathLike[str], rank: int) -> None:
    """``SIGUSR1`` writes every thread's stack to ``rank<r>.stack``; ``rank<r>.pid`` tells the supervisor whom to
    signal (written last, so a listed pid always answers)."""
    global _stack_file
    path = Path(directory)
    _stack_file = open(path / f"rank{rank}.stack", "w")  # noqa: SIM115 - lives as long as the process
    faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)
    (path / f"rank{rank}.pid").write_text(str(os.getpid()))


def _wrap(owner: Any, name: str, make) -> None:
    orig = getattr(owner, name)
    setattr(owner, name, make(orig))


def _record_memory() -> None:
    """Device memory this rank holds once it serves (weights, KV pools, every tier's graphs): S against the other
    ranks shows what the split draft costs where it runs."""
    try:
        import torch

        if not torch.cuda.is_available():
            return
        free, total = torch.cuda.mem_get_info()
        record(
            "memory",
            used_bytes=int(total - free),
            allocated_bytes=int(torch.cuda.memory_allocated()),
            reserved_bytes=int(torch.cuda.memory_reserved()),
        )
    except Exception:  # noqa: BLE001 - observation only
        return


def _tp_sizes() -> dict[str, int]:
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import get_parallel

    return {"tp_group": int(parallel_state.get_tp_group().world_size), "tp_size": int(get_parallel().tp_size)}


def _wrap_sglang() -> None:
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    def target_backend(tier: bool) -> None:
        from sglang.srt.runtime_context import get_spec

        record("target_backend", tier=tier, steps=getattr(get_spec(), "speculative_num_steps", None), **_tp_sizes())

    def backend(orig):  # a step tier's target verify backend (build_adaptive_runtime_state)
        def _get_attention_backend(self, init_new_workspace: bool = False):
            if not self.is_draft_worker:
                target_backend(True)
            return orig(self, init_new_workspace=init_new_workspace)

        return _get_attention_backend

    def backends(orig):  # the target's start-up backends
        def init_attention_backends(self, *a, **k):
            if not self.is_draft_worker:
                target_backend(False)
            return orig(self, *a, **k)

        return init_attention_backends

    def profile(orig):
        def _profile_available_bytes(self, *a, **k):
            st = process_state.split
            held = 0
            if st is not None:
                held = sum(int(t.numel() * t.element_size()) for t in st.gathered if t is not None)
            record(
                "kv_profile",
                gathered_bytes=held,
                split=st is not None,
                head_gathered=bool(st.head_gathered) if st is not None else None,
                in_draft=bool(st.groups.in_draft) if st is not None else None,
            )
            return orig(self, *a, **k)

        return _profile_available_bytes

    def forward(orig):
        def forward_(self, forward_batch, *a, **k):
            mode = forward_batch.forward_mode
            # a target-only cycle (tier 0) is the target's plain decode forward inside a speculative server: a
            # one-token "verify" that accepts no drafts, recorded like one (same KV-slot and counter checks)
            plain = mode.is_decode() and self.spec_algorithm.is_speculative()
            if self.is_draft_worker or not (mode.is_target_verify() or plain) or quiet():
                return orig(self, forward_batch, *a, **k)
            out = orig(self, forward_batch, *a, **k)
            loc, pools = forward_batch.out_cache_loc, forward_batch.req_pool_indices
            ids = forward_batch.input_ids.tolist() if forward_batch.input_ids is not None else None
            record(
                "verify",
                round=_decode_round,
                bs=int(forward_batch.batch_size),
                out_cache_loc=loc.tolist() if loc is not None else None,
                positions=forward_batch.positions.tolist() if forward_batch.positions is not None else None,
                input_ids=ids,
                req_pool_indices=pools.tolist() if pools is not None else None,
                accepted=([0] * int(forward_batch.batch_size) if plain else _recount(forward_batch, out, ids))
                if _rank == 0
                else None,
                plain=plain,
            )
            return out

        return forward_

    def generation(orig):
        def forward_batch_generation(self, batch, *a, **k):
            global _decode_round
            if not (batch.forward_mode.is_extend() or batch.is_extend_in_batch) and not batch.forward_mode.is_idle():
                _decode_round += 1
                if _decode_round == 1:
                    _record_memory()
            return orig(self, batch, *a, **k)

        return forward_batch_generation

    def apply_state(orig):
        def apply_runtime_state(self, state):
            before = self.speculative_num_steps
            out = orig(self, state)
            if before != self.speculative_num_steps:
                record(
                    "switch",
                    round=_decode_round,
                    frm=before,
                    to=self.speculative_num_steps,
                    t=time.time(),
                    measuring=quiet(),
                )
            return out

        return apply_runtime_state

    def draft_call(kind: str):
        """Every draft forward and draft extend with the tier the worker ran then (on the ranks that run the draft):
        at tier 0 there must be none; ``prefill_extend`` during a decode round is the catch-up extend."""

        def wrapper(orig):
            def call(self, batch, *a, **k):
                if not quiet():
                    record("draft_call", kind=kind, steps=int(self.speculative_num_steps), round=_decode_round)
                return orig(self, batch, *a, **k)

            return call

        return wrapper

    def cell(orig):
        def __init__(self, kvc, *a, **k):
            orig(self, kvc, *a, **k)
            if not kvc.is_draft_worker:
                record("kv_cell", cell_size=int(getattr(self, "_cell_size", 0) or 0))

        return __init__

    def capture(kind: str):
        def wrapper(orig):
            def __init__(self, *a, **k):
                import torch

                if kind == "target_verify" and (
                    type(self) is not DecodeCudaGraphRunner or getattr(a[0] if a else None, "is_draft_worker", False)
                ):
                    return orig(self, *a, **k)  # a draft runner's base-class init: recorded by its own wrapper

                steps = k.get("speculative_num_steps")
                if steps is None:
                    holder = a[0] if a else None
                    steps = getattr(holder, "speculative_num_steps", None)
                if steps is None:
                    from sglang.srt.runtime_context import get_spec

                    steps = getattr(get_spec(), "speculative_num_steps", None)
                cuda = torch.cuda.is_available()
                free0 = torch.cuda.mem_get_info()[0] if cuda else 0
                t0 = time.perf_counter()
                orig(self, *a, **k)
                free1 = torch.cuda.mem_get_info()[0] if cuda else 0
                record(
                    "graph_capture",
                    kind=kind,
                    steps=steps,
                    seconds=round(time.perf_counter() - t0, 3),
                    bytes=int(free0 - free1),
                )

            return __init__

        return wrapper

    try:
        from sglang.srt.model_executor.runner import DecodeCudaGraphRunner
        from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
        from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner
    except ImportError:  # an SGLang without these runners: nothing to time
        pass
    else:
        _wrap(DecodeCudaGraphRunner, "__init__", capture("target_verify"))
        _wrap(EAGLEDraftCudaGraphRunner, "__init__", capture("draft"))
        _wrap(EAGLEDraftExtendCudaGraphRunner, "__init__", capture("draft_extend"))

    from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator

    _wrap(DefaultPoolConfigurator, "__init__", cell)
    _wrap(ModelRunner, "_get_attention_backend", backend)
    _wrap(ModelRunner, "init_attention_backends", backends)
    _wrap(KVCacheConfigurator, "_profile_available_bytes", profile)
    _wrap(ModelRunner, "forward", forward)
    _wrap(EAGLEWorkerV2, "forward_batch_generation", generation)
    _wrap(EAGLEWorkerV2, "apply_runtime_state", apply_state)
    _wrap(EagleDraftWorker, "draft", draft_call("draft"))
    _wrap(EagleDraftWorker, "_draft_extend_for_decode", draft_call("extend"))
    _wrap(EagleDraftWorker, "_draft_extend_for_prefill", draft_call("prefill_extend"))
    _wrap(DraftSwapper, "settle", _record_swap)
    if os.environ.get(CORRUPT_ENV) == "1":
        _corrupt_draft()


def _record_swap(orig):
    def settle(self, pending):
        weights = getattr(self.target, "params_digest", None)
        before, identity = (weights() if weights is not None else None), self.identity
        out = orig(self, pending)
        record(
            "draft_swap",
            round=_decode_round,
            seq=out.seq,
            source=out.source,
            ok=out.ok,
            cause=out.cause,
            holds=bool(self.target.holds_draft),
            digest_before=identity.digest,
            digest_after=out.identity.digest,
            params_before=before,
            params_after=weights() if weights is not None else None,
            pause_s=round(out.pause_seconds, 4),
        )
        return out

    return settle


def _recount(forward_batch, out, ids: list[int] | None) -> list[int] | None:
    """Drafts accepted per request, recounted from the target's greedy argmax over this verify's logits (for
    :mod:`.draft_checks`: a count that owes nothing to SGLang's accept list or to the exported counters)."""
    info, logits = forward_batch.spec_info, getattr(getattr(out, "logits_output", None), "next_token_logits", None)
    bs = int(forward_batch.batch_size)
    if ids is None or logits is None or bs <= 0 or len(ids) % bs:
        return None
    n = len(ids) // bs
    target = logits[: bs * n].argmax(dim=-1).tolist()
    chain = int(getattr(info, "topk", 1) or 1) == 1
    nxt: Any = None if chain else info.retrieve_next_token.tolist()
    sib: Any = None if chain else info.retrieve_next_sibling.tolist()
    return [
        greedy_accepted(
            ids[b * n : (b + 1) * n], target[b * n : (b + 1) * n], None if chain else nxt[b], None if chain else sib[b]
        )
        for b in range(bs)
    ]


CORRUPT_ENV = "SPECDECODE_SELFTEST_CORRUPT_DRAFT"
CORRUPT_TOKEN = 3  # the first word token of the tiny tokenizer; any fixed id makes the draft wrong


def _corrupt_draft() -> None:
    """``selftest --corrupt-draft``: S's leader proposes one constant token instead of its draft's, the negative
    control for the draft checks (the target's verify keeps the output tokens correct regardless)."""

    def make(orig):
        def broadcast(self, bs, draft_tokens=None, *a, **k):
            if self.groups.is_leader and draft_tokens is not None:
                draft_tokens = draft_tokens.clone().fill_(CORRUPT_TOKEN)
            return orig(self, bs, draft_tokens, *a, **k)

        return broadcast

    _wrap(ProposalBroadcaster, "broadcast", make)


def read_records(directory: str | os.PathLike[str]) -> dict[int, list[dict]]:
    """Every rank's records (rank -> events in order)."""
    out: dict[int, list[dict]] = {}
    for f in sorted(Path(directory).glob("rank*.jsonl")):
        rank = int(f.stem[4:])
        events = []
        for line in f.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a killed process
        out[rank] = events
    return out


def events(rank_dir: Path, rank: int, event: str) -> list[dict]:
    """One rank's records of one event kind, read while the run goes on (a cut last line is skipped)."""
    f = rank_dir / f"rank{rank}.jsonl"
    if not f.exists():
        return []
    out = []
    for line in f.read_text().splitlines():
        if f'"event": "{event}"' in line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out
