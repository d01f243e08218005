"""The engine-independent half of the split draft: a draft process group S inside the target's TP group.

Everything here speaks plain ``torch.distributed`` and knows nothing about SGLang, so it runs under gloo on a CPU
(tests) and under NCCL in a pod. ``sglang_patch`` binds it into SGLang 0.5.23.

The pieces:

* :func:`choose_draft_ranks` picks S: ``draft.ranks`` when given, else the ranks that share rank 0's PCIe switch /
  NVLink island (:class:`GpuTopology`, parsed from ``nvidia-smi topo -m``), else ranks ``0..d-1``.
* :class:`DraftGroups` creates, on **every** rank and in a fixed order, the draft group (S) and a dedicated
  broadcast communicator over the whole target group. Group creation is collective over the default group, so a
  rank that skipped it or changed the order would hang everyone: the order is fixed here, once.
* :meth:`DraftGroups.gather_vocab_shards` all-gathers a vocab-sharded tensor (the target's embedding, a shared
  lm_head) once at init, over the target group, so S holds the full tensor (and its own |S|-way shard of it).
* :class:`ProposalLayout` / :class:`ProposalBroadcaster` pack the proposals into one int64 buffer and broadcast it
  from S's leader: topk=1 sends only ``draft_tokens [bs, steps]`` (the tree is a constant chain), topk>1 adds
  ``parent_list [bs, topk*(steps-1)+1]`` and ``top_scores_index [bs, n-1]``. Shapes are never sent: bs, steps and
  topk are known on every rank (identical schedulers).
* Graph safety: the broadcast is eager and refuses to run while the current stream is capturing a CUDA graph. A
  draft graph is replayed on S only, so a collective inside it would hang the ranks outside S.
* :func:`draft_only_scope` turns a collective issued on S alone over a group that reaches outside S (a hidden
  world barrier, a distributed free-memory probe) into an immediate :class:`SubsetCollectiveError` instead of a
  hang; :class:`CollectiveCounter` counts collectives per group (tests and ``NCCL_DEBUG``-free diagnosis).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.distributed as dist


class DraftGroupError(ValueError):
    """A draft placement that cannot be served (raised before any group is created)."""


class SubsetCollectiveError(RuntimeError):
    """A collective over a group reaching outside S was issued inside a draft-only scope: it would deadlock."""


# --------------------------------------------------------------------------------------------------------------
# Choosing S
# --------------------------------------------------------------------------------------------------------------

# nvidia-smi topo -m link kinds, nearest first. NV# (NVLink, any count) is nearer than any PCIe path.
_PCIE_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}


@dataclass(frozen=True)
class GpuTopology:
    """Link kinds between the GPUs of one node, indexed by local GPU index (= TP rank within the node here).

    ``links[i][j]`` is an ``nvidia-smi topo -m`` cell: ``X``, ``NV<n>``, ``PIX``, ``PXB``, ``PHB``, ``NODE``,
    ``SYS``.
    """

    links: tuple[tuple[str, ...], ...]

    @property
    def size(self) -> int:
        return len(self.links)

    def distance(self, i: int, j: int) -> int:
        """Smaller is nearer: 0 self, 1 NVLink, then PIX/PXB (one PCIe switch), PHB, NODE, SYS."""
        cell = self.links[i][j]
        if cell == "X":
            return 0
        if cell.startswith("NV"):
            return 1
        return 1 + _PCIE_RANK.get(cell, 6)

    def island(self, rank: int) -> list[int]:
        """GPUs sharing ``rank``'s NVLink island when it has NVLink peers, else its PCIe switch (PIX/PXB)."""
        nv = [j for j in range(self.size) if j == rank or self.links[rank][j].startswith("NV")]
        if len(nv) > 1:
            return nv
        return [j for j in range(self.size) if j == rank or self.links[rank][j] in ("PIX", "PXB")]


def parse_nvidia_smi_topo(text: str) -> GpuTopology:
    """Parse the GPU block of ``nvidia-smi topo -m`` (header ``GPU0 GPU1 ...``, then one ``GPUi`` row per GPU)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    header_idx = next((i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", ln)), None)
    if header_idx is None:
        raise ValueError("no GPU0 header in nvidia-smi topo output")
    gpus = [c for c in lines[header_idx].split() if re.fullmatch(r"GPU\d+", c)]
    n = len(gpus)
    rows: list[tuple[str, ...]] = []
    for ln in lines[header_idx + 1 :]:
        cells = ln.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            break
        rows.append(tuple(cells[1 : n + 1]))
    if len(rows) != n or any(len(r) != n for r in rows):
        raise ValueError(f"nvidia-smi topo: expected a {n}x{n} GPU matrix")
    return GpuTopology(links=tuple(rows))


def detect_topology(timeout: float = 10.0) -> GpuTopology | None:
    """``nvidia-smi topo -m`` of this node, or None when it is not available or unparseable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout, check=True)
        return parse_nvidia_smi_topo(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def choose_draft_ranks(
    tp_size: int,
    draft_tp: int,
    ranks: Sequence[int] | None = None,
    topology: GpuTopology | None = None,
) -> tuple[int, ...]:
    """S as sorted TP ranks (0-based within the target group).

    * ``ranks`` given: used as is after validation (length = ``draft_tp``, unique, inside the target group).
    * else with a topology: rank 0 plus its nearest peers (its NVLink island or PCIe switch first, then by link
      distance, ties to the lower rank), so the draft's own collectives stay on the shortest links.
    * else: ``0 .. draft_tp-1``.

    S always contains rank 0 unless ``ranks`` says otherwise: rank 0 is where SGLang's scheduler receives requests.
    """
    if tp_size < 1 or draft_tp < 1:
        raise DraftGroupError(f"tp sizes must be >= 1 (target {tp_size}, draft {draft_tp})")
    if draft_tp > tp_size:
        raise DraftGroupError(f"draft TP {draft_tp} is larger than target TP {tp_size}: S must be inside the target group")
    if tp_size % draft_tp:
        raise DraftGroupError(f"draft TP {draft_tp} must divide target TP {tp_size}")
    if ranks is not None:
        chosen = [int(r) for r in ranks]
        if len(chosen) != draft_tp:
            raise DraftGroupError(f"draft.ranks has {len(chosen)} entries, draft TP is {draft_tp}")
        if len(set(chosen)) != len(chosen):
            raise DraftGroupError(f"draft.ranks {chosen} has duplicates")
        outside = [r for r in chosen if not 0 <= r < tp_size]
        if outside:
            raise DraftGroupError(
                f"draft.ranks {outside} are not inside the target TP group 0..{tp_size - 1}: "
                "a draft outside the target group would need the verify hidden states moved every step"
            )
        return tuple(sorted(chosen))
    if topology is not None and topology.size >= tp_size:
        island = [r for r in topology.island(0) if r < tp_size]
        rest = sorted((r for r in range(tp_size) if r not in island), key=lambda r: (topology.distance(0, r), r))
        ordered = sorted(island, key=lambda r: (topology.distance(0, r), r)) + rest
        return tuple(sorted(ordered[:draft_tp]))
    return tuple(range(draft_tp))


@dataclass(frozen=True)
class DraftPlacement:
    """S inside the target group, both as *global* ranks of the default process group.

    ``target_ranks`` is in TP order (TP rank i is ``target_ranks[i]``); ``draft_ranks`` is sorted, and its first
    entry is S's leader, the source of every proposal broadcast.
    """

    target_ranks: tuple[int, ...]
    draft_ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.draft_ranks:
            raise DraftGroupError("the draft group is empty")
        missing = sorted(set(self.draft_ranks) - set(self.target_ranks))
        if missing:
            raise DraftGroupError(f"draft ranks {missing} are not inside the target group {list(self.target_ranks)}")

    @classmethod
    def from_tp_ranks(cls, target_ranks: Sequence[int], tp_local: Sequence[int]) -> "DraftPlacement":
        target = tuple(int(r) for r in target_ranks)
        return cls(target_ranks=target, draft_ranks=tuple(sorted(target[i] for i in tp_local)))

    @property
    def leader(self) -> int:
        return self.draft_ranks[0]

    @property
    def draft_tp_size(self) -> int:
        return len(self.draft_ranks)

    @property
    def is_split(self) -> bool:
        return len(self.draft_ranks) < len(self.target_ranks)

    def contains(self, rank: int) -> bool:
        return rank in self.draft_ranks

    def rank_in_draft(self, rank: int) -> int:
        return self.draft_ranks.index(rank)


# --------------------------------------------------------------------------------------------------------------
# Proposal packing
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposalLayout:
    """Column widths of the packed proposal rows: ``[draft_tokens | parent_list | top_scores_index]`` per request.

    topk=1 (a chain): only ``draft_tokens [bs, steps]``; the parents and score indices are constants every rank
    rebuilds itself. topk>1: ``draft_tokens [bs, n-1]``, ``parent_list [bs, topk*(steps-1)+1]`` and
    ``top_scores_index [bs, n-1]`` (SGLang's ``organize_draft_results`` shapes).
    """

    steps: int
    topk: int = 1
    num_draft_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.steps < 1 or self.topk < 1:
            raise ValueError("steps and topk must be >= 1")
        if self.topk > 1 and (self.num_draft_tokens is None or self.num_draft_tokens < 2):
            raise ValueError("a tree (topk > 1) needs num_draft_tokens >= 2")

    @property
    def token_cols(self) -> int:
        return self.steps if self.topk == 1 else int(self.num_draft_tokens) - 1

    @property
    def parent_cols(self) -> int:
        return 0 if self.topk == 1 else self.topk * (self.steps - 1) + 1

    @property
    def score_cols(self) -> int:
        return 0 if self.topk == 1 else int(self.num_draft_tokens) - 1

    @property
    def row_cols(self) -> int:
        return self.token_cols + self.parent_cols + self.score_cols

    def numel(self, bs: int) -> int:
        return bs * self.row_cols

    def nbytes(self, bs: int) -> int:
        return self.numel(bs) * 8

    def pack(
        self,
        draft_tokens: torch.Tensor,
        parent_list: torch.Tensor | None = None,
        top_scores_index: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One contiguous int64 ``[bs * row_cols]`` buffer (``out`` reused when given)."""
        bs = draft_tokens.shape[0]
        if tuple(draft_tokens.shape) != (bs, self.token_cols):
            raise ValueError(f"draft_tokens shape {tuple(draft_tokens.shape)} != ({bs}, {self.token_cols})")
        buf = out[: self.numel(bs)] if out is not None else torch.empty(
            self.numel(bs), dtype=torch.int64, device=draft_tokens.device
        )
        rows = buf.view(bs, self.row_cols)
        rows[:, : self.token_cols].copy_(draft_tokens)
        if self.topk > 1:
            if parent_list is None or top_scores_index is None:
                raise ValueError("a tree proposal needs parent_list and top_scores_index")
            if tuple(parent_list.shape) != (bs, self.parent_cols):
                raise ValueError(f"parent_list shape {tuple(parent_list.shape)} != ({bs}, {self.parent_cols})")
            if tuple(top_scores_index.shape) != (bs, self.score_cols):
                raise ValueError(f"top_scores_index shape {tuple(top_scores_index.shape)} != ({bs}, {self.score_cols})")
            c = self.token_cols
            rows[:, c : c + self.parent_cols].copy_(parent_list)
            rows[:, c + self.parent_cols :].copy_(top_scores_index)
        return buf

    def unpack(self, buf: torch.Tensor, bs: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Views ``(draft_tokens, parent_list, top_scores_index)``; the last two are None for a chain."""
        rows = buf[: self.numel(bs)].view(bs, self.row_cols)
        tokens = rows[:, : self.token_cols]
        if self.topk == 1:
            return tokens, None, None
        c = self.token_cols
        return tokens, rows[:, c : c + self.parent_cols], rows[:, c + self.parent_cols :]

    def chain_parents(self, bs: int, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The constant chain topology (topk=1) every rank rebuilds, as SGLang 0.5.23's
        ``EagleDraftWorkerBase._rebuild_topk1_chain_buffers`` does: parents ``[-1, 0, .., steps-2]`` (width
        ``steps``, or 0 for a single step) and score indices ``[0 .. steps-1]``."""
        width = self.steps if self.steps > 1 else 0
        parents = torch.arange(-1, width - 1, dtype=torch.int64, device=device).repeat(bs, 1)
        scores = torch.arange(self.steps, dtype=torch.int64, device=device).repeat(bs, 1)
        return parents, scores


def _is_capturing() -> bool:
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


# --------------------------------------------------------------------------------------------------------------
# Groups
# --------------------------------------------------------------------------------------------------------------


def _default_new_group(ranks: Sequence[int], backend: str | None) -> Any:
    return dist.new_group(ranks=list(ranks), backend=backend)


@dataclass
class DraftGroups:
    """The draft group S and the dedicated broadcast communicator, created identically on every rank.

    Creation order (the same on every rank, and it must stay so): (1) the draft group over S, (2) a singleton
    group for each rank outside S (so every rank belongs to exactly one draft-layer group, as in SGLang's
    ``init_model_parallel_group``), (3) the broadcast communicator over the whole target group. The broadcast
    communicator is never shared with the target's own TP collectives, so a proposal broadcast cannot interleave
    with the target's in-graph all-reduces.

    ``new_group(ranks, backend)`` is injectable: SGLang's binding makes (1) a ``GroupCoordinator``.
    """

    placement: DraftPlacement
    rank: int
    draft_group: Any = None
    bcast_group: Any = None
    draft_backend: str | None = None
    bcast_backend: str | None = None
    _owned: list[Any] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        placement: DraftPlacement,
        *,
        rank: int | None = None,
        draft_backend: str | None = None,
        bcast_backend: str | None = None,
        new_draft_group: Callable[[Sequence[int], str | None], Any] | None = None,
        new_bcast_group: Callable[[Sequence[int], str | None], Any] | None = None,
    ) -> "DraftGroups":
        rank = dist.get_rank() if rank is None else rank
        make_draft = new_draft_group or _default_new_group
        make_bcast = new_bcast_group or _default_new_group
        groups = cls(placement=placement, rank=rank, draft_backend=draft_backend, bcast_backend=bcast_backend)
        # (1) + (2): every rank calls new_group for every partition block, in the same order.
        for block in cls.partition(placement):
            g = make_draft(block, draft_backend)
            if rank in block:
                groups.draft_group = g
        # (3)
        groups.bcast_group = make_bcast(placement.target_ranks, bcast_backend)
        return groups

    @staticmethod
    def partition(placement: DraftPlacement) -> list[tuple[int, ...]]:
        """S first, then each target rank outside S alone, in rank order."""
        others = [(r,) for r in placement.target_ranks if r not in placement.draft_ranks]
        return [tuple(placement.draft_ranks), *others]

    @property
    def in_draft(self) -> bool:
        return self.placement.contains(self.rank)

    @property
    def is_leader(self) -> bool:
        return self.rank == self.placement.leader

    # -- init-time collectives (every target rank calls them) ---------------------------------------------------

    def gather_vocab_shards(self, shard: torch.Tensor, dim: int = 0) -> torch.Tensor | None:
        """All-gather a vocab-parallel shard (TP order) over the target group; S gets the full tensor, the other
        ranks get None (they free their copy at once). Called once at init, and again after a weight update."""
        world = len(self.placement.target_ranks)
        parts = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(parts, shard.contiguous(), group=self.bcast_group)
        if not self.in_draft:
            return None
        return torch.cat(parts, dim=dim)

    def draft_shard(self, full: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """This rank's |S|-way shard of a gathered vocab tensor (the layout a draft at TP |S| expects)."""
        d = self.placement.draft_tp_size
        if full.shape[dim] % d:
            raise DraftGroupError(f"vocab dimension {full.shape[dim]} is not divisible by draft TP {d}")
        return full.chunk(d, dim=dim)[self.placement.rank_in_draft(self.rank)].contiguous()

    def broadcast_ints(self, values: Sequence[int] | None, n: int, device: Any = "cpu") -> list[int]:
        """Small init-time metadata (e.g. the draft's hidden size) from S's leader to every target rank."""
        t = torch.zeros(n, dtype=torch.int64, device=device)
        if self.is_leader:
            t.copy_(torch.tensor(list(values or []), dtype=torch.int64))
        dist.broadcast(t, src=self.placement.leader, group=self.bcast_group)
        return [int(v) for v in t.tolist()]

    def destroy(self) -> None:
        for g in (self.draft_group, self.bcast_group):
            if g is not None and not hasattr(g, "destroy") and g is not dist.GroupMember.WORLD:
                with contextlib.suppress(Exception):
                    dist.destroy_process_group(g)


class ProposalBroadcaster:
    """Broadcast packed proposals from S's leader to every target rank, eagerly, into a preallocated buffer.

    The buffer is allocated once for ``max_bs`` so its address never changes (a CUDA graph on any rank may read
    the unpacked views). ``broadcast`` refuses to run while a CUDA graph is being captured: S replays its draft
    graphs alone, so a collective recorded into one would wait forever for the ranks outside S.
    """

    def __init__(self, groups: DraftGroups, layout: ProposalLayout, max_bs: int, device: Any = "cpu"):
        self.groups = groups
        self.layout = layout
        self.max_bs = max_bs
        self.device = torch.device(device)
        self.buffer = torch.zeros(layout.numel(max_bs), dtype=torch.int64, device=self.device)
        self.calls = 0

    def set_layout(self, layout: ProposalLayout) -> None:
        """Switch step count (a step-control tier swap); grows the buffer only if the new rows are wider."""
        self.layout = layout
        need = layout.numel(self.max_bs)
        if need > self.buffer.numel():
            self.buffer = torch.zeros(need, dtype=torch.int64, device=self.device)

    def broadcast(
        self,
        bs: int,
        draft_tokens: torch.Tensor | None = None,
        parent_list: torch.Tensor | None = None,
        top_scores_index: torch.Tensor | None = None,
        layout: ProposalLayout | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """On the leader pass the proposals; elsewhere pass only ``bs``. Every rank gets the same views back.

        ``layout`` (optional) is the current step tier's layout; every rank must pass the same one."""
        if layout is not None and layout != self.layout:
            self.set_layout(layout)
        if bs > self.max_bs:
            raise ValueError(f"batch {bs} is larger than the broadcaster's max_bs {self.max_bs}")
        if _is_capturing():
            raise RuntimeError(
                "proposal broadcast inside CUDA-graph capture: the draft graph is replayed on S only, so the "
                "broadcast must stay outside it (eager, between graph replays)"
            )
        n = self.layout.numel(bs)
        if self.groups.is_leader:
            if draft_tokens is None:
                raise ValueError("the leader must pass draft_tokens")
            self.layout.pack(draft_tokens, parent_list, top_scores_index, out=self.buffer)
        if n:
            dist.broadcast(self.buffer[:n], src=self.groups.placement.leader, group=self.groups.bcast_group)
        self.calls += 1
        return self.layout.unpack(self.buffer, bs)


# --------------------------------------------------------------------------------------------------------------
# Collective accounting and the draft-only guard
# --------------------------------------------------------------------------------------------------------------

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "all_to_all_single",
    "barrier",
    "broadcast_object_list",
    "all_gather_object",
    "reduce",
    "gather",
    "scatter",
)

_scope: contextvars.ContextVar["_DraftOnlyScope | None"] = contextvars.ContextVar("_specdecode_draft_scope", default=None)
_counters: list["CollectiveCounter"] = []
_patched: dict[str, Callable] = {}
_patch_refs = 0


def _group_ranks(group: Any) -> tuple[int, ...]:
    if group is None or group is dist.GroupMember.WORLD:
        return tuple(range(dist.get_world_size()))
    try:
        return tuple(dist.get_process_group_ranks(group))
    except Exception:  # noqa: BLE001 - a foreign group object
        return ()


def _find_group(name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    if "group" in kwargs:
        return kwargs["group"]
    for a in args:
        if isinstance(a, dist.ProcessGroup):
            return a
    return None


def _wrap(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        group = _find_group(name, args, kwargs)
        scope = _scope.get()
        if scope is not None or _counters:
            ranks = _group_ranks(group)
            if scope is not None:
                scope.check(name, ranks)
            for c in _counters:
                c.record(name, ranks)
        return fn(*args, **kwargs)

    wrapper.__specdecode_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _install_wrappers() -> None:
    global _patch_refs
    if _patch_refs == 0:
        for name in COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is None or hasattr(fn, "__specdecode_wrapped__"):
                continue
            _patched[name] = fn
            setattr(dist, name, _wrap(name, fn))
    _patch_refs += 1


def _remove_wrappers() -> None:
    global _patch_refs
    _patch_refs -= 1
    if _patch_refs == 0:
        for name, fn in _patched.items():
            setattr(dist, name, fn)
        _patched.clear()


class CollectiveCounter:
    """Counts ``torch.distributed`` collectives by (op, group ranks) while active (a context manager)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    def record(self, name: str, ranks: tuple[int, ...]) -> None:
        self.calls.append((name, ranks))

    def count(self, op: str | None = None, ranks: Sequence[int] | None = None) -> int:
        want = tuple(ranks) if ranks is not None else None
        return sum(1 for n, r in self.calls if (op is None or n == op) and (want is None or r == want))

    def reset(self) -> None:
        self.calls.clear()

    def __enter__(self) -> "CollectiveCounter":
        _install_wrappers()
        _counters.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _counters.remove(self)
        _remove_wrappers()


@dataclass
class _DraftOnlyScope:
    draft_ranks: frozenset[int]
    what: str
    allow: Callable[[str, tuple[int, ...]], bool] | None = None

    def check(self, name: str, ranks: tuple[int, ...]) -> None:
        if not ranks or set(ranks) <= self.draft_ranks:
            return
        if self.allow is not None and self.allow(name, ranks):
            return
        raise SubsetCollectiveError(
            f"{name} over ranks {list(ranks)} issued during {self.what}, which runs on the draft ranks "
            f"{sorted(self.draft_ranks)} only: the other ranks never join it, so it would deadlock"
        )


@contextlib.contextmanager
def draft_only_scope(
    draft_ranks: Sequence[int], what: str = "a draft-only phase", allow: Callable[[str, tuple[int, ...]], bool] | None = None
) -> Iterator[None]:
    """Inside, any torch.distributed collective over a group that is not inside S raises SubsetCollectiveError."""
    _install_wrappers()
    token = _scope.set(_DraftOnlyScope(frozenset(draft_ranks), what, allow))
    try:
        yield
    finally:
        _scope.reset(token)
        _remove_wrappers()


def in_draft_only_scope() -> bool:
    return _scope.get() is not None
