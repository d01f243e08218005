"""The serving pod template: launcher command, NCCL environment, GPUs, volumes and probes."""

from __future__ import annotations

from typing import Any

from specdecode_runtime.contract.config import (
    CAPTURE_MOUNT_DIR,
    CONFIG_FILE_NAME,
    CONFIG_MOUNT_DIR,
    TOKEN_MOUNT_DIR,
    RuntimeConfig,
)
from specdecode_runtime.contract.nccl import profile_env
from specdecode_runtime.contract.server_args import DIST_INIT_ADDR_ENV, NODE_RANK_ENV, sglang_cli_args

from ..api.models import SpecDecodeDeployment
from . import model_volumes, names

TERMINATION_GRACE_SECONDS = 180  # long generations in flight get to finish after the drain
# The runtime runs as this non-root user (the runtime image's USER; for the upstream SGLang image, which runs as root,
# the pod sets it). Its writable paths are the in-memory /dev/shm and an emptyDir at /tmp: the root filesystem is
# read-only, so every cache (Triton, TorchInductor, FlashInfer, CUDA JIT, Hugging Face) is pointed under /tmp.
RUNTIME_UID = 10001
SCRATCH_DIR = "/tmp"
SCRATCH_SIZE = "16Gi"  # JIT caches (Triton, FlashInfer, CUDA) and SGLang's IPC sockets
CACHE_ENV = {
    "HOME": f"{SCRATCH_DIR}/home",
    "XDG_CACHE_HOME": f"{SCRATCH_DIR}/cache",
    "TRITON_CACHE_DIR": f"{SCRATCH_DIR}/cache/triton",
    "TORCHINDUCTOR_CACHE_DIR": f"{SCRATCH_DIR}/cache/torchinductor",
    "HF_HOME": f"{SCRATCH_DIR}/cache/huggingface",
}
PRESTOP_DRAIN_SECONDS = 30  # endpoints are removed before the server stops accepting requests
SGLANG_DIST_PORT = 20000
CAPTURE_VOLUME = "capture"


def _sglang_cli_args(cfg: RuntimeConfig) -> list[str]:
    return sglang_cli_args(cfg)


def gpus_per_pod(sdd: SpecDecodeDeployment, nodes: int) -> int:
    return sdd.spec.target.tensorParallelSize if nodes == 1 else sdd.spec.placement.gpusPerNode


def _multi_node_env(sdd: SpecDecodeDeployment) -> list[dict[str, Any]]:
    """Node rank and rank-0 address for SGLang's --node-rank/--dist-init-addr, from the LeaderWorkerSet's pod labels
    through the downward API. Defined in this order so the kubelet can expand the later ones from the earlier."""

    def label(key: str) -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": f"metadata.labels['{key}']"}}

    name = sdd.metadata.name
    return [
        {"name": NODE_RANK_ENV, "valueFrom": label(names.LWS_WORKER_INDEX_LABEL)},
        {"name": "SPECDECODE_GROUP_INDEX", "valueFrom": label(names.LWS_GROUP_INDEX_LABEL)},
        {"name": "SPECDECODE_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {
            # The leader of group g is pod <lws>-<g>, reachable through the LeaderWorkerSet's headless Service <lws>.
            "name": DIST_INIT_ADDR_ENV,
            "value": f"{name}-$(SPECDECODE_GROUP_INDEX).{name}.$(SPECDECODE_POD_NAMESPACE):{SGLANG_DIST_PORT}",
        },
    ]


def command_and_args(sdd: SpecDecodeDeployment, cfg: RuntimeConfig) -> tuple[list[str], list[str]]:
    """A list, never a shell string: no quoting bugs, no injection through model paths or extra args."""
    if sdd.spec.runtime.launcher == "sglang":
        return ["python3", "-m", "sglang.launch_server"], _sglang_cli_args(model_volumes.with_local_paths(cfg))
    command = ["specdecode-runtime", "launch", "--config", f"{CONFIG_MOUNT_DIR}/{CONFIG_FILE_NAME}"]
    return command, []  # extraArgs travel in runtime.yaml, translated by the launcher with the typed fields


def environment(sdd: SpecDecodeDeployment, cfg: RuntimeConfig) -> list[dict[str, Any]]:
    """NCCL profile first, then nccl.env, then the user's runtime.env: later sources win, and a name appears once."""
    env: dict[str, dict[str, Any]] = {}
    nccl = profile_env(cfg.nccl.profile, multi_node=cfg.topology.nodes > 1, overrides=cfg.nccl.env)
    for key, value in nccl.items():
        env[key] = {"name": key, "value": value}
    env["SPECDECODE_DEPLOYMENT"] = {"name": "SPECDECODE_DEPLOYMENT", "value": sdd.metadata.name}
    if cfg.topology.nodes > 1:
        for var in _multi_node_env(sdd):
            env[var["name"]] = var
    env["PROMETHEUS_MULTIPROC_DIR"] = {"name": "PROMETHEUS_MULTIPROC_DIR", "value": f"{SCRATCH_DIR}/specdecode-metrics"}
    for key, value in CACHE_ENV.items():  # before runtime.env: a user may point a cache at a volume of theirs
        env[key] = {"name": key, "value": value}
    for var in sdd.spec.runtime.env:
        if isinstance(var, dict) and "name" in var:
            env[str(var["name"])] = dict(var)
    for key, value in model_volumes.for_spec(sdd.spec).env.items():  # the hub cache, read offline
        env[key] = {"name": key, "value": value}
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        env[key] = {"name": key, "value": nccl[key]}  # multicast stays off whatever runtime.env says
    return list(env.values())


def _affinity(sdd: SpecDecodeDeployment) -> dict[str, Any] | None:
    affinity = {k: v for k, v in sdd.spec.placement.affinity.items()}
    product = sdd.spec.placement.gpuProduct
    if product:
        term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}]}
        node = dict(affinity.get("nodeAffinity") or {})
        required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        existing = list(required.get("nodeSelectorTerms") or [])
        if existing:  # terms are ORed: the product must hold inside every term
            terms = [
                {**t, "matchExpressions": [*(t.get("matchExpressions") or []), *term["matchExpressions"]]}
                for t in existing
            ]
        else:
            terms = [term]
        required["nodeSelectorTerms"] = terms
        node["requiredDuringSchedulingIgnoredDuringExecution"] = required
        affinity["nodeAffinity"] = node
    return affinity or None


def _resources(sdd: SpecDecodeDeployment, gpus: int) -> dict[str, Any]:
    user = sdd.spec.runtime.resources
    gpu = sdd.spec.placement.gpuResourceName
    # Quantities as strings, the canonical form: typed clients (kubernetes>=37 models) refuse bare integers.
    limits = {**{k: str(v) for k, v in (user.get("limits") or {}).items()}, gpu: str(gpus)}
    requests = {**{k: str(v) for k, v in (user.get("requests") or {}).items()}, gpu: str(gpus)}
    return {"limits": dict(sorted(limits.items())), "requests": dict(sorted(requests.items()))}


def _probes(serves_http: bool) -> dict[str, Any]:
    if not serves_http:
        return {}
    health = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        # Model loading and CUDA-graph capture take minutes: the startup probe allows 30 minutes.
        "startupProbe": {**health, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 180},
        "readinessProbe": {**health, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**health, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 5},
    }


def serves_control(sdd: SpecDecodeDeployment) -> bool:
    """Whether the runtime pods open the step-control port. Everything that exposes or guards that port keys on
    this one predicate: the container port, the headless Service's port and the NetworkPolicy that admits only the
    operator to it (``network.control_network_policy``)."""
    return sdd.spec.runtime.launcher == "specdecode"


def service_account_name(sdd: SpecDecodeDeployment) -> str:
    """The pods' ServiceAccount: the one ``spec.podTemplate.serviceAccountName`` names, else their own
    (``service_account``)."""
    if sdd.spec.podTemplate is not None and sdd.spec.podTemplate.serviceAccountName is not None:
        return sdd.spec.podTemplate.serviceAccountName
    return names.service_account(sdd.metadata.name)


def service_account(sdd: SpecDecodeDeployment) -> dict[str, Any]:
    """The runtime pods' own ServiceAccount. Nothing grants it any RBAC right and it mounts no token by default:
    its only use is the projected token the runtime reads the ServiceAccount issuer's public keys with
    (``system:service-account-issuer-discovery``, granted to every ServiceAccount by the API server's defaults),
    and only in ServiceAccount step-control mode (``control_auth.add_to_template``). Its own name keeps the pods
    off the namespace's ``default`` ServiceAccount, whose rights the tenant or another tool may have widened.

    Rendered also while ``spec.podTemplate.serviceAccountName`` puts the pods on another account: it is then unused
    (it holds nothing), and dropping it would need a grant to delete ServiceAccounts in every watched namespace;
    pods that return to it find it in place."""
    name = sdd.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": names.service_account(name), "labels": names.labels(name, "runtime")},
        "automountServiceAccountToken": False,
    }


def pod_template(
    sdd: SpecDecodeDeployment,
    cfg: RuntimeConfig,
    image: str,
    config_hash: str,
    *,
    serves_http: bool = True,
    shared_token: bool = True,
) -> dict[str, Any]:
    """``shared_token``: mount the optional control-token Secret (Secret step-control mode). In ServiceAccount mode
    it is False: the pods then accept no shared token at all, so whoever may create a Secret of that name in the
    namespace cannot set one for them."""
    name = sdd.metadata.name
    spec = sdd.spec
    gpus = gpus_per_pod(sdd, cfg.topology.nodes)
    command, args = command_and_args(sdd, cfg)
    ports = [{"name": "http", "containerPort": spec.runtime.port, "protocol": "TCP"}]
    if serves_control(sdd):
        ports.append({"name": "control", "containerPort": spec.runtime.controlPort, "protocol": "TCP"})
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": SCRATCH_DIR},
        {"name": "runtime-config", "mountPath": CONFIG_MOUNT_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.runtime.shmSize}},
        {"name": "scratch", "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
        {"name": "runtime-config", "configMap": {"name": names.config_map(name)}},
    ]
    if serves_control(sdd) and shared_token:
        mounts.append({"name": "control-token", "mountPath": TOKEN_MOUNT_DIR, "readOnly": True})
        # optional: an offline render applied without the operator still starts; control then answers 401.
        volumes.append(
            {"name": "control-token", "secret": {"secretName": names.control_secret(name), "optional": True}}
        )
    if spec.runtime.modelVolume:
        mounts.append({"name": "models", "mountPath": "/models", "readOnly": True})
        volumes.append({"name": "models", **spec.runtime.modelVolume})
    capture_claim = _capture_claim(sdd, cfg)
    if capture_claim is not None:  # served traffic, written by TP rank 0 (runtime.yaml capture)
        mounts.append({"name": CAPTURE_VOLUME, "mountPath": CAPTURE_MOUNT_DIR})
        volumes.append({"name": CAPTURE_VOLUME, "persistentVolumeClaim": {"claimName": capture_claim}})
    sources = model_volumes.for_spec(spec)
    mounts += sources.mounts
    volumes += sources.volumes
    container: dict[str, Any] = {
        "name": "runtime",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        **({"args": args} if args else {}),
        "ports": ports if serves_http else [],
        "env": environment(sdd, cfg),
        "resources": _resources(sdd, gpus),
        "volumeMounts": mounts,
        **_probes(serves_http),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_DRAIN_SECONDS}}},
        # Pod Security Standard `restricted`: GPUs need no privilege, no capability and no host namespace (the
        # device plugin hands the devices over; shared memory is the in-memory /dev/shm volume).
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
    }
    if not container["ports"]:
        container.pop("ports")
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "enableServiceLinks": False,
        # The pods' own ServiceAccount, with no rights (or the one spec.podTemplate names); no automounted token
        # whatever the account says (the runtime never calls the Kubernetes API with one): ServiceAccount step
        # control projects the one token it needs.
        "serviceAccountName": service_account_name(sdd),
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_UID,
            "runAsGroup": RUNTIME_UID,
            "fsGroup": RUNTIME_UID,
            "fsGroupChangePolicy": "OnRootMismatch",  # no recursive chown of a large model volume at every start
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if sources.fetches:
        base_env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in CACHE_ENV.items()]
        base_env += [dict(v) for v in spec.runtime.env if isinstance(v, dict) and "name" in v]
        base_mounts = [m for m in mounts if m["name"] in ("scratch", "runtime-config")]
        pod_spec["initContainers"] = [
            model_volumes.fetch_container(image, base_env, base_mounts, sources, container["securityContext"])
        ]
    node_selector = _node_selector(sdd)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    tolerations = _tolerations(sdd)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    affinity = _affinity(sdd)
    if affinity:
        pod_spec["affinity"] = affinity
    _add_platform_fields(pod_spec, sdd)
    return {"metadata": pod_metadata(sdd, config_hash), "spec": pod_spec}


def _capture_claim(sdd: SpecDecodeDeployment, cfg: RuntimeConfig) -> str | None:
    """The capture claim, where runtime.yaml carries a capture section (spec.draft.adaptation enabled)."""
    adaptation = sdd.spec.draft.adaptation
    if cfg.capture is None or adaptation is None:
        return None
    return adaptation.capture.claimName


# spec.podTemplate fields copied onto the pod as they are, in this order.
PLATFORM_FIELDS = ("priorityClassName", "schedulerName", "runtimeClassName")


def pod_metadata(sdd: SpecDecodeDeployment, config_hash: str) -> dict[str, Any]:
    """spec.podTemplate.metadata merged under the operator's own: its labels (which admission keeps off the
    operator's keys) beside the identity labels the selectors use, which are applied last and so always win; its
    annotations beside the config hash, likewise. The deployment's own labels are not put on the pods (they reach
    its children only, ``render.propagated_labels``): a label edit there would otherwise roll every pod."""
    template = sdd.spec.podTemplate
    user_labels = template.metadata.labels if template is not None else {}
    user_annotations = template.metadata.annotations if template is not None else {}
    return {
        "labels": {**dict(sorted(user_labels.items())), **names.labels(sdd.metadata.name, "runtime")},
        "annotations": {**dict(sorted(user_annotations.items())), names.CONFIG_HASH_ANNOTATION: config_hash},
    }


def _node_selector(sdd: SpecDecodeDeployment) -> dict[str, str]:
    """placement.nodeSelector plus spec.podTemplate.nodeSelector. Admission refuses a key in both; should one get
    past it (a CRD without its rules), placement's value stands."""
    extra = sdd.spec.podTemplate.nodeSelector if sdd.spec.podTemplate is not None else {}
    return dict(sorted({**extra, **sdd.spec.placement.nodeSelector}.items()))


def _tolerations(sdd: SpecDecodeDeployment) -> list[dict[str, Any]]:
    """placement.tolerations, then spec.podTemplate.tolerations (tolerations only add: order does not matter)."""
    extra = sdd.spec.podTemplate.tolerations if sdd.spec.podTemplate is not None else []
    return [*sdd.spec.placement.tolerations, *(t.model_dump(exclude_none=True) for t in extra)]


def _add_platform_fields(pod_spec: dict[str, Any], sdd: SpecDecodeDeployment) -> None:
    template = sdd.spec.podTemplate
    if template is None:
        return
    if template.imagePullSecrets:
        pod_spec["imagePullSecrets"] = [{"name": s.name} for s in template.imagePullSecrets]
    for key in PLATFORM_FIELDS:
        value = getattr(template, key)
        if value is not None:
            pod_spec[key] = value
