"""The packed proposal message: one int64 buffer per decode cycle, so the ranks outside S need a single broadcast.

Shapes are never sent: bs, steps and topk are known on every rank (identical schedulers), so the layout is computed
locally on both ends and only the payload travels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ProposalLayout:
    """Column widths of the packed proposal rows: ``[draft_tokens | parent_list | top_scores_index]`` per request.

    topk=1 (a chain): only ``draft_tokens [bs, steps]``; the parents and score indices are constants every rank
    rebuilds itself. topk>1: ``draft_tokens [bs, n-1]``, ``parent_list [bs, topk*(steps-1)+1]`` and
    ``top_scores_index [bs, n-1]`` (SGLang's ``organize_draft_results`` shapes). A single-step tree has no
    parents at all: SGLang's ``parent_list`` is then ``[bs, 0]``.
    """

    steps: int
    topk: int = 1
    num_draft_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.steps < 1 or self.topk < 1:
            raise ValueError("steps and topk must be >= 1")
        if self.topk > 1 and (self.num_draft_tokens is None or self.num_draft_tokens < 2):
            raise ValueError("a tree (topk > 1) needs num_draft_tokens >= 2")

    def _tree_tokens(self) -> int:
        assert self.num_draft_tokens is not None  # __post_init__ refuses a tree without it
        return int(self.num_draft_tokens)

    @property
    def token_cols(self) -> int:
        return self.steps if self.topk == 1 else self._tree_tokens() - 1

    @property
    def parent_cols(self) -> int:
        if self.topk == 1 or self.steps == 1:
            return 0
        return self.topk * (self.steps - 1) + 1

    @property
    def score_cols(self) -> int:
        return 0 if self.topk == 1 else self._tree_tokens() - 1

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
        import torch

        bs = draft_tokens.shape[0]
        if tuple(draft_tokens.shape) != (bs, self.token_cols):
            raise ValueError(f"draft_tokens shape {tuple(draft_tokens.shape)} != ({bs}, {self.token_cols})")
        buf = (
            out[: self.numel(bs)]
            if out is not None
            else torch.empty(self.numel(bs), dtype=torch.int64, device=draft_tokens.device)
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
        """The constant chain topology (topk=1) every rank rebuilds, as the pinned SGLang's
        ``EagleDraftWorkerBase._rebuild_topk1_chain_buffers`` does: parents ``[-1, 0, .., steps-2]`` (width
        ``steps``, or 0 for a single step) and score indices ``[0 .. steps-1]``."""
        import torch

        width = self.steps if self.steps > 1 else 0
        parents = torch.arange(-1, width - 1, dtype=torch.int64, device=device).repeat(bs, 1)
        scores = torch.arange(self.steps, dtype=torch.int64, device=device).repeat(bs, 1)
        return parents, scores
