"""What the rendered pods ask of the kubelet and the scheduler, field by field, in the cases the examples leave out:
the ServiceAccount-token step control (env the runtime parses back, the projected token and cluster CA it reads),
the gpuProduct term merged into each shape of user affinity, the model volumes (several claims, an emptyDir or
claimed hub cache, the fetch container's environment and mounts), the stock SGLang launcher's pvc:// paths, and
the runtime container's environment, ports, placement and worker template."""

from __future__ import annotations

import copy
import json
import posixpath

import pytest
import yaml

from specdecode_operator.api.models import SpecDecodeDeployment
from specdecode_operator.api.validate import parse
from specdecode_operator.render import RenderOptions, names, render, to_json, to_yaml
from specdecode_operator.render.control_auth import API_MOUNT_DIR, ControlAuth, deployment_audience
from specdecode_operator.render.runtime_config import runtime_config
from specdecode_runtime.contract import model_source as ms
from specdecode_runtime.contract.config import CONFIG_MOUNT_DIR, RuntimeConfig
from specdecode_runtime.sa_token_auth import settings_from_env
from tests.cli.clitest import EXAMPLE

GPU_KEY = "nvidia.com/gpu.product"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AUTH = ControlAuth(
    "https://oidc.example/cluster",
    "specdecode-runtime",
    ("system:serviceaccount:ops:specdecode-operator", "system:serviceaccount:ops:tuner"),
)


def document(name: str = "m", **spec) -> dict:
    """A valid one-GPU SpecDecodeDeployment; each keyword replaces (or adds) that top-level spec field."""
    base = {
        "target": {"model": "/models/t", "tensorParallelSize": 1},
        "draft": {"model": "/models/d", "tensorParallelSize": 1},
        "placement": {"gpusPerNode": 1},
    }
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {**base, **spec},
    }


def rendered(doc: dict, options: RenderOptions | None = None) -> list[dict]:
    return render(parse(doc), options)


def workload(manifests: list[dict]) -> dict:
    (found,) = [m for m in manifests if m["kind"] in ("Deployment", "LeaderWorkerSet")]
    return found


def pod_spec(manifests: list[dict]) -> dict:
    w = workload(manifests)
    if w["kind"] == "Deployment":
        return w["spec"]["template"]["spec"]
    return w["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def runtime_container(manifests: list[dict]) -> dict:
    (c,) = pod_spec(manifests)["containers"]
    assert c["name"] == "runtime"
    return c


def env_of(container: dict) -> dict[str, dict]:
    names_ = [e["name"] for e in container["env"]]
    assert len(names_) == len(set(names_)), f"a variable is set twice: {names_}"
    return {e["name"]: e for e in container["env"]}


def values_of(container: dict) -> dict[str, str]:
    return {name: e["value"] for name, e in env_of(container).items() if "value" in e}


def volumes_of(spec: dict) -> dict[str, dict]:
    return {v["name"]: v for v in spec["volumes"]}


def mounts_of(container: dict) -> dict[str, dict]:
    return {m["name"]: m for m in container["volumeMounts"]}


def file_in_volume(spec: dict, container: dict, path: str) -> tuple[dict, str]:
    """The volume and the path inside it that a container sees at ``path`` (the kubelet's view of the mounts)."""
    directory, leaf = posixpath.split(path)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    return volumes_of(spec)[mount["name"]], leaf


# --- ServiceAccount-token step control ---------------------------------------------------------------------------


def test_control_auth_env_parses_back_in_the_runtime_to_the_operators_issuer_audience_and_every_subject():
    c = runtime_container(rendered(document(), RenderOptions(control_auth=AUTH)))
    settings = settings_from_env(values_of(c))
    assert settings is not None
    md = document()["metadata"]
    audience = deployment_audience(AUTH.audience, md["namespace"], md["name"], md.get("uid"))
    assert (settings.issuer, settings.audience, settings.subjects) == (AUTH.issuer, audience, AUTH.subjects)
    assert settings.token_file == f"{API_MOUNT_DIR}/token"
    assert settings.ca_file == f"{API_MOUNT_DIR}/ca.crt"
    # plain values, not references the kubelet would have to resolve
    added = [e for e in c["env"] if e["name"].startswith("SPECDECODE_CONTROL_")]
    assert all(set(e) == {"name", "value"} for e in added) and len(added) == 5


def test_the_token_and_ca_files_the_runtime_is_told_about_are_the_projected_volumes_token_and_cluster_ca():
    manifests = rendered(document(), RenderOptions(control_auth=AUTH))
    spec, c = pod_spec(manifests), runtime_container(manifests)
    env = values_of(c)
    token_volume, token_path = file_in_volume(spec, c, env["SPECDECODE_CONTROL_TOKEN_FILE"])
    ca_volume, ca_path = file_in_volume(spec, c, env["SPECDECODE_CONTROL_CA_FILE"])
    assert token_volume is ca_volume
    assert mounts_of(c)[token_volume["name"]]["readOnly"] is True
    assert token_volume == {
        "name": token_volume["name"],
        "projected": {
            "sources": [
                # a token of the pod's own ServiceAccount, rotated by the kubelet before the hour is up
                {"serviceAccountToken": {"path": token_path, "expirationSeconds": 3600}},
                # the cluster CA every namespace holds, to reach the API server's issuer keys over TLS
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": ca_path}]}},
            ]
        },
    }


def test_control_auth_adds_only_its_own_env_mount_and_volume_and_keeps_the_pods_own():
    plain = rendered(document())
    authed = rendered(document(), RenderOptions(control_auth=AUTH))
    before, after = pod_spec(plain), pod_spec(authed)
    own = [v for v in before["volumes"] if v["name"] != "control-token"]  # no shared token in this mode
    assert after["volumes"][: len(own)] == own
    assert [v["name"] for v in after["volumes"][len(own) :]] == ["control-issuer"]
    c_before, c_after = runtime_container(plain), runtime_container(authed)
    assert c_after["env"][: len(c_before["env"])] == c_before["env"]
    assert after["automountServiceAccountToken"] is False


def test_control_auth_reaches_the_workers_of_a_multi_node_group_too():
    doc = document(
        target={"model": "/models/t", "tensorParallelSize": 16}, placement={"gpusPerNode": 8, "interconnect": "NVLink"}
    )
    lws = workload(rendered(doc, RenderOptions(control_auth=AUTH)))["spec"]["leaderWorkerTemplate"]
    for template in (lws["leaderTemplate"], lws["workerTemplate"]):
        (c,) = template["spec"]["containers"]
        assert settings_from_env(values_of(c)).subjects == AUTH.subjects
        assert "control-issuer" in volumes_of(template["spec"])


def test_the_stock_sglang_launcher_gets_no_step_control_auth():
    doc = document(runtime={"launcher": "sglang"}, speculative={"autotune": {"mode": "Off"}})
    manifests = rendered(doc, RenderOptions(control_auth=AUTH))
    c = runtime_container(manifests)
    assert not [e for e in c["env"] if e["name"].startswith("SPECDECODE_CONTROL_")]
    assert "control-issuer" not in volumes_of(pod_spec(manifests))
    assert "control-token" not in volumes_of(pod_spec(manifests))  # no control endpoint at all
    assert [p["name"] for p in c["ports"]] == ["http"]


# --- gpuProduct merged into the user's affinity -------------------------------------------------------------------

GPU_EXPR = {"key": GPU_KEY, "operator": "In", "values": ["H200"]}
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
HOSTS = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
ANTI = {"podAntiAffinity": {PREFERRED: [{"weight": 5, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}
PREFER = [{"weight": 1, "preference": {"matchExpressions": [ZONE]}}]


@pytest.mark.parametrize(
    "user,expected",
    [
        pytest.param({}, {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [GPU_EXPR]}]}}}),
        pytest.param(
            ANTI,
            {**ANTI, "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [GPU_EXPR]}]}}},
            id="pod-anti-affinity-only",
        ),
        pytest.param(
            {"nodeAffinity": {PREFERRED: PREFER}},
            {"nodeAffinity": {PREFERRED: PREFER, REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [GPU_EXPR]}]}}},
            id="preferred-only",
        ),
        pytest.param(
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}},
            {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [GPU_EXPR]}]}}},
            id="no-terms",
        ),
        pytest.param(
            {
                "nodeAffinity": {
                    REQUIRED: {"nodeSelectorTerms": [{"matchFields": [HOSTS]}, {"matchExpressions": [ZONE]}]}
                }
            },
            {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {"matchFields": [HOSTS], "matchExpressions": [GPU_EXPR]},
                            {"matchExpressions": [ZONE, GPU_EXPR]},
                        ]
                    }
                }
            },
            id="fields-only-term",
        ),
    ],
)
def test_gpu_product_is_required_on_every_node_the_pod_may_land_on(user, expected):
    doc = document(placement={"gpusPerNode": 1, "gpuProduct": "H200", "affinity": copy.deepcopy(user)})
    sdd = parse(doc)
    given = copy.deepcopy(sdd.spec.placement.affinity)
    assert pod_spec(render(sdd))["affinity"] == expected
    assert sdd.spec.placement.affinity == given  # the object's own spec is left as it was (a second render agrees)
    assert pod_spec(render(sdd))["affinity"] == expected


def test_without_gpu_product_the_users_affinity_passes_through_unchanged():
    user = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}, PREFERRED: PREFER}}
    assert pod_spec(rendered(document(placement={"gpusPerNode": 1, "affinity": user})))["affinity"] == user
    assert pod_spec(rendered(document(placement={"gpusPerNode": 1, "affinity": ANTI})))["affinity"] == ANTI


# --- model volumes ------------------------------------------------------------------------------------------------


def test_models_on_two_claims_mount_each_claim_read_only_where_the_launcher_looks():
    doc = document(
        target={"model": "pvc://weights/llama/8b", "tensorParallelSize": 1},
        draft={"model": "pvc://drafts.store/eagle3", "tensorParallelSize": 1},
    )
    manifests = rendered(doc)
    spec, c = pod_spec(manifests), runtime_container(manifests)
    claims = {name: v["persistentVolumeClaim"] for name, v in volumes_of(spec).items() if "persistentVolumeClaim" in v}
    assert list(claims.values()) == [
        {"claimName": "weights", "readOnly": True},
        {"claimName": "drafts.store", "readOnly": True},
    ]
    mounts = mounts_of(c)
    assert [mounts[name] for name in claims] == [
        {"name": name, "mountPath": path, "readOnly": True}
        for name, path in zip(claims, (f"{ms.PVC_MOUNT_ROOT}/weights", f"{ms.PVC_MOUNT_ROOT}/drafts.store"))
    ]
    assert len(set(claims)) == 2 and all(name.startswith("model-pvc-") for name in claims)
    # no hub: no cache, no fetch, no offline switch
    assert "initContainers" not in spec and "model-cache" not in volumes_of(spec)
    assert not {"HF_HUB_OFFLINE", "HF_HUB_CACHE"} & set(env_of(c))


def test_target_and_draft_on_one_claim_mount_it_once():
    doc = document(
        target={"model": "pvc://weights/t", "tensorParallelSize": 1},
        draft={"model": "pvc://weights/d", "tensorParallelSize": 1},
    )
    spec = pod_spec(rendered(doc))
    assert [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v] == [
        "weights"
    ]


HF_TARGET = {"model": "hf://acme/target@v1", "tensorParallelSize": 1}
HF_DRAFT = {"model": "hf://acme/draft", "tensorParallelSize": 1}


@pytest.mark.parametrize(
    "cache,source",
    [
        pytest.param(None, {"emptyDir": {}}, id="no-modelCache"),
        pytest.param({}, {"emptyDir": {}}, id="empty-modelCache"),
        pytest.param({"sizeLimit": "200Gi"}, {"emptyDir": {"sizeLimit": "200Gi"}}, id="sizeLimit"),
        pytest.param(
            {"tokenSecretRef": {"name": "hf"}}, {"emptyDir": {}}, id="token-only"
        ),  # a token does not make a claim
        pytest.param({"claimName": "hub"}, {"persistentVolumeClaim": {"claimName": "hub"}}, id="claim"),
    ],
)
def test_the_hub_cache_volume_is_the_claim_or_an_emptydir_of_the_size_limit(cache, source):
    doc = document(target=HF_TARGET, draft=HF_DRAFT, **({} if cache is None else {"modelCache": cache}))
    manifests = rendered(doc)
    spec, c = pod_spec(manifests), runtime_container(manifests)
    assert volumes_of(spec)["model-cache"] == {"name": "model-cache", **source}
    # the runtime reads the cache, offline; the fetch writes it
    assert mounts_of(c)["model-cache"] == {"name": "model-cache", "mountPath": ms.MODEL_CACHE_DIR, "readOnly": True}
    (fetch,) = spec["initContainers"]
    assert mounts_of(fetch)["model-cache"] == {"name": "model-cache", "mountPath": ms.MODEL_CACHE_DIR}
    env = values_of(c)
    assert (env["HF_HUB_CACHE"], env["HF_HUB_OFFLINE"]) == (ms.HUB_CACHE_DIR, "1")
    assert values_of(fetch)["HF_HUB_CACHE"] == ms.HUB_CACHE_DIR


@pytest.mark.parametrize(
    "ref,expected",
    [
        ({"name": "hf-secret"}, {"name": "hf-secret", "key": "token"}),
        ({"name": "hf-secret", "key": "read"}, {"name": "hf-secret", "key": "read"}),
    ],
)
def test_only_the_fetch_container_gets_the_hub_token_from_the_secret(ref, expected):
    doc = document(target=HF_TARGET, draft=HF_DRAFT, modelCache={"sizeLimit": "1Gi", "tokenSecretRef": ref})
    manifests = rendered(doc)
    (fetch,) = pod_spec(manifests)["initContainers"]
    assert env_of(fetch)["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": expected}}
    assert "HF_TOKEN" not in env_of(runtime_container(manifests))


@pytest.mark.parametrize("cache", [None, {"claimName": "hub"}])
def test_without_a_token_secret_the_fetch_gets_no_token(cache):
    doc = document(target=HF_TARGET, draft=HF_DRAFT, **({} if cache is None else {"modelCache": cache}))
    (fetch,) = pod_spec(rendered(doc))["initContainers"]
    assert "HF_TOKEN" not in env_of(fetch)


def test_the_fetch_container_gets_the_users_env_and_only_the_config_and_scratch_mounts():
    user_env = [
        {"name": "HF_ENDPOINT", "value": "http://mirror.local"},
        {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "url"}}},
        {"name": "HF_HUB_CACHE", "value": "/elsewhere"},  # the fetch must write where the runtime reads
        {"value": "no name"},  # not an EnvVar: left out of both containers
    ]
    doc = document(
        target={"model": "pvc://weights/t", "tensorParallelSize": 1},
        draft=HF_DRAFT,
        modelCache={"sizeLimit": "50Gi"},
        runtime={"env": user_env, "modelVolume": {"emptyDir": {}}},
    )
    manifests = rendered(doc)
    spec, c = pod_spec(manifests), runtime_container(manifests)
    (fetch,) = spec["initContainers"]
    env = env_of(fetch)
    assert env["HF_ENDPOINT"] == user_env[0] and env["HTTPS_PROXY"] == user_env[1]
    assert env["HF_HUB_CACHE"] == {"name": "HF_HUB_CACHE", "value": ms.HUB_CACHE_DIR}
    assert values_of(fetch)["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert values_of(fetch)["HOME"] == values_of(c)["HOME"] == "/tmp/home"
    assert all("name" in e for e in fetch["env"] + c["env"])
    # the config it reads, /tmp for its caches and the hub cache it fills: not the claims, /models or /dev/shm
    assert {m["name"]: m["mountPath"] for m in fetch["volumeMounts"]} == {
        "scratch": "/tmp",
        "runtime-config": CONFIG_MOUNT_DIR,
        "model-cache": ms.MODEL_CACHE_DIR,
    }
    assert fetch["securityContext"] == c["securityContext"]
    # the runtime container: its claim and /models besides the cache; HF_HUB_CACHE and offline mode win over
    # runtime.env
    assert {"model-pvc-0", "models", "model-cache"} <= set(mounts_of(c))
    assert values_of(c)["HF_HUB_CACHE"] == ms.HUB_CACHE_DIR
    assert env_of(c)["HTTPS_PROXY"] == user_env[1]


def test_a_hub_model_the_target_and_draft_share_is_fetched_once_into_one_cache():
    doc = document(target=HF_TARGET, draft={**HF_TARGET})
    spec = pod_spec(rendered(doc))
    assert [v["name"] for v in spec["volumes"]].count("model-cache") == 1
    assert len(spec["initContainers"]) == 1


# --- the stock SGLang launcher: pvc:// resolved in the manifest ---------------------------------------------------


def sglang_args(target: str, draft: str) -> list[str]:
    doc = document(
        target={"model": target, "tensorParallelSize": 1},
        draft={"model": draft, "tensorParallelSize": 1},
        runtime={"launcher": "sglang"},
        speculative={"autotune": {"mode": "Off"}},
    )
    return runtime_container(rendered(doc))["args"]


def flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    "target,draft,target_path,draft_path",
    [
        ("pvc://weights/llama/8b", "pvc://drafts", "/mnt/pvc/weights/llama/8b", "/mnt/pvc/drafts"),
        ("/models/t", "pvc://weights/eagle", "/models/t", "/mnt/pvc/weights/eagle"),
        ("pvc://weights/t", "/models/d", "/mnt/pvc/weights/t", "/models/d"),
    ],
)
def test_sglang_is_given_the_mounted_paths_of_pvc_models(target, draft, target_path, draft_path):
    args = sglang_args(target, draft)
    assert flag(args, "--model-path") == target_path
    assert flag(args, "--speculative-draft-model-path") == draft_path
    assert not any("pvc://" in a for a in args)


def test_sglang_paths_are_inside_the_claims_mounted_in_the_pod():
    doc = document(
        target={"model": "pvc://weights/llama", "tensorParallelSize": 1},
        draft={"model": "pvc://drafts/eagle", "tensorParallelSize": 1},
        runtime={"launcher": "sglang"},
        speculative={"autotune": {"mode": "Off"}},
    )
    manifests = rendered(doc)
    c = runtime_container(manifests)
    claim_of = {
        mounts_of(c)[name]["mountPath"]: v["persistentVolumeClaim"]["claimName"]
        for name, v in volumes_of(pod_spec(manifests)).items()
        if "persistentVolumeClaim" in v
    }
    for option, claim in (("--model-path", "weights"), ("--speculative-draft-model-path", "drafts")):
        path = flag(c["args"], option)
        (mounted,) = [m for m in claim_of if path.startswith(m + "/")]
        assert claim_of[mounted] == claim
    # the config map keeps the object's own pvc:// forms: only the manifest's argument list is resolved
    (cm,) = [m for m in manifests if m["kind"] == "ConfigMap"]
    cfg = RuntimeConfig.from_yaml(cm["data"]["runtime.yaml"])
    assert (cfg.target.model, cfg.draft.model) == ("pvc://weights/llama", "pvc://drafts/eagle")


# --- the runtime container and its pod ----------------------------------------------------------------------------


def test_runtime_env_wins_over_the_renderers_names_once_each_but_multicast_stays_off():
    user_env = [
        {"name": "HF_HOME", "value": "/data/hf"},
        {"name": "TRITON_CACHE_DIR", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "NVSHMEM_DISABLE_NVLS", "value": "0"},
        {"name": "SPECDECODE_DEPLOYMENT", "value": "x"},
        {"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/tmp/prom"},
    ]
    c = runtime_container(rendered(document(runtime={"env": user_env})))
    env = env_of(c)  # a name set by the renderer and by runtime.env appears once, with the user's value
    assert values_of(c)["SPECDECODE_DEPLOYMENT"] == "x" and values_of(c)["PROMETHEUS_MULTIPROC_DIR"] == "/tmp/prom"
    assert env["HF_HOME"] == user_env[0] and env["TRITON_CACHE_DIR"] == user_env[1]
    values = values_of(c)
    assert values["NVSHMEM_DISABLE_NVLS"] == "1" and values["NCCL_NVLS_ENABLE"] == "0"
    assert values["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert values["XDG_CACHE_HOME"] == "/tmp/cache" and values["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/cache/torchinductor"


def test_a_single_node_pod_gets_no_multi_node_rendezvous():
    env = env_of(runtime_container(rendered(document())))
    assert not {"SPECDECODE_NODE_RANK", "SPECDECODE_GROUP_INDEX", "SPECDECODE_DIST_INIT_ADDR"} & set(env)
    assert env["SPECDECODE_DEPLOYMENT"] == {"name": "SPECDECODE_DEPLOYMENT", "value": "m"}
    assert env["PROMETHEUS_MULTIPROC_DIR"] == {"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/tmp/specdecode-metrics"}


def test_a_multi_node_group_finds_its_leader_through_the_lws_service_and_labels():
    doc = document(
        name="big",
        target={"model": "/models/t", "tensorParallelSize": 16},
        placement={"gpusPerNode": 8, "interconnect": "NVLink"},
    )
    env = env_of(runtime_container(rendered(doc)))
    label = lambda key: {"fieldRef": {"fieldPath": f"metadata.labels['{key}']"}}
    assert env["SPECDECODE_NODE_RANK"]["valueFrom"] == label(names.LWS_WORKER_INDEX_LABEL)
    assert env["SPECDECODE_GROUP_INDEX"]["valueFrom"] == label(names.LWS_GROUP_INDEX_LABEL)
    assert env["SPECDECODE_POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["SPECDECODE_DIST_INIT_ADDR"]["value"] == (
        "big-$(SPECDECODE_GROUP_INDEX).big.$(SPECDECODE_POD_NAMESPACE):20000"
    )


@pytest.mark.parametrize("tp,probe_disabled", [(8, True), (16, False)])
def test_only_a_single_pcie_node_skips_the_infiniband_probe(tp, probe_disabled):
    """A group across PCIe nodes talks over the network NCCL finds by probing InfiniBand: the probe stays on."""
    doc = document(target={"model": "/models/t", "tensorParallelSize": tp}, placement={"gpusPerNode": 8})
    values = values_of(runtime_container(rendered(doc)))
    assert ("NCCL_IB_DISABLE" in values) is probe_disabled
    assert values["NCCL_P2P_LEVEL"] == "SYS" and values["NCCL_PROTO"] == "^LL128"


def test_placement_reaches_the_pod_and_the_gpu_count_is_per_pod():
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    doc = document(
        target={"model": "/models/t", "tensorParallelSize": 4},
        draft={"model": "/models/d", "tensorParallelSize": 1},
        placement={
            "gpusPerNode": 8,
            "gpuResourceName": "amd.com/gpu",
            "nodeSelector": {"pool": "gpu", "accel": "h200"},
            "tolerations": tolerations,
        },
        runtime={"resources": {"limits": {"memory": "64Gi"}, "requests": {"cpu": 8}}},
    )
    manifests = rendered(doc)
    spec, c = pod_spec(manifests), runtime_container(manifests)
    assert spec["nodeSelector"] == {"accel": "h200", "pool": "gpu"}
    assert spec["tolerations"] == tolerations
    assert "affinity" not in spec
    assert c["resources"] == {
        "limits": {"amd.com/gpu": "4", "memory": "64Gi"},
        "requests": {"amd.com/gpu": "4", "cpu": "8"},
    }


def test_no_placement_leaves_the_scheduler_fields_unset():
    spec = pod_spec(rendered(document()))
    assert not {"nodeSelector", "tolerations", "affinity", "initContainers"} & set(spec)


def test_ports_and_mounts_of_the_specdecode_launcher():
    manifests = rendered(document(runtime={"port": 8000, "controlPort": 8001, "modelVolume": {"emptyDir": {}}}))
    spec, c = pod_spec(manifests), runtime_container(manifests)
    assert c["ports"] == [
        {"name": "http", "containerPort": 8000, "protocol": "TCP"},
        {"name": "control", "containerPort": 8001, "protocol": "TCP"},
    ]
    assert "args" not in c  # the launcher reads everything from runtime.yaml
    assert mounts_of(c)["models"] == {"name": "models", "mountPath": "/models", "readOnly": True}
    assert volumes_of(spec)["models"] == {"name": "models", "emptyDir": {}}
    assert volumes_of(spec)["control-token"] == {
        "name": "control-token",
        "secret": {"secretName": names.control_secret("m"), "optional": True},
    }
    assert mounts_of(c)["control-token"]["readOnly"] is True


def test_workers_of_a_group_serve_no_http_and_drain_nothing_but_run_the_same_launcher():
    doc = document(
        target={"model": "/models/t", "tensorParallelSize": 16}, placement={"gpusPerNode": 8, "interconnect": "NVLink"}
    )
    lws = workload(rendered(doc))["spec"]["leaderWorkerTemplate"]
    (leader,) = lws["leaderTemplate"]["spec"]["containers"]
    (worker,) = lws["workerTemplate"]["spec"]["containers"]
    for key in ("startupProbe", "readinessProbe", "livenessProbe", "ports", "lifecycle"):
        assert key in leader and key not in worker
    assert {k: v for k, v in leader.items() if k not in worker} == {
        k: leader[k] for k in ("startupProbe", "readinessProbe", "livenessProbe", "ports", "lifecycle")
    }
    assert worker["command"] == leader["command"] and worker["env"] == leader["env"]


# --- the manifests as YAML ----------------------------------------------------------------------------------------


def test_yaml_output_reads_back_to_the_same_objects_in_rendered_key_order():
    manifests = rendered(
        document(target=HF_TARGET, draft=HF_DRAFT, modelCache={"tokenSecretRef": {"name": "hf"}}),
        RenderOptions(control_auth=AUTH),
    )
    text = to_yaml(manifests)
    assert list(yaml.safe_load_all(text)) == manifests
    first = next(yaml.safe_load_all(text))
    assert list(first) == list(manifests[0]) == ["apiVersion", "kind", "metadata", "automountServiceAccountToken"]


# --- runtime.yaml -------------------------------------------------------------------------------------------------


def runtime_yaml(manifests: list[dict]) -> RuntimeConfig:
    (cm,) = [m for m in manifests if m["kind"] == "ConfigMap"]
    return RuntimeConfig.from_yaml(cm["data"]["runtime.yaml"])


def test_runtime_yaml_carries_every_field_the_launcher_reads_even_when_it_is_not_the_default():
    doc = document(
        name="tree",
        target={"model": "/models/t", "tensorParallelSize": 4, "quantization": "fp8", "contextLength": 8192},
        draft={"model": "/models/d", "tensorParallelSize": 2, "algorithm": "EAGLE", "ranks": [2, 3]},
        speculative={
            "numSteps": 4,
            "eagleTopK": 3,
            "numDraftTokens": 9,
            "autotune": {"mode": "Rollout", "minSteps": 2, "maxSteps": 6},
        },
        nccl={"profile": "NVLink", "env": {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN"}},
        placement={"gpusPerNode": 4, "interconnect": "NVLink"},
        runtime={"port": 8000, "controlPort": 8001, "extraArgs": ["--mem-fraction-static=0.8"]},
    )
    cfg = runtime_yaml(rendered(doc))
    assert cfg.name == "tree"
    t, d, s = cfg.target, cfg.draft, cfg.speculative
    assert (t.model, t.tensor_parallel_size, t.quantization, t.context_length) == ("/models/t", 4, "fp8", 8192)
    assert (d.model, d.tensor_parallel_size, d.algorithm, d.ranks) == ("/models/d", 2, "EAGLE", [2, 3])
    assert (s.num_steps, s.eagle_top_k, s.num_draft_tokens) == (4, 3, 9)
    assert (s.autotune.mode, s.autotune.min_steps, s.autotune.max_steps) == ("Rollout", 2, 6)
    assert s.candidate_steps and all(2 <= k <= 6 for k in s.candidate_steps) and 4 in s.candidate_steps
    assert (cfg.nccl.profile, cfg.nccl.env) == ("NVLink", {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN"})
    assert (cfg.server.port, cfg.server.control_port) == (8000, 8001)
    assert (cfg.topology.nodes, cfg.topology.gpus_per_node, cfg.topology.interconnect) == (1, 4, "NVLink")
    assert cfg.extra_args == ["--mem-fraction-static=0.8"]


@pytest.mark.parametrize("tuned,expected", [(None, 4), (2, 2), (6, 6)])
def test_the_tuners_step_count_replaces_the_starting_one_only_when_given(tuned, expected):
    doc = document(speculative={"numSteps": 4, "autotune": {"mode": "Rollout", "minSteps": 2, "maxSteps": 6}})
    cfg = runtime_yaml(rendered(doc, RenderOptions(tuned_steps=tuned)))
    assert (cfg.speculative.num_steps, cfg.speculative.num_draft_tokens) == (expected, expected + 1)


@pytest.mark.parametrize("tp,per_node,nodes", [(4, 8, 1), (8, 8, 1), (16, 8, 2), (32, 8, 4), (2, 1, 2)])
def test_a_group_spans_as_many_nodes_as_its_target_tp_needs(tp, per_node, nodes):
    doc = document(
        target={"model": "/models/t", "tensorParallelSize": tp},
        placement={"gpusPerNode": per_node, "interconnect": "NVLink"},
    )
    manifests = rendered(doc)
    assert runtime_yaml(manifests).topology.nodes == nodes
    w = workload(manifests)
    if nodes == 1:
        assert w["kind"] == "Deployment"
        assert runtime_container(manifests)["resources"]["limits"]["nvidia.com/gpu"] == str(tp)
    else:
        assert w["spec"]["leaderWorkerTemplate"]["size"] == nodes
        assert runtime_container(manifests)["resources"]["limits"]["nvidia.com/gpu"] == str(per_node)


def test_json_output_is_one_v1_list_of_the_manifests():
    """``specdecode render -o json``: a v1 List, which ``kubectl apply -f`` takes as its items."""
    manifests = rendered(document())
    assert json.loads(to_json(manifests)) == {"apiVersion": "v1", "kind": "List", "items": manifests}


def test_the_selector_string_selects_exactly_the_serving_pods():
    """The label selector the status reports (scale subresource) and pod listings use: an equality selector, as the
    API server parses it, matching the serving pods' labels and the workload's own selector, and no other object's
    pods."""
    manifests = rendered(document(name="web"), RenderOptions())
    wanted = dict(term.split("=", 1) for term in names.selector_string("web").split(","))
    assert wanted == workload(manifests)["spec"]["selector"]["matchLabels"]
    pod_labels = workload(manifests)["spec"]["template"]["metadata"]["labels"]
    assert wanted.items() <= pod_labels.items()
    other = workload(rendered(document(name="other")))["spec"]["template"]["metadata"]["labels"]
    assert not wanted.items() <= other.items()  # another object's pods in the namespace are not counted


def test_served_calibration_reaches_runtime_yaml_only_when_asked_for():
    doc = yaml.safe_load(EXAMPLE.read_text())
    plain = runtime_config(SpecDecodeDeployment.model_validate(doc))
    assert plain.cost_probe is None and "costProbe" not in plain.to_yaml()
    doc["spec"].setdefault("runtime", {})["servedCalibration"] = {"batches": [1, 8, 32], "tokens": 32}
    cfg = RuntimeConfig.from_yaml(runtime_config(SpecDecodeDeployment.model_validate(doc)).to_yaml())
    served = cfg.cost_probe.served
    assert (served.batches, served.tokens, served.timeout_seconds) == ([1, 8, 32], 32, 300.0)
    assert cfg.cost_probe.enabled  # the stage replays stay on
