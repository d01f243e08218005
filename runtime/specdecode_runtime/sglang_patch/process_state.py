"""What the patches share within one scheduler process: the split configuration, the live draft groups, the
engine's callbacks and the stamp of the decode cycle in flight.

SGLang runs one scheduler process per TP rank and the patched methods are plain functions on SGLang's classes,
so this state is process-wide by construction. It lives in this one module, read as ``process_state.<name>`` at
call time, so that every patch module sees the same values and :func:`.apply.remove_patches` can reset them all
in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..contract.derived import draft_is_split

if TYPE_CHECKING:
    from .patch_set import PatchSet


@dataclass
class SplitConfig:
    """What the patches need from runtime.yaml (kept free of pydantic so it pickles and tests stay light)."""

    draft_tp: int
    draft_ranks: tuple[int, ...] | None = None  # TP-local ranks; None: by topology, then 0..d-1
    use_topology: bool = True

    @classmethod
    def from_runtime_config(cls, cfg: Any) -> SplitConfig:
        ranks = tuple(cfg.draft.ranks) if cfg.draft.ranks else None
        return cls(draft_tp=int(cfg.draft.tensor_parallel_size), draft_ranks=ranks)


def split_config(cfg: Any) -> SplitConfig | None:
    """The patches' view of a runtime config; None when the draft runs on the whole target group."""

    return SplitConfig.from_runtime_config(cfg) if draft_is_split(cfg) else None


@dataclass
class _SplitState:
    groups: Any  # DraftGroups
    broadcaster: Any  # ProposalBroadcaster
    hidden: tuple[int | None, Any]
    gathered: tuple[Any, Any] = (None, None)
    head_gathered: bool = False  # False when the draft has its own head (EAGLE-3): the target's is never gathered
    building_tiers: bool = False  # S, inside EAGLEWorkerV2.init_cuda_graphs while step tiers follow
    draft_layout: Any = None  # S's draft layout while it is detached for the target half of the tier build


split: _SplitState | None = None  # set by EAGLEWorkerV2.__init__ when this rank's TP group is split
active: PatchSet | None = None  # the installed patches (apply_patches is idempotent)
verify_cb: Callable[[list[int], int, int, dict[str, float]], None] | None = None
step_cb: Callable[[int], int | None] | None = None
iteration_cb: Callable[[], None] | None = None
ready_cb: Callable[[Any], None] | None = None
finished_cb: Callable[[Any], None] | None = None  # the traffic capture's, per finished request (finished_requests)
cycle: Any = None  # CycleStamp of the decode cycle being launched (between forward entry and return)
result_cycle: Any = None  # CycleStamp of the result being processed (inside _resolve_spec_v2_tokens)
clock: Any = None  # cycle_clock.CycleClock, one per process
prefill_probe: Any = None  # prefill_probe.PrefillProbe on the rank that exports metrics, else None
original_build_verify_input: Callable | None = None  # SGLang's build_eagle_verify_input, before the rebind
