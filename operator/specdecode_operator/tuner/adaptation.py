"""The decisions of a draft that learns from its traffic (tuning/adaptation.py does the I/O): when the next training
attempt is due, and what a finished training Job says about its candidate.

A Job's outcome comes from what the API server holds, never from the claim: the Job's conditions (Complete, Failed
with its reason: the deadline, the backoff limit) and its pod's container statuses, where the gate container's exit
code (0 better, 3 not better, 2 bad input) and its termination message (the verdict's summary,
contract/adaptation.py) are. A candidate counts as better only when both the exit code and the summary say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from specdecode_runtime.contract import adaptation as contract

Kind = Literal["running", "better", "not_better", "failed"]
GATE_CONTAINER = "gate"
TRAIN_CONTAINER = "train"
MESSAGE_CHARS = 512


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    message: str
    result: dict[str, Any] = field(default_factory=dict)  # the gate's summary (status.draft.adaptation.lastResult)


def due(now: float, since: float | None, interval_s: float) -> bool:
    """Whether the next attempt may start: ``interval_s`` after the wait began (the capture's start or the last
    attempt's end). Unknown start: due (a status from before this field, or one cut by hand)."""
    return since is None or now - since >= interval_s


def _condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def _terminated(pod: dict[str, Any], container: str, init: bool) -> dict[str, Any] | None:
    key = "initContainerStatuses" if init else "containerStatuses"
    for cs in (pod.get("status") or {}).get(key) or []:
        if isinstance(cs, dict) and cs.get("name") == container:
            term = (cs.get("state") or {}).get("terminated")
            return term if isinstance(term, dict) else None
    return None


def _short(raw: Any) -> str:
    text = str(raw or "").strip()
    out: str = text if len(text) <= MESSAGE_CHARS else "..." + text[-(MESSAGE_CHARS - 3) :]
    return out


def _describe(result: dict[str, Any]) -> str:
    if "ratio" not in result:
        return ""
    return (
        f"tokens per verify ratio {result['ratio']:g}"
        + (
            f", accept length {result['servingAcceptLength']:g} -> {result['candidateAcceptLength']:g}"
            if "servingAcceptLength" in result and "candidateAcceptLength" in result
            else ""
        )
        + (f" on {result['heldoutRecords']} held-out records" if "heldoutRecords" in result else "")
    )


def job_outcome(job: dict[str, Any], pods: list[dict[str, Any]], min_ratio: float) -> Outcome:
    """What a training Job (and the pods it made) says now."""
    gate = train = None
    for p in pods:
        gate = gate or _terminated(p, GATE_CONTAINER, init=False)
        train = train or _terminated(p, TRAIN_CONTAINER, init=True)
    if gate is not None:
        code = gate.get("exitCode")
        result = contract.decode(gate.get("message"))
        if code == contract.EXIT_BETTER and result is not None and result["better"]:
            return Outcome("better", f"better than the serving draft by the offline gate: {_describe(result)}", result)
        if code == contract.EXIT_NOT_BETTER and result is not None:
            return Outcome(
                "not_better",
                f"not better than the serving draft by the offline gate (minRatio {min_ratio:g}): {_describe(result)}",
                result,
            )
        if code not in (None, contract.EXIT_BETTER, contract.EXIT_NOT_BETTER) or _condition(job, "Failed"):
            return Outcome("failed", f"the offline gate failed (exit {code}): {_short(gate.get('message'))}")
        if result is None and code is not None:
            return Outcome("failed", f"the offline gate exited {code} without a readable verdict")
    if train is not None and train.get("exitCode") not in (None, 0):
        return Outcome("failed", f"training failed (exit {train.get('exitCode')}): {_short(train.get('message'))}")
    failed = _condition(job, "Failed")
    if failed is not None:
        why = failed.get("reason") or "Failed"
        if why == "DeadlineExceeded":
            return Outcome("failed", f"ran past maxSeconds: {_short(failed.get('message'))}")
        return Outcome("failed", f"the Job failed ({why}): {_short(failed.get('message'))}")
    if _condition(job, "Complete") is not None:
        return Outcome("failed", "the Job completed but no pod reports the gate's verdict")
    return Outcome("running", "training, then the offline gate")
