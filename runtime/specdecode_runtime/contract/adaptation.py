"""What the training Job and the operator agree on: where an attempt's candidate goes on the capture claim, and the
offline gate's summary the Job reports through its container's termination message.

Why a termination message: the operator learns the verdict from the pod's status (a read it already has) and never
mounts or reads the claim, which holds user data. Kubernetes keeps at most 4096 bytes of it, so the summary is
compact and bounded here, on both sides. Standard library only: the operator and the runtime share it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .config import CAPTURE_MOUNT_DIR

ATTEMPTS_DIR = "adapt"  # under the capture directory; the capture's own files are *.jsonl at its top level
TERMINATION_LOG = "/dev/termination-log"
SUMMARY_LIMIT = 4096  # bytes Kubernetes keeps of a termination message
MAX_POSITIONS = 16  # acceptance per draft position kept (adapt score --steps is at most 16)
EXIT_BETTER = 0
EXIT_BAD_INPUT = 2
EXIT_NOT_BETTER = 3


def attempt_dir(deployment: str, attempt: int, capture_dir: str = CAPTURE_MOUNT_DIR) -> str:
    """The directory attempt ``attempt`` of ``deployment`` writes its candidate to (the pods read it there to load
    it in place); per deployment, so deployments sharing a claim never write over each other's drafts."""
    return f"{capture_dir.rstrip('/')}/{ATTEMPTS_DIR}/{deployment}/attempt-{int(attempt)}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), 4)


def _positions(value: Any) -> list[float] | None:
    if not isinstance(value, list):
        return None
    out = [_num(v) for v in value[:MAX_POSITIONS]]
    return [v for v in out if v is not None]


def summary(verdict: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``adapt score``'s verdict the operator records (status.draft.adaptation.lastResult)."""
    serving, candidate = verdict.get("serving") or {}, verdict.get("candidate") or {}
    out = {
        "better": bool(verdict.get("better")),
        "ratio": _num(verdict.get("ratio")),
        "servingAcceptLength": _num(serving.get("accept_length")),
        "candidateAcceptLength": _num(candidate.get("accept_length")),
        "servingAcceptance": _positions(serving.get("conditional_acceptance")),
        "candidateAcceptance": _positions(candidate.get("conditional_acceptance")),
        "heldoutRecords": verdict.get("heldout_records") if isinstance(verdict.get("heldout_records"), int) else None,
        "digest": candidate.get("digest") if isinstance(candidate.get("digest"), str) else None,
    }
    return {k: v for k, v in out.items() if v is not None}


def encode(result: dict[str, Any]) -> str:
    """``result`` as JSON of at most ``SUMMARY_LIMIT`` bytes (the per-position lists go first when it is longer)."""
    text = json.dumps(result, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > SUMMARY_LIMIT:
        slim = {k: v for k, v in result.items() if not k.endswith("Acceptance")}
        text = json.dumps(slim, separators=(",", ":"), sort_keys=True)[:SUMMARY_LIMIT]
    return text


def decode(text: str | None) -> dict[str, Any] | None:
    """A summary from a termination message; None when it is not one (a log tail, a cut or empty message). Only
    the known keys of the known types are kept: the message comes from a pod."""
    if not text or len(text.encode("utf-8", "replace")) > SUMMARY_LIMIT:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("better"), bool):
        return None
    out: dict[str, Any] = {"better": raw["better"]}
    for key in ("ratio", "servingAcceptLength", "candidateAcceptLength"):
        if _num(raw.get(key)) is not None:
            out[key] = _num(raw[key])
    for key in ("servingAcceptance", "candidateAcceptance"):
        positions = _positions(raw.get(key))
        if positions is not None:
            out[key] = positions
    if isinstance(raw.get("heldoutRecords"), int) and not isinstance(raw.get("heldoutRecords"), bool):
        out["heldoutRecords"] = raw["heldoutRecords"]
    if isinstance(raw.get("digest"), str) and len(raw["digest"]) <= 128:
        out["digest"] = raw["digest"]
    return out
