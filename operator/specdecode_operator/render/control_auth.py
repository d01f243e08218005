"""Step control authenticated by the operator's ServiceAccount token instead of a per-object Secret.

With ``RenderOptions.control_auth`` set, the runtime pods are told (``SPECDECODE_CONTROL_*``) which issuer,
audience and ServiceAccount to accept on their step endpoint (``specdecode_runtime.sa_token_auth``), and get a
projected token of their own plus the cluster CA, with which they read the issuer's public keys from the API
server. The pods still do not automount a token: this one is projected where the runtime looks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

API_MOUNT_DIR = "/var/run/secrets/specdecode/api"
TOKEN_SECONDS = 3600  # kubelet rotates the projected token at 80 % of this


@dataclass(frozen=True)
class ControlAuth:
    issuer: str  # the cluster's ServiceAccount issuer (the operator's own token's ``iss``)
    audience: str  # the audience the operator's token is bound to
    subjects: tuple[str, ...]  # system:serviceaccount:<namespace>:<name> of the operator


def env(auth: ControlAuth) -> list[dict[str, Any]]:
    return [
        {"name": "SPECDECODE_CONTROL_ISSUER", "value": auth.issuer},
        {"name": "SPECDECODE_CONTROL_AUDIENCE", "value": auth.audience},
        {"name": "SPECDECODE_CONTROL_SUBJECTS", "value": ",".join(auth.subjects)},
        {"name": "SPECDECODE_CONTROL_TOKEN_FILE", "value": f"{API_MOUNT_DIR}/token"},
        {"name": "SPECDECODE_CONTROL_CA_FILE", "value": f"{API_MOUNT_DIR}/ca.crt"},
    ]


def add_to_template(template: dict[str, Any], auth: ControlAuth | None) -> None:
    """Add the settings, the projected token and the CA to the runtime container of ``template`` (in place)."""
    if auth is None:
        return
    spec = template["spec"]
    container = spec["containers"][0]
    container["env"] = [*container["env"], *env(auth)]
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
