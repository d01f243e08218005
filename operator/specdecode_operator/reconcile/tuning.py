"""The hook between reconciliation and the step-count tuner (operator/specdecode_operator/tuner).

``tuned_steps`` feeds Rollout mode's decision into RenderOptions; the tuner's own loop (scrape pods, decide,
push tables, write status.speculative under field manager specdecode-tuner) is started from the resync timer
through ``maybe_tune``. Both read spec and never write it.
"""

from __future__ import annotations


def mode_of(sdd) -> str:
    return sdd.spec.speculative.autotune.mode


def tuned_steps(memo, sdd) -> int | None:
    """The step count Rollout mode decided for this object, if any (spec.speculative.numSteps otherwise)."""
    if sdd is None or mode_of(sdd) != "Rollout":
        return None
    return memo.get("tuned_steps")


async def maybe_tune(reconciler, body: dict, memo) -> None:
    """Run one tuner step for this object when autotune is on. Wired by the tuner issue; a no-op until then."""
    return None
