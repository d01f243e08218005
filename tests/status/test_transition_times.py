"""lastTransitionTime marks when a condition's status last changed (Kubernetes API conventions): a new reason or
message under the same status keeps the old time; only a status change, or a condition seen for the first time,
takes the current time."""

from __future__ import annotations

import copy

from specdecode_operator.status.conditions import stamp

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def cond(ctype, status, reason="R", message="", at=None) -> dict:
    c = {"type": ctype, "status": status, "reason": reason, "message": message}
    if at:
        c["lastTransitionTime"] = at
    return c


def times(conditions) -> dict:
    return {c["type"]: c["lastTransitionTime"] for c in conditions}


def test_same_status_with_a_new_reason_and_message_keeps_the_time():
    before = [cond("Ready", "False", "RollingOut", "0/2 replicas ready", T0)]
    after = stamp([cond("Ready", "False", "ReconcileError", "conflict")], before, T1)
    assert times(after) == {"Ready": T0}
    assert after[0]["reason"] == "ReconcileError" and after[0]["message"] == "conflict"


def test_a_status_change_takes_the_current_time_even_under_the_same_reason():
    before = [cond("Ready", "False", "R", "", T0), cond("Paused", "True", "R", "", T0)]
    after = stamp([cond("Ready", "True", "R"), cond("Paused", "False", "R")], before, T1)
    assert times(after) == {"Ready": T1, "Paused": T1}


def test_each_condition_keeps_its_own_time():
    before = [cond("Ready", "True", at=T0), cond("Degraded", "False", at=T0)]
    after = stamp([cond("Ready", "False"), cond("Degraded", "False"), cond("SpecValid", "True")], before, T1)
    assert times(after) == {"Ready": T1, "Degraded": T0, "SpecValid": T1}


def test_no_previous_status_or_no_previous_time_takes_the_current_time():
    assert times(stamp([cond("Ready", "True")], None, T1)) == {"Ready": T1}
    assert times(stamp([cond("Ready", "True")], [], T1)) == {"Ready": T1}
    assert times(stamp([cond("Ready", "True")], [cond("Ready", "True")], T1)) == {"Ready": T1}
    # another condition's time under the same status is not borrowed
    assert times(stamp([cond("Ready", "True")], [cond("Degraded", "True", at=T0)], T1)) == {"Ready": T1}


def test_the_inputs_are_left_as_they_were():
    conditions, previous = [cond("Ready", "True")], [cond("Ready", "True", at=T0)]
    kept = copy.deepcopy((conditions, previous))
    assert times(stamp(conditions, previous, T1)) == {"Ready": T0}
    assert (conditions, previous) == kept
