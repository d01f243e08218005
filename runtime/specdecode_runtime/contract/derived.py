"""Every value derived from a runtime config, computed in one place.

The renderer (operator), the tuner, the launcher and each scheduler process all need the same few facts about a
config: whether the draft runs on its own smaller group, whether a draft TP size and rank list can be served, how
many tokens a cycle verifies, which NCCL environment applies. Each is a function here, so the operator and the
runtime cannot drift apart. The step tiers a pod serves and what it refuses are in :mod:`.capabilities`.
"""

from __future__ import annotations

from typing import Sequence

from .config import RuntimeConfig
from .nccl import profile_env


def draft_tokens_per_cycle(steps: int, eagle_top_k: int, configured: int | None = None) -> int | None:
    """Tokens one verify checks (SGLang's ``--speculative-num-draft-tokens``): a chain (top-k 1) verifies every step
    plus the bonus token, ``steps + 1``; a tree keeps the configured value, or lets SGLang choose when unset."""
    if eagle_top_k == 1:
        return steps + 1
    return configured


def is_split_draft(draft_tp: int, target_tp: int) -> bool:
    """Whether the draft runs on its own group, smaller than the target's TP group (the runtime's patched path)."""
    return draft_tp < target_tp


def draft_tp_problems(target_tp: int, draft_tp: int, ranks: Sequence[int] | None = None) -> list[str]:
    """Why a draft TP size and rank list cannot be served; empty when they can.

    The rule (also checked by the CRD's CEL rules in ``api/rules.py``): the draft group lies inside the target's
    TP group, its size divides the target TP size, and explicit ``ranks`` name exactly ``draft_tp`` distinct
    target TP ranks."""
    if target_tp < 1 or draft_tp < 1:
        return [f"tp sizes must be >= 1 (target {target_tp}, draft {draft_tp})"]
    if draft_tp > target_tp:
        return [
            f"draft TP {draft_tp} is larger than target TP {target_tp}: the draft group must be inside the target group"
        ]
    if target_tp % draft_tp:
        return [f"draft TP {draft_tp} must divide target TP {target_tp}"]
    if ranks is None:
        return []
    chosen = [int(r) for r in ranks]
    if len(chosen) != draft_tp:
        return [f"draft.ranks has {len(chosen)} entries, draft TP is {draft_tp}"]
    if len(set(chosen)) != len(chosen):
        return [f"draft.ranks {chosen} has duplicates"]
    outside = [r for r in chosen if not 0 <= r < target_tp]
    if outside:
        return [
            f"draft.ranks {outside} are not inside the target TP group 0..{target_tp - 1}: a draft outside the "
            "target group would need the verify hidden states moved every step"
        ]
    return []


# ---- the same facts read from a RuntimeConfig -----------------------------------------------------------------------
def draft_is_split(cfg: RuntimeConfig) -> bool:
    return is_split_draft(cfg.draft.tensor_parallel_size, cfg.target.tensor_parallel_size)


def live(cfg: RuntimeConfig) -> bool:
    """Whether step tiers are captured and the step table is the actuator (autotune mode Live)."""
    return cfg.speculative.autotune.mode == "Live"


def num_draft_tokens(cfg: RuntimeConfig) -> int | None:
    spec = cfg.speculative
    return draft_tokens_per_cycle(spec.num_steps, spec.eagle_top_k, spec.num_draft_tokens)


def nccl_environment(cfg: RuntimeConfig) -> dict[str, str]:
    """The NCCL environment of the config's profile, with the user's ``nccl.env`` on top (multicast stays off)."""
    return profile_env(cfg.nccl.profile, multi_node=cfg.topology.nodes > 1, overrides=dict(cfg.nccl.env))
