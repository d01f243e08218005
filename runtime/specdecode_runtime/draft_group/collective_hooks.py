"""Wrappers around the ``torch.distributed`` collectives, installed only while someone is watching.

Two watchers share them: :class:`CollectiveCounter` (collectives per group, for tests and diagnosis without
``NCCL_DEBUG``) and the draft-only guard (:mod:`.draft_only`). The wrappers are reference-counted so nested users
install them once and the last one out restores the originals; outside any watcher ``torch.distributed`` is
untouched.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any, Callable, Mapping, Protocol, Sequence


class CollectiveScope(Protocol):
    """What a wrapper asks the active scope (:mod:`.draft_only` sets one): raise if this collective may not run."""

    def check(self, name: str, ranks: tuple[int, ...]) -> None: ...


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

# The active draft-only scope (set by :func:`.draft_only.draft_only_scope`) and the active counters.
scope_var: contextvars.ContextVar[CollectiveScope | None] = contextvars.ContextVar(
    "_specdecode_draft_scope", default=None
)
_counters: list[CollectiveCounter] = []
_patched: dict[str, Callable] = {}
_patch_refs = 0


def _group_ranks(group: Any) -> tuple[int, ...]:
    import torch.distributed as dist

    if group is None or group is dist.GroupMember.WORLD:
        return tuple(range(dist.get_world_size()))
    try:
        return tuple(dist.get_process_group_ranks(group))
    except Exception:  # noqa: BLE001 - a foreign group object
        return ()


def _find_group(name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    import torch.distributed as dist

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
        scope = scope_var.get()
        if scope is not None or _counters:
            ranks = _group_ranks(group)
            if scope is not None:
                scope.check(name, ranks)
            for c in _counters:
                c.record(name, ranks)
        return fn(*args, **kwargs)

    wrapper.__specdecode_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def install_wrappers() -> None:
    global _patch_refs
    if _patch_refs == 0:
        import torch.distributed as dist

        for name in COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is None or hasattr(fn, "__specdecode_wrapped__"):
                continue
            _patched[name] = fn
            setattr(dist, name, _wrap(name, fn))
    _patch_refs += 1


def remove_wrappers() -> None:
    global _patch_refs
    _patch_refs -= 1
    if _patch_refs == 0:
        import torch.distributed as dist

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

    def __enter__(self) -> CollectiveCounter:
        install_wrappers()
        _counters.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _counters.remove(self)
        remove_wrappers()
