"""Choosing S, the draft ranks inside the target's TP group, and naming it in global ranks.

Both halves run before any process group exists (the launcher validates ``draft.ranks`` with them), so they import
neither torch nor SGLang: a placement that cannot be served is refused with :class:`DraftGroupError` up front.
:func:`decide_draft_ranks` (in the scheduler processes) imports torch when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..contract.derived import draft_tp_problems
from .errors import DraftGroupError
from .topology import GpuTopology, detect_topology


def choose_draft_ranks(
    target_tp: int,
    draft_tp: int,
    ranks: Sequence[int] | None = None,
    topology: GpuTopology | None = None,
) -> tuple[int, ...]:
    """S as sorted TP ranks (0-based within the target group).

    * ``ranks`` given: used as is after validation (:func:`~specdecode_runtime.contract.derived.draft_tp_problems`).
    * else with a topology: rank 0 plus its nearest peers (its NVLink island or PCIe switch first, then by link
      distance, ties to the lower rank), so the draft's own collectives stay on the shortest links.
    * else: ``0 .. draft_tp-1``.

    S always contains rank 0 unless ``ranks`` says otherwise: rank 0 is where SGLang's scheduler receives requests.
    """
    problems = draft_tp_problems(target_tp, draft_tp, ranks)
    if problems:
        raise DraftGroupError(problems[0])
    if ranks is not None:
        return tuple(sorted(int(r) for r in ranks))
    if topology is not None and topology.size >= target_tp:
        island = [r for r in topology.island(0) if r < target_tp]
        rest = sorted((r for r in range(target_tp) if r not in island), key=lambda r: (topology.distance(0, r), r))
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
    def from_tp_ranks(cls, target_ranks: Sequence[int], tp_local: Sequence[int]) -> DraftPlacement:
        target = tuple(int(r) for r in target_ranks)
        return cls(target_ranks=target, draft_ranks=tuple(sorted(target[i] for i in tp_local)))

    @property
    def leader(self) -> int:
        return self.draft_ranks[0]

    @property
    def draft_tp(self) -> int:
        return len(self.draft_ranks)

    @property
    def is_split(self) -> bool:
        return len(self.draft_ranks) < len(self.target_ranks)

    def contains(self, rank: int) -> bool:
        return rank in self.draft_ranks

    def rank_in_draft(self, rank: int) -> int:
        return self.draft_ranks.index(rank)


def decide_draft_ranks(
    target_tp: int,
    draft_tp: int,
    ranks: Sequence[int] | None = None,
    *,
    group: Any = None,
    src: int = 0,
    detect: Callable[[], GpuTopology | None] | None = None,
) -> list[int]:
    """S, decided once on the target group's first rank and broadcast to every rank (TP-local ranks, sorted).

    Group creation is collective: if two ranks chose different S they would create different groups and hang.
    Each rank reading ``nvidia-smi topo`` itself can disagree (a timeout on one rank falls back to ``0..d-1``), so
    only ``src`` reads the topology (``detect``, default :func:`~.topology.detect_topology`, called only when
    ``ranks`` is None) and its choice is broadcast over ``group`` (a CPU/gloo group: SGLang's TP ``cpu_group``).
    Every rank of ``group`` must call this together."""
    import torch
    import torch.distributed as dist

    buf = torch.zeros(draft_tp, dtype=torch.int64)
    if dist.get_rank() == src:
        topo = None
        if ranks is None:
            topo = (detect or detect_topology)()
        buf.copy_(torch.tensor(choose_draft_ranks(target_tp, draft_tp, ranks, topo), dtype=torch.int64))
    dist.broadcast(buf, src=src, group=group)
    chosen = [int(r) for r in buf.tolist()]
    return list(choose_draft_ranks(target_tp, draft_tp, chosen))  # validated on every rank
