"""The draft-only guard: a collective issued on S alone over a group reaching outside S fails at once.

Draft construction, KV-pool allocation and graph capture run on S only. A hidden world barrier or a distributed
free-memory probe in there would wait forever for ranks that never join; inside :func:`draft_only_scope` it raises
:class:`~.errors.SubsetCollectiveError` instead, naming the op and the group.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from .collective_hooks import install_wrappers, remove_wrappers, scope_var
from .errors import SubsetCollectiveError


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
    draft_ranks: Sequence[int],
    what: str = "a draft-only phase",
    allow: Callable[[str, tuple[int, ...]], bool] | None = None,
) -> Iterator[None]:
    """Inside, any torch.distributed collective over a group that is not inside S raises SubsetCollectiveError."""
    install_wrappers()
    token = scope_var.set(_DraftOnlyScope(frozenset(draft_ranks), what, allow))
    try:
        yield
    finally:
        scope_var.reset(token)
        remove_wrappers()


def in_draft_only_scope() -> bool:
    return scope_var.get() is not None
