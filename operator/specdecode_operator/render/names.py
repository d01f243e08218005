"""Names and labels of the children: one place, so the renderer, the operator and the tuner agree."""

from __future__ import annotations

MANAGED_BY = "specdecode-operator"
INPUT_HASH_ANNOTATION = "specdecode.io/input-hash"
CONFIG_HASH_ANNOTATION = "specdecode.io/config-hash"
PAUSE_ANNOTATION = "specdecode.io/reconcile"
# Any new value: the deployment adopts the operator's current default runtime image (reconcile/runtime_image.py).
ADOPT_DEFAULT_IMAGE_ANNOTATION = "specdecode.io/adopt-default-image"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"


def workload(name: str) -> str:
    return name


def client_service(name: str) -> str:
    return name


def headless_service(name: str) -> str:
    return f"{name}-headless"


def config_map(name: str) -> str:
    return f"{name}-runtime"


def control_secret(name: str) -> str:
    return f"{name}-control-token"


def network_policy(name: str) -> str:
    return f"{name}-control"


def service_account(name: str) -> str:
    """The runtime pods' own ServiceAccount (no RBAC rights)."""
    return f"{name}-runtime"


def labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "specdecode",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def selector(name: str) -> dict[str, str]:
    """Pod selector of the serving pods; stable across spec changes (Deployment selectors are immutable)."""
    return {
        "app.kubernetes.io/name": "specdecode",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "runtime",
    }


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector(name).items()))
