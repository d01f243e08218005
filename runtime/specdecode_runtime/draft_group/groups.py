"""Creating the draft group S and the broadcast communicator, in one fixed order on every rank.

Group creation is collective over the default group, so a rank that skipped a ``new_group`` call or made them in
another order would hang everyone: the order is fixed here, once, and every caller goes through it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .init_collectives import InitTimeCollectives
from .placement import DraftPlacement


def _default_new_group(ranks: Sequence[int], backend: str | None) -> Any:
    import torch.distributed as dist

    return dist.new_group(ranks=list(ranks), backend=backend)


@dataclass
class DraftGroups(InitTimeCollectives):
    """The draft group S and the dedicated broadcast communicator, created identically on every rank.

    Creation order (the same on every rank, and it must stay so): (1) the draft group over S, (2) a singleton
    group for each rank outside S (so every rank belongs to exactly one draft-layer group, as in SGLang's
    ``init_model_parallel_group``), (3) the broadcast communicator over the whole target group. The broadcast
    communicator is never shared with the target's own TP collectives, so a proposal broadcast cannot interleave
    with the target's in-graph all-reduces.

    ``new_group(ranks, backend)`` is injectable: SGLang's binding makes (1) a ``GroupCoordinator``. The init-time
    collectives over these groups (vocab all-gather, metadata broadcast) come from :class:`InitTimeCollectives`.
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
    ) -> DraftGroups:
        if rank is None:
            import torch.distributed as dist

            rank = dist.get_rank()
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

    def destroy(self) -> None:
        import torch.distributed as dist

        for g in (self.draft_group, self.bcast_group):
            if g is not None and not hasattr(g, "destroy") and g is not dist.GroupMember.WORLD:
                with contextlib.suppress(Exception):
                    dist.destroy_process_group(g)
