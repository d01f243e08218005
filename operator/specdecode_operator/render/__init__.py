"""SpecDecodeDeployment -> Kubernetes manifests. Pure and deterministic: no I/O, same input, byte-identical output.

Owner references are the caller's business (the operator adds them); ``specdecode render`` output is meant for
``kubectl apply`` and GitOps repositories as it is.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..api import labels as api_labels
from ..api.models import SpecDecodeDeployment
from ..images import RUNTIME_IMAGE, SGLANG_IMAGE
from . import control_auth, draft_source, names, network, pod, workload
from .control_auth import ControlAuth
from .runtime_config import nodes_of, runtime_config

DEFAULT_OPERATOR_LABELS = {"app.kubernetes.io/name": "specdecode-operator"}

# (apiVersion, kind, plural, namespaced): everything render() can produce, so the operator can find stale children.
CHILD_KINDS: list[tuple[str, str, str, bool]] = [
    ("v1", "ServiceAccount", "serviceaccounts", True),
    ("v1", "ConfigMap", "configmaps", True),
    ("v1", "Service", "services", True),
    ("apps/v1", "Deployment", "deployments", True),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets", True),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True),
    ("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors", True),
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True),
]


@dataclass(frozen=True)
class RenderOptions:
    default_image: str = RUNTIME_IMAGE
    default_sglang_image: str = SGLANG_IMAGE
    # The default image this deployment runs when spec.runtime.image is empty, as the operator recorded it in
    # status.runtimeImage (reconcile/runtime_image.py); None: the launcher's default above. An explicit image wins.
    runtime_image: str | None = None
    operator_namespace: str = "specdecode-system"
    operator_labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_OPERATOR_LABELS))
    tuned_steps: int | None = None  # Rollout mode: the tuner's step count (spec is never changed)
    # Step control by the operator's ServiceAccount token (render/control_auth.py); None: the control-token Secret
    control_auth: ControlAuth | None = None
    # Labels of every ServiceMonitor (chart: runtime.serviceMonitor.labels); spec.monitoring.labels win over them
    service_monitor_labels: dict[str, str] = field(default_factory=dict)
    # The draft the pods serve (status.draft.serving, render/draft_source.py): the runtime config names it instead
    # of spec.draft.model while a new draft is canaried in place; None: spec.draft.model
    served_draft: str | None = None


def content_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def propagated_labels(sdd: SpecDecodeDeployment) -> dict[str, str]:
    """The deployment's own labels that every child carries (``api.labels.propagated``: all but those of Kubernetes,
    of the operator and of the tools that apply SpecDecodeDeployments). Never in a selector, which is immutable
    and must keep selecting the same pods; not on the pods either (``pod.pod_metadata``)."""
    return api_labels.propagated(sdd.metadata.labels)


def _stamp(manifest: dict[str, Any], namespace: str | None, inherited: dict[str, str]) -> dict[str, Any]:
    md = manifest["metadata"]
    if inherited:  # beneath the child's own labels: the operator's identity labels always win
        md["labels"] = {**inherited, **md.get("labels", {})}
    if namespace:
        md["namespace"] = namespace
    md.setdefault("annotations", {})[names.INPUT_HASH_ANNOTATION] = content_hash(manifest)
    return manifest


def _image(sdd: SpecDecodeDeployment, options: RenderOptions) -> str:
    if sdd.spec.runtime.image:
        return sdd.spec.runtime.image
    if options.runtime_image:
        return options.runtime_image
    return options.default_sglang_image if sdd.spec.runtime.launcher == "sglang" else options.default_image


def render(sdd: SpecDecodeDeployment, options: RenderOptions | None = None) -> list[dict[str, Any]]:
    options = options or RenderOptions()
    if options.served_draft is not None:
        sdd = draft_source.with_draft(sdd, options.served_draft)
    name, namespace = sdd.metadata.name, sdd.metadata.namespace
    cfg = runtime_config(sdd, options.tuned_steps)
    nodes = nodes_of(sdd)
    config_data = {"runtime.yaml": cfg.to_yaml()}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": names.config_map(name), "labels": names.labels(name, "config")},
        "data": config_data,
    }
    template = pod.pod_template(
        sdd, cfg, _image(sdd, options), content_hash(config_data), shared_token=options.control_auth is None
    )
    if pod.serves_control(sdd):
        audience = ""
        if options.control_auth is not None:
            audience = control_auth.deployment_audience(
                options.control_auth.audience, namespace or "", name, sdd.metadata.uid
            )
        control_auth.add_to_template(template, options.control_auth, audience)
    serving = workload.deployment(sdd, template) if nodes == 1 else workload.leader_worker_set(sdd, template, nodes)
    out = [
        pod.service_account(sdd),
        config_map,
        network.client_service(sdd, nodes),
        network.headless_service(sdd, nodes),
        serving,
        network.disruption_budget(sdd, nodes),
    ]
    if pod.serves_control(sdd):  # the control port is never rendered without the policy that guards it
        out.append(network.control_network_policy(sdd, nodes, options.operator_namespace, options.operator_labels))
    if sdd.spec.monitoring.serviceMonitor:
        out.append(network.service_monitor(sdd, options.service_monitor_labels))
    inherited = propagated_labels(sdd)
    return [_stamp(m, namespace, inherited) for m in out]


def to_yaml(manifests: list[dict[str, Any]]) -> str:
    return yaml.dump_all(manifests, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, width=120)


def to_json(manifests: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2)


__all__ = [
    "CHILD_KINDS",
    "RenderOptions",
    "content_hash",
    "names",
    "propagated_labels",
    "render",
    "to_json",
    "to_yaml",
]
