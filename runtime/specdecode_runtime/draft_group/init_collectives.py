"""Init-time collectives over the target group: every target rank calls them, S keeps the result.

The target's embedding (and a shared lm_head) are vocab-sharded over the whole target group, but the draft on S
needs them at TP |S|: they are all-gathered once at init (and again after a weight update), never per step. The
ranks outside S join the gather and drop the result at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .errors import DraftGroupError

if TYPE_CHECKING:
    import torch

    from .placement import DraftPlacement


class InitTimeCollectives:
    """Mixed into :class:`~.groups.DraftGroups`; relies on its ``placement``, ``rank``, ``in_draft``,
    ``is_leader`` and ``bcast_group``."""

    placement: DraftPlacement
    rank: int
    bcast_group: Any
    if TYPE_CHECKING:  # properties of DraftGroups

        @property
        def in_draft(self) -> bool: ...

        @property
        def is_leader(self) -> bool: ...

    def gather_vocab_shards(self, shard: torch.Tensor, dim: int = 0) -> torch.Tensor | None:
        """All-gather a vocab-parallel shard (TP order) over the target group; S gets the full tensor, the other
        ranks get None (they free their copy at once). Called once at init, and again after a weight update."""
        import torch
        import torch.distributed as dist

        world = len(self.placement.target_ranks)
        parts = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(parts, shard.contiguous(), group=self.bcast_group)
        if not self.in_draft:
            return None
        return torch.cat(parts, dim=dim)

    def draft_shard(self, full: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """This rank's |S|-way shard of a gathered vocab tensor (the layout a draft at TP |S| expects)."""
        d = self.placement.draft_tp
        if full.shape[dim] % d:
            raise DraftGroupError(f"vocab dimension {full.shape[dim]} is not divisible by draft TP {d}")
        return full.chunk(d, dim=dim)[self.placement.rank_in_draft(self.rank)].contiguous()

    def broadcast_ints(self, values: Sequence[int] | None, n: int, device: Any = "cpu") -> list[int]:
        """Small init-time metadata (e.g. the draft's hidden size) from S's leader to every target rank."""
        import torch
        import torch.distributed as dist

        t = torch.zeros(n, dtype=torch.int64, device=device)
        if self.is_leader:
            t.copy_(torch.tensor(list(values or []), dtype=torch.int64))
        dist.broadcast(t, src=self.placement.leader, group=self.bcast_group)
        return [int(v) for v in t.tolist()]
