"""Kubernetes Events on the SpecDecodeDeployment, through kopf's event poster (batched, never blocking a handler).

Only transitions are reported (a new problem, a created or replaced child), so a stuck object does not flood etcd.
"""

from __future__ import annotations

import kopf

from ..object_state import ObjectState

_REASONS_WARNING = {
    "InvalidSpec",
    "NameCollision",
    "ApplyFailed",
    "DriftRepaired",
    "ReplicasOverridden",
    "ControlTokenUnavailable",
    "RolloutBlocked",
    "ApiNotServed",
}


def emit(body, reason: str, message: str) -> None:
    kind = "Warning" if reason in _REASONS_WARNING else "Normal"
    kopf.event(body, type=kind, reason=reason, message=message[:1024])


def once(state: ObjectState, body, reason: str, message: str) -> None:
    """Emit unless the last event of this reason for this object said the same."""
    if state.reported.get(reason) != message:
        state.reported[reason] = message
        emit(body, reason, message)


def forget(state: ObjectState, reason: str) -> None:
    state.reported.pop(reason, None)
