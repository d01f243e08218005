"""Step control authenticated by the operator's ServiceAccount token instead of a per-object Secret.

With ``RenderOptions.control_auth`` set, the runtime pods are told (``SPECDECODE_CONTROL_*``) which issuer,
audience and ServiceAccount to accept on their step endpoint (``specdecode_runtime.sa_token_auth``), and get a
projected token of their own ServiceAccount (``pod.service_account``, which holds no RBAC rights, or the one
``spec.podTemplate.serviceAccountName`` names) plus the cluster CA, with which they read the issuer's public keys
from the API server; that account plays no part in which token they accept. The pods still do not automount a
token: this one is projected where the runtime looks for it, and the control-token Secret is not mounted at all.

The audience is the deployment's own (``deployment_audience``: the prefix, its namespace, name and uid): the
operator requests a short-lived token for exactly that audience before it pushes a step table
(``control_identity``), so a token one deployment's pod receives is refused by every other deployment's pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

API_MOUNT_DIR = "/var/run/secrets/specdecode/api"
TOKEN_SECONDS = 3600  # kubelet rotates the projected token at 80 % of this


@dataclass(frozen=True)
class ControlAuth:
    issuer: str  # the cluster's ServiceAccount issuer
    audience: str  # the audience prefix; each deployment's pods accept deployment_audience(audience, ...)
    subjects: tuple[str, ...]  # system:serviceaccount:<namespace>:<name> of the operator


def service_account_subject(namespace: str, name: str) -> str:
    """The subject a ServiceAccount's tokens carry, as the pods are told to accept it."""
    return f"system:serviceaccount:{namespace}:{name}"


def deployment_audience(prefix: str, namespace: str, name: str, uid: str | None) -> str:
    """The one audience a deployment's runtime pods accept: ``<prefix>/<namespace>/<name>/<uid>``. Namespace and
    object names cannot hold a slash, so no two deployments share it (the uid: nor a deleted one and its
    successor of the same name)."""
    return "/".join((prefix, namespace, name, uid or ""))


def env(auth: ControlAuth, audience: str) -> list[dict[str, Any]]:
    return [
        {"name": "SPECDECODE_CONTROL_ISSUER", "value": auth.issuer},
        {"name": "SPECDECODE_CONTROL_AUDIENCE", "value": audience},
        {"name": "SPECDECODE_CONTROL_SUBJECTS", "value": ",".join(auth.subjects)},
        {"name": "SPECDECODE_CONTROL_TOKEN_FILE", "value": f"{API_MOUNT_DIR}/token"},
        {"name": "SPECDECODE_CONTROL_CA_FILE", "value": f"{API_MOUNT_DIR}/ca.crt"},
    ]


def add_to_template(template: dict[str, Any], auth: ControlAuth | None, audience: str = "") -> None:
    """Add the settings, the projected token and the CA to the runtime container of ``template`` (in place);
    ``audience``: the deployment's own (``deployment_audience``)."""
    if auth is None:
        return
    spec = template["spec"]
    container = spec["containers"][0]
    container["env"] = [*container["env"], *env(auth, audience or auth.audience)]
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": "control-issuer", "mountPath": API_MOUNT_DIR, "readOnly": True},
    ]
    spec["volumes"] = [
        *spec["volumes"],
        {
            "name": "control-issuer",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                ]
            },
        },
    ]
