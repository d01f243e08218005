"""Model sources -> pod parts: read-only PVC mounts for ``pvc://`` models, the hub cache volume and the init container
that fills it for ``hf://`` models.

The pod template carries them, so every pod of a LeaderWorkerSet (leader and workers) mounts the same claims and
runs the same fetch: each rank reads the weights itself. The fetch runs before the runtime container with network
access and the token; the runtime container gets the cache read-only and ``HF_HUB_OFFLINE=1``, so it never reaches
the hub and never sees the token.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from specdecode_runtime.contract import model_source as ms
from specdecode_runtime.contract.config import CONFIG_PATH, RuntimeConfig

from ..api.models import SpecDecodeDeploymentSpec

CACHE_VOLUME = "model-cache"
FETCH_CONTAINER = "fetch-models"
# Downloads are I/O-bound: a core and a little memory; no GPU is held while the weights arrive.
FETCH_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}


@dataclass
class ModelVolumes:
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)  # the runtime container's
    env: dict[str, str] = field(default_factory=dict)  # the runtime container's, set after the user's runtime.env
    fetch_mounts: list[dict[str, Any]] = field(default_factory=list)  # the init container's, besides config and /tmp
    fetch_env: list[dict[str, Any]] = field(default_factory=list)
    fetches: bool = False


def _pvc_volume(index: int) -> str:
    return f"model-pvc-{index}"  # claim names may be 253 characters with dots; volume names are DNS labels


def for_spec(spec: SpecDecodeDeploymentSpec) -> ModelVolumes:
    out = ModelVolumes()
    models = (spec.target.model, spec.draft.model)
    for index, claim in enumerate(ms.pvc_claims(*models)):
        source = ms.PvcSource(claim, "")
        claim_source = {"claimName": claim, "readOnly": True}
        out.volumes.append({"name": _pvc_volume(index), "persistentVolumeClaim": claim_source})
        out.mounts.append({"name": _pvc_volume(index), "mountPath": source.mount_path(), "readOnly": True})
    if not ms.hub_sources(*models):
        return out
    cache = spec.modelCache
    if cache is not None and cache.claimName:
        out.volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache.claimName}})
    else:
        size = cache.sizeLimit if cache is not None else None
        out.volumes.append({"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": size} if size else {}})
    out.mounts.append({"name": CACHE_VOLUME, "mountPath": ms.MODEL_CACHE_DIR, "readOnly": True})
    out.env = {"HF_HUB_CACHE": ms.HUB_CACHE_DIR, "HF_HUB_OFFLINE": "1"}
    out.fetches = True
    out.fetch_mounts.append({"name": CACHE_VOLUME, "mountPath": ms.MODEL_CACHE_DIR})
    out.fetch_env.append({"name": "HF_HUB_CACHE", "value": ms.HUB_CACHE_DIR})
    out.fetch_env.append({"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"})  # one line per model, not per chunk
    token = cache.tokenSecretRef if cache is not None else None
    if token is not None:
        out.fetch_env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}
        )
    return out


def fetch_container(
    image: str,
    base_env: list[dict[str, Any]],
    base_mounts: list[dict[str, Any]],
    volumes: ModelVolumes,
    security_context: dict[str, Any],
) -> dict[str, Any]:
    """The init container: ``specdecode-runtime fetch-models`` over the pod's runtime.yaml. ``base_env`` is the
    cache environment and the user's runtime.env (an HF_ENDPOINT mirror or a proxy reaches the fetch too)."""
    env = {e["name"]: e for e in base_env}
    for var in volumes.fetch_env:
        env[var["name"]] = var
    return {
        "name": FETCH_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["specdecode-runtime", "fetch-models", "--config", CONFIG_PATH],
        "env": list(env.values()),
        "resources": FETCH_RESOURCES,
        "volumeMounts": copy.deepcopy([*base_mounts, *volumes.fetch_mounts]),
        # the fetch's last lines (which model, which endpoint, why) are the pod's termination message
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(security_context),
    }


def with_local_paths(cfg: RuntimeConfig) -> RuntimeConfig:
    """``cfg`` with pvc:// models replaced by their mount paths: for the stock SGLang launcher, whose arguments are
    rendered here (the specdecode launcher resolves them in the pod). hf:// is refused with that launcher at
    admission."""

    def local(model: str) -> str:
        source = ms.parse(model)
        return source.local_path() if isinstance(source, ms.PvcSource) else model

    target, draft = local(cfg.target.model), local(cfg.draft.model)
    return cfg.model_copy(
        update={
            "target": cfg.target.model_copy(update={"model": target}),
            "draft": cfg.draft.model_copy(update={"model": draft}),
        }
    )
