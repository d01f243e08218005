"""What the operator remembers about one SpecDecodeDeployment between kopf calls, as one typed object.

Why in kopf's memo: kopf keeps one memo per object for as long as it handles the object, shares it between the
object's handlers and its daemon (the reconciler and the tuning loop see the same state), and drops it with the
object. The memo holds exactly one entry, ``STATE_KEY``, so every field below has one type and one writer's
comment instead of a bag of keys. Nothing here survives an operator restart: everything is either re-derived from
the object's body (validation, the tuner's resumed step count) or a cache whose loss costs one extra read or write.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

from .api.validate import InvalidSpec, parse, validate_object

STATE_KEY = "specdecode"
OWN_WRITES_KEPT = 2  # the resourceVersions of our last status writes (the reconciler's and the tuner's)


@dataclass
class Validation:
    generation: int | None
    sdd: Any  # the parsed SpecDecodeDeployment, or None when the spec is invalid
    problems: list[str]


@dataclass
class ObjectState:
    # kopf handlers (registry.py): one pass at a time, and a retry shortly after a failed one.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    latest: tuple | None = None  # (body, kopf kwargs, monotonic time) of the newest trigger
    passed_at: float = -math.inf  # monotonic time the last pass ended
    retry_delay: float | None = None  # seconds before the pending retry (doubles per failed pass); None: none failed
    retry_task: asyncio.Task | None = None
    own_status_rvs: tuple[str, ...] = ()  # resourceVersions of our own status writes: their echoes are skipped
    # Validation, once per generation, shared by the reconciler and the tuning loop.
    validation: Validation | None = None
    # The reconciler (reconcile/reconciler.py): caches whose loss costs a read or a write, never a wrong one.
    status_written: tuple | None = None  # (monotonic time, status written, its resourceVersion)
    applied: dict = field(default_factory=dict)  # child key -> (monotonic time, record of our last write)
    checked: dict = field(default_factory=dict)  # child key -> (resourceVersion, input hash) found up to date
    rendered: tuple | None = None  # ((uid, generation, tuned steps), child stubs)
    secret_checked: tuple | None = None  # (monotonic time, "ok" | "forbidden" | "collision")
    reported: dict[str, str] = field(default_factory=dict)  # Event reason -> the last message posted (events.once)
    rollout_blocked: object | None = None  # status.rollout.Blocked while a rollout pod stays unschedulable
    # The tuning loop (tuning/): what it hands the reconciler.
    tuner_started: bool = False  # the loop has built its tuner; until then ``tuned_steps`` comes from status
    tuned_steps: int | None = None  # Rollout: the step count rolled out (None: spec.speculative.numSteps)
    tuner_condition: dict | None = None  # MetricsAvailable as the tuner last reported it; None: not yet

    def remember_own_write(self, written: dict | None) -> None:
        """Remember the resourceVersion a status write of ours produced: its watch event brings nothing new, so the
        event handler skips it instead of running a pass per echo."""
        rv = ((written or {}).get("metadata") or {}).get("resourceVersion")
        if rv:
            self.own_status_rvs = (*self.own_status_rvs[-(OWN_WRITES_KEPT - 1):], rv)


def state_of(memo) -> ObjectState:
    """The object's state in its kopf memo, created on first use."""
    state = memo.get(STATE_KEY)
    if state is None:
        state = memo[STATE_KEY] = ObjectState()
    return state


def validated(body: dict, state: ObjectState) -> tuple:
    """(parsed spec or None, problems) of ``body``, once per generation: spec changes bump it, so steady-state
    passes reuse it. Whichever of the reconciler and the tuning loop sees a generation first validates it, the
    other reuses the result."""
    gen = body["metadata"].get("generation")
    cached = state.validation
    if cached is not None and cached.generation == gen and gen is not None:
        return cached.sdd, cached.problems
    obj = {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
    problems = [str(p) for p in validate_object(obj)]
    sdd = None
    if not problems:
        try:
            sdd = parse(obj, validated=True)  # validate_object ran just above: once per generation
        except InvalidSpec as e:
            problems = [str(p) for p in e.problems]
    state.validation = Validation(gen, sdd, problems)
    return sdd, problems
