"""Which default runtime image a SpecDecodeDeployment runs when ``spec.runtime.image`` is empty.

A new operator release (or a changed chart value ``runtime.image``) changes the operator's default image. Rolling
every deployment onto it would restart every runtime pod at once, each reloading its model, and on a full cluster
each rollout waits for GPUs that are all taken (RolloutBlocked). So the default a deployment resolves to is recorded
in ``status.runtimeImage`` when it is first rendered and kept across operator upgrades and restarts; a newer default
is reported there (``available``) and by a ``DefaultImageAvailable`` Event, and adopted only when

* the deployment's annotation ``specdecode.io/adopt-default-image`` takes a value not yet acted on (the value is
  recorded as ``adoptedToken``, so setting a new value later adopts again), or
* the operator runs with image policy ``Follow`` (chart value ``runtime.imageUpgradePolicy``), which re-renders
  every deployment on the current default as soon as it changes.

A deployment created before images were recorded has no record: it records the image its serving workload runs
now, not the new default, so the operator upgrade that introduces the record restarts nothing either.
``spec.runtime.image``, when set, is used as written whatever is recorded. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

from ..api.models import SpecDecodeDeployment
from ..render import names

POLICIES = ("Pinned", "Follow")
RUNTIME_CONTAINER = "runtime"


def default_image(sdd: SpecDecodeDeployment, default: str, default_sglang: str) -> str:
    """The operator's current default for the deployment's launcher."""
    return default_sglang if sdd.spec.runtime.launcher == "sglang" else default


def recorded(status: dict | None) -> dict | None:
    """``status.runtimeImage`` when it is a usable record, else None."""
    rec = (status or {}).get("runtimeImage")
    if isinstance(rec, dict) and isinstance(rec.get("image"), str) and rec["image"]:
        return rec
    return None


def running_image(workload: dict | None) -> str | None:
    """The runtime container's image in a live Deployment's or LeaderWorkerSet's pod template, if it has one."""
    spec = (workload or {}).get("spec") or {}
    templates = [spec.get("template")]
    lwt = spec.get("leaderWorkerTemplate") or {}
    templates += [lwt.get("leaderTemplate"), lwt.get("workerTemplate")]
    for template in templates:
        for container in ((template or {}).get("spec") or {}).get("containers") or []:
            if container.get("name") == RUNTIME_CONTAINER and container.get("image"):
                return str(container["image"])
    return None


def choose(
    sdd: SpecDecodeDeployment,
    current_default: str,
    record: dict | None,
    *,
    annotations: dict[str, str] | None = None,
    policy: str = "Pinned",
    running: str | None = None,
) -> dict[str, Any]:
    """The ``status.runtimeImage`` record for this pass; its ``image`` is the default the renderer uses.

    ``record``: the one in status (``recorded``); ``running``: the live workload's runtime image, consulted only
    when there is no record for the deployment's launcher and ``spec.runtime.image`` is empty (a deployment that
    predates the record); ``annotations``: the object's current ones (an annotation edit bumps no generation, so
    the parsed ``sdd``, kept per generation, may hold older ones)."""
    launcher = sdd.spec.runtime.launcher
    explicit = bool(sdd.spec.runtime.image)
    if annotations is None:
        annotations = sdd.metadata.annotations
    token = ((annotations or {}).get(names.ADOPT_DEFAULT_IMAGE_ANNOTATION) or "").strip()
    handled = str((record or {}).get("adoptedToken") or "")
    same_launcher = record if record is not None and record.get("launcher", launcher) == launcher else None
    if policy == "Follow" or (token and token != handled):
        image = current_default
    elif same_launcher is not None:
        image = same_launcher["image"]
    elif running and not explicit and record is None:
        image = running
    else:  # a new deployment, a changed launcher, or an explicit image: nothing runs a default to keep
        image = current_default
    out: dict[str, Any] = {"launcher": launcher, "image": image}
    if image != current_default and not explicit:
        out["available"] = current_default
    if token or handled:
        out["adoptedToken"] = token or handled
    return out


def adopted(before: dict | None, after: dict) -> bool:
    """Whether ``after`` moved a recorded default to another image (an adoption, not a first record)."""
    return before is not None and before.get("launcher") == after["launcher"] and before["image"] != after["image"]
