"""What the operator remembers about one SpecDecodeDeployment between passes, as one typed object.

Why one object per SpecDecodeDeployment, kept by the controller (reconcile/controller.py) from the object's first
watch event to its deletion: the reconciler and the tuner see the same state, and every field below has one type
and one writer's comment instead of a bag of keys. Nothing here survives an operator restart: everything is either
re-derived from the object's body (validation, the tuner's resumed step count) or a cache whose loss costs one
extra read or write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .api.validate import InvalidSpec, parse, validate_object
from .render.runtime_config import serving_problems

OWN_WRITES_KEPT = 2  # the resourceVersions of our last status writes (the reconciler's and the tuner's)


class StatusWrite(NamedTuple):
    """Our last status write: compared with (and the basis of) the next pass's status until the watch shows it."""

    at: float  # monotonic time
    status: dict[str, Any]
    resource_version: str | None


class AppliedWrite(NamedTuple):
    """Our last write of a child, kept until the watch shows it or a newer version."""

    at: float  # monotonic time
    obj: dict[str, Any]


class CheckedVersion(NamedTuple):
    """A child version found (or made) up to date for one input hash: nothing to compare while both hold."""

    resource_version: str | None
    input_hash: str | None


class RenderedChildren(NamedTuple):
    """The children rendered for one (uid, generation, tuned steps, labels), as (child key, input hash) pairs: the
    stubs are rebuilt from them on demand, so a thousand objects do not each keep rendered manifests."""

    key: tuple[Any, ...]  # (uid, generation, tuned steps, labels, default image, served draft)
    hashes: tuple[tuple[tuple[str, str, str], str | None], ...]  # ((apiVersion, kind, name), input hash)


class SecretCheck(NamedTuple):
    """When the control-token Secret was last checked, and what was found."""

    at: float  # monotonic time
    result: Literal["ok", "forbidden", "collision"]


def labels_key(metadata: dict) -> tuple[tuple[str, str], ...]:
    """The object's labels as a comparable key: the parsed object and its children carry them, and a label edit
    does not bump the generation."""
    return tuple(sorted((metadata.get("labels") or {}).items()))


@dataclass
class Validation:
    generation: int | None
    sdd: Any  # the parsed SpecDecodeDeployment, or None when the spec is invalid
    problems: list[str]
    labels: tuple[tuple[str, str], ...] = ()  # labels_key of the object parsed


@dataclass
class ObjectState:
    # The controller (reconcile/controller.py): when the last pass ended (the resync sweep skips recent ones).
    passed_at: float = -math.inf  # monotonic time
    # The object was deleted (or is being deleted): a pass still in flight applies no more children. Its owner
    # reference would name a uid that is gone, and the garbage collector would only delete them again.
    deleted: bool = False
    own_status_rvs: tuple[str, ...] = ()  # resourceVersions of our own status writes: their echoes are skipped
    # Validation, once per generation, shared by the reconciler and the tuning loop.
    validation: Validation | None = None
    # The reconciler (reconcile/reconciler.py): caches whose loss costs a read or a write, never a wrong one.
    status_written: StatusWrite | None = None
    applied: dict[tuple[str, ...], AppliedWrite] = field(default_factory=dict)  # child key -> our last write
    checked: dict[tuple[str, ...], CheckedVersion] = field(default_factory=dict)  # child key -> version up to date
    rendered: RenderedChildren | None = None
    secret_checked: SecretCheck | None = None
    reported: dict[str, str] = field(default_factory=dict)  # Event reason -> the last message posted (events.once)
    rollout_blocked: object | None = None  # status.rollout.Blocked while a rollout pod stays unschedulable
    # The tuning loop (tuning/): what it hands the reconciler.
    tuner_started: bool = False  # the loop has built its tuner; until then ``tuned_steps`` comes from status
    tuned_steps: int | None = None  # Rollout: the step count rolled out (None: spec.speculative.numSteps)
    tuner_condition: dict | None = None  # MetricsAvailable as the tuner last reported it; None: not yet
    # The draft rollout (tuning/draft_rollout.py): status.draft as last written (the reconciler renders the draft it
    # names before the watch delivers it) and the DraftRollout condition it reports (None: none).
    draft_status: dict | None = None
    draft_condition: dict | None = None
    # The draft trained from the capture (tuning/adaptation.py): status.draft.adaptation as last written, and the
    # DraftAdaptation condition while the latest candidate was refused or its attempt failed (None: none).
    adaptation_status: dict | None = None
    adaptation_condition: dict | None = None

    def remember_own_write(self, written: dict | None) -> None:
        """Remember the resourceVersion a status write of ours produced: its watch event brings nothing new, so the
        event handler skips it instead of running a pass per echo."""
        rv = ((written or {}).get("metadata") or {}).get("resourceVersion")
        if rv:
            self.own_status_rvs = (*self.own_status_rvs[-(OWN_WRITES_KEPT - 1) :], rv)


def not_older(rv: str | None, than: str | None) -> bool:
    """Whether resourceVersion ``rv`` is ``than`` or a later one. resourceVersions are opaque by contract, but
    every API server (etcd's revision, the emulator's counter) issues increasing integers; anything else is
    compared for equality only."""
    if rv is None or than is None:
        return False
    if rv == than:
        return True
    if rv.isdigit() and than.isdigit():
        return int(rv) > int(than)
    return False


def validated(body: dict, state: ObjectState, *, check_rules: bool = False) -> tuple:
    """(parsed spec or None, problems) of ``body``, once per generation and labels: spec changes bump the
    generation, so steady-state passes reuse it; the labels, which the children carry, do not. Whichever of the
    reconciler and the tuning loop sees a generation first parses it, the other reuses the result.

    ``check_rules``: also run the CRD's schema and CEL rules here. The API server's admission has already run them
    on every object it stored, so by default the operator only builds the typed object (whose own checks still
    turn a malformed spec into problems); a cluster whose CRD was installed without its rules sets
    ``OperatorConfig.check_spec_rules``."""
    gen = body["metadata"].get("generation")
    labels = labels_key(body["metadata"])
    cached = state.validation
    if cached is not None and cached.generation == gen and gen is not None and cached.labels == labels:
        return cached.sdd, cached.problems
    obj = {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
    problems = [str(p) for p in validate_object(obj)] if check_rules else []
    sdd = None
    if not problems:
        try:
            sdd = parse(obj, validated=True)  # the rules ran at admission (or just above)
            problems = [str(p) for p in serving_problems(sdd)]  # what the pods' launcher would refuse
        except InvalidSpec as e:
            problems = [str(p) for p in e.problems]
        if problems:
            sdd = None
    state.validation = Validation(gen, sdd, problems, labels)
    return sdd, problems
