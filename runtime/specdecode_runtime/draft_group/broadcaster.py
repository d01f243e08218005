"""The per-cycle proposal broadcast from S's leader to every target rank, kept out of CUDA graphs.

A draft graph is replayed on S only, so a collective captured into it would wait forever for the ranks outside S:
the broadcast is eager, between graph replays, into a buffer whose address never changes (graphs on any rank may
read the unpacked views).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .groups import DraftGroups
from .proposal_layout import ProposalLayout

if TYPE_CHECKING:
    import torch


def _is_capturing() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


class ProposalBroadcaster:
    """Broadcast packed proposals from S's leader to every target rank, eagerly, into a preallocated buffer.

    The buffer is allocated once for ``max_bs`` so its address never changes (a CUDA graph on any rank may read
    the unpacked views). ``broadcast`` refuses to run while a CUDA graph is being captured: S replays its draft
    graphs alone, so a collective recorded into one would wait forever for the ranks outside S.
    """

    def __init__(self, groups: DraftGroups, layout: ProposalLayout, max_bs: int, device: Any = "cpu"):
        import torch

        self.groups = groups
        self.layout = layout
        self.max_bs = max_bs
        self.device = torch.device(device)
        self.buffer = torch.zeros(layout.numel(max_bs), dtype=torch.int64, device=self.device)
        self.calls = 0

    def set_layout(self, layout: ProposalLayout) -> None:
        """Switch step count (a step-control tier swap); grows the buffer only if the new rows are wider."""
        import torch

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
        import torch.distributed as dist

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
