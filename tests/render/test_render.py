"""Renderer behaviour: golden files, determinism, strict schema validity, and what each typed field controls."""

import copy
import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import CHILD_KINDS, RenderOptions, names, render, to_yaml
from specdecode_runtime.contract.config import RuntimeConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# Inputs rendered like the examples (golden files, schema checks) that show a feature rather than a setup to copy.
CASES = sorted((ROOT / "tests" / "render" / "cases").glob("*.yaml"))
RENDERED = EXAMPLES + CASES
GOLDEN = ROOT / "tests" / "golden"
BUILTIN = {"v1", "apps/v1", "policy/v1", "networking.k8s.io/v1"}


def load(path):
    return parse(yaml.safe_load(path.read_text()))


def by_kind(manifests):
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def container(manifests):
    for m in manifests:
        if m["kind"] == "Deployment":
            return m["spec"]["template"]["spec"]["containers"][0]
        if m["kind"] == "LeaderWorkerSet":
            return m["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    raise AssertionError("no workload")


@pytest.mark.parametrize("example", RENDERED, ids=lambda p: p.stem)
def test_golden(example):
    text = to_yaml(render(load(example)))
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; rerun with UPDATE_GOLDEN=1 after reviewing the change"


@pytest.mark.parametrize("example", RENDERED, ids=lambda p: p.stem)
def test_render_is_byte_identical_across_runs(example):
    assert to_yaml(render(load(example))) == to_yaml(render(load(example)))


@pytest.mark.parametrize("version", ["1.30", "1.33"])
@pytest.mark.parametrize("example", RENDERED, ids=lambda p: p.stem)
def test_builtin_objects_pass_strict_schema(example, version):
    for m in render(load(example)):
        if m["apiVersion"] in BUILTIN:
            kubernetes_validate.validate(m, version, strict=True)


@pytest.mark.parametrize("example", RENDERED, ids=lambda p: p.stem)
def test_custom_objects_pass_upstream_crd_schemas(example):
    from tests.upstream_schemas import validate_custom

    seen = 0
    for m in render(load(example)):
        if m["apiVersion"] not in BUILTIN:
            validate_custom(m)
            seen += 1
    assert seen or "pcie8" not in example.stem


def test_every_rendered_kind_is_declared_for_cleanup():
    declared = {(a, k) for a, k, _, _ in CHILD_KINDS}
    for example in RENDERED:
        for m in render(load(example)):
            assert (m["apiVersion"], m["kind"]) in declared


def test_single_node_deployment_gets_all_gpus_and_safe_rollout():
    ms = render(load(ROOT / "examples/pcie8-glm5-eagle3.yaml"))
    dep = by_kind(ms)[("Deployment", "glm5-pcie")]
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    c = container(ms)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert c["command"] == ["specdecode-runtime", "launch", "--config", "/etc/specdecode/runtime.yaml"]
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "models"
    affinity = dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"


@pytest.mark.parametrize(
    "example,kind,path",
    [
        ("pcie8-glm5-eagle3.yaml", "Deployment", ("strategy", "rollingUpdate")),
        ("multinode-tp16-lws.yaml", "LeaderWorkerSet", ("rolloutStrategy", "rollingUpdateConfiguration")),
    ],
)
def test_spec_rollout_reaches_the_workload_and_defaults_to_surge_one(example, kind, path):
    def rolling(obj):
        (workload,) = [m for m in render(parse(obj)) if m["kind"] == kind]
        return workload["spec"][path[0]][path[1]]

    obj = yaml.safe_load((ROOT / "examples" / example).read_text())
    assert rolling(obj) == {"maxSurge": 1, "maxUnavailable": 0}
    obj["spec"]["rollout"] = {"maxSurge": 0, "maxUnavailable": "50%"}
    assert rolling(obj) == {"maxSurge": 0, "maxUnavailable": "50%"}


def test_multi_node_renders_leader_worker_set_wired_from_lws_labels():
    ms = render(load(ROOT / "examples/multinode-tp16-lws.yaml"))
    kinds = {m["kind"] for m in ms}
    assert "LeaderWorkerSet" in kinds and "Deployment" not in kinds
    lws = by_kind(ms)[("LeaderWorkerSet", "dsv3-tp16")]["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 2
    leader = lws["leaderTemplate"]["spec"]["containers"][0]
    worker = lws["workerTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    env = {e["name"]: e for e in leader["env"]}
    assert env["SPECDECODE_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"].endswith(
        "['leaderworkerset.sigs.k8s.io/worker-index']"
    )
    order = [e["name"] for e in leader["env"]]
    assert order.index("SPECDECODE_GROUP_INDEX") < order.index("SPECDECODE_DIST_INIT_ADDR")
    cfg = RuntimeConfig.from_yaml(by_kind(ms)[("ConfigMap", "dsv3-tp16-runtime")]["data"]["runtime.yaml"])
    assert cfg.topology.nodes == 2 and cfg.draft.ranks == [0, 1]
    svc = by_kind(ms)[("Service", "dsv3-tp16")]
    assert svc["spec"]["selector"][names.LWS_WORKER_INDEX_LABEL] == "0"


def test_nccl_profile_then_user_env_win_but_multicast_stays_off():
    obj = yaml.safe_load((ROOT / "examples/pcie8-glm5-eagle3.yaml").read_text())
    obj["spec"]["nccl"]["env"] = {"NCCL_P2P_LEVEL": "PHB"}
    obj["spec"]["runtime"]["env"] = [
        {"name": "NCCL_MIN_NCHANNELS", "value": "16"},
        {"name": "NCCL_NVLS_ENABLE", "value": "1"},
    ]
    env = {e["name"]: e.get("value") for e in container(render(parse(obj)))["env"]}
    assert env["NCCL_P2P_LEVEL"] == "PHB"  # nccl.env beats the profile's SYS
    assert env["NCCL_MIN_NCHANNELS"] == "16"  # runtime.env beats both
    assert env["NCCL_PROTO"] == "^LL128"  # never forced LL128 on PCIe
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert len([e for e in container(render(parse(obj)))["env"] if e["name"] == "NCCL_NVLS_ENABLE"]) == 1


def test_auto_profile_follows_interconnect():
    ms = render(load(ROOT / "examples/h200-nvlink-rollout.yaml"))
    env = {e["name"] for e in container(ms)["env"]}
    assert "NCCL_P2P_LEVEL" not in env and "NCCL_IB_DISABLE" not in env
    cfg = RuntimeConfig.from_yaml(by_kind(ms)[("ConfigMap", "llama-h200-runtime")]["data"]["runtime.yaml"])
    assert cfg.nccl.profile == "NVLink"


def test_tuned_steps_change_config_and_roll_pods_without_touching_spec():
    sdd = load(ROOT / "examples/h200-nvlink-rollout.yaml")
    before = copy.deepcopy(sdd.model_dump())
    a = by_kind(render(sdd))
    b = by_kind(render(sdd, RenderOptions(tuned_steps=5)))
    assert sdd.model_dump() == before
    cfg = RuntimeConfig.from_yaml(b[("ConfigMap", "llama-h200-runtime")]["data"]["runtime.yaml"])
    assert cfg.speculative.num_steps == 5 and cfg.speculative.num_draft_tokens == 6
    hash_a = a[("Deployment", "llama-h200")]["spec"]["template"]["metadata"]["annotations"][
        names.CONFIG_HASH_ANNOTATION
    ]
    hash_b = b[("Deployment", "llama-h200")]["spec"]["template"]["metadata"]["annotations"][
        names.CONFIG_HASH_ANNOTATION
    ]
    assert hash_a != hash_b
    # tuned values stay inside the autotune bounds (maxSteps 5)
    c = by_kind(render(sdd, RenderOptions(tuned_steps=9)))
    assert (
        RuntimeConfig.from_yaml(c[("ConfigMap", "llama-h200-runtime")]["data"]["runtime.yaml"]).speculative.num_steps
        == 5
    )


def test_stock_sglang_launcher_renders_sglang_args_as_a_list():
    obj = yaml.safe_load((ROOT / "examples/h200-nvlink-rollout.yaml").read_text())
    obj["spec"]["runtime"]["launcher"] = "sglang"
    obj["spec"]["draft"] = {"model": "/models/d", "tensorParallelSize": 4}
    obj["spec"]["speculative"]["autotune"] = {"mode": "Off"}  # stock SGLang exports nothing the tuner reads
    ms = render(parse(obj))
    c = container(ms)
    assert c["command"] == ["python3", "-m", "sglang.launch_server"]
    args = c["args"]
    assert args[args.index("--speculative-num-steps") + 1] == "3"
    assert args[args.index("--tp-size") + 1] == "4"
    assert c["image"].startswith("lmsysorg/sglang:")
    assert "NetworkPolicy" not in {m["kind"] for m in ms}


def test_network_policy_limits_control_port_to_the_operator():
    ms = render(load(ROOT / "examples/pcie8-glm5-eagle3.yaml"), RenderOptions(operator_namespace="ops"))
    np = by_kind(ms)[("NetworkPolicy", "glm5-pcie-control")]["spec"]
    control = [r for r in np["ingress"] if r.get("ports") == [{"protocol": "TCP", "port": 30001}]][0]
    assert control["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ops"}


def test_service_monitor_only_when_enabled():
    obj = yaml.safe_load((ROOT / "examples/pcie8-glm5-eagle3.yaml").read_text())
    assert "ServiceMonitor" in {m["kind"] for m in render(parse(obj))}
    obj["spec"]["monitoring"]["serviceMonitor"] = False
    assert "ServiceMonitor" not in {m["kind"] for m in render(parse(obj))}


def test_input_hash_changes_only_with_content():
    sdd = load(ROOT / "examples/pcie8-glm5-eagle3.yaml")
    a, b = by_kind(render(sdd)), by_kind(render(sdd))
    for key in a:
        assert (
            a[key]["metadata"]["annotations"][names.INPUT_HASH_ANNOTATION]
            == b[key]["metadata"]["annotations"][names.INPUT_HASH_ANNOTATION]
        )
    sdd.spec.replicas = 3
    c = by_kind(render(sdd))
    hashes = lambda d, k: d[k]["metadata"]["annotations"][names.INPUT_HASH_ANNOTATION]
    assert hashes(a, ("Deployment", "glm5-pcie")) != hashes(c, ("Deployment", "glm5-pcie"))
    assert hashes(a, ("ConfigMap", "glm5-pcie-runtime")) == hashes(c, ("ConfigMap", "glm5-pcie-runtime"))


def test_service_account_step_control_tells_the_pods_whom_to_accept_and_projects_their_own_token():
    from specdecode_operator.render.control_auth import API_MOUNT_DIR, ControlAuth

    auth = ControlAuth(
        "https://kubernetes.default.svc",
        "specdecode-runtime",
        ("system:serviceaccount:specdecode-system:specdecode-operator",),
    )
    sdd = load(ROOT / "examples/pcie8-glm5-eagle3.yaml")
    plain = container(render(sdd))
    c = container(render(sdd, RenderOptions(control_auth=auth)))
    env = {e["name"]: e.get("value") for e in c["env"]}
    # the deployment's own audience: a token for another deployment is refused by these pods
    own = f"{auth.audience}/{sdd.metadata.namespace}/{sdd.metadata.name}/{sdd.metadata.uid or ''}"
    assert env["SPECDECODE_CONTROL_ISSUER"] == auth.issuer and env["SPECDECODE_CONTROL_AUDIENCE"] == own
    assert env["SPECDECODE_CONTROL_SUBJECTS"] == auth.subjects[0]
    assert env["SPECDECODE_CONTROL_TOKEN_FILE"] == f"{API_MOUNT_DIR}/token"
    assert not any(n.startswith("SPECDECODE_CONTROL") for n in (e["name"] for e in plain["env"]))
    dep = by_kind(render(sdd, RenderOptions(control_auth=auth)))[("Deployment", "glm5-pcie")]
    pod = dep["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False  # only the projected token, where the runtime reads it
    (projected,) = [v["projected"] for v in pod["volumes"] if v["name"] == "control-issuer"]
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}} in projected["sources"]


def test_control_auth_mounts_the_projected_token_where_the_runtime_reads_it_and_keeps_the_other_mounts():
    from specdecode_operator.render.control_auth import API_MOUNT_DIR, ControlAuth

    auth = ControlAuth("https://kubernetes.default.svc", "specdecode-runtime", ("system:serviceaccount:a:b",))
    sdd = load(ROOT / "examples/pcie8-glm5-eagle3.yaml")
    plain = container(render(sdd))["volumeMounts"]
    mounts = container(render(sdd, RenderOptions(control_auth=auth)))["volumeMounts"]
    # the runtime's own mounts stay as they were, less the shared control token, which this mode does not accept
    assert mounts[: len(plain) - 1] == [m for m in plain if m["name"] != "control-token"]
    assert mounts[len(plain) - 1 :] == [{"name": "control-issuer", "mountPath": API_MOUNT_DIR, "readOnly": True}]


def test_gpu_product_is_required_inside_every_user_node_selector_term_and_the_rest_of_the_affinity_is_kept():
    """Node selector terms are ORed: the product must be ANDed into each of the user's terms (a term of its own
    would let a pod land on any node matching a user term); pod affinity and preferred terms pass through."""
    doc = yaml.safe_load((ROOT / "examples/pcie8-glm5-eagle3.yaml").read_text())
    product = doc["spec"]["placement"]["gpuProduct"]
    user_terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}], "matchFields": []},
    ]
    preferred = [{"weight": 1, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}]
    pod_affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    doc["spec"]["placement"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": user_terms},
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
        **pod_affinity,
    }
    dep = by_kind(render(parse(doc)))[("Deployment", "glm5-pcie")]
    affinity = dep["spec"]["template"]["spec"]["affinity"]
    gpu = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}
    node = affinity["nodeAffinity"]
    assert node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [*user_terms[0]["matchExpressions"], gpu]},
        {"matchExpressions": [*user_terms[1]["matchExpressions"], gpu], "matchFields": []},
    ]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert affinity["podAntiAffinity"] == pod_affinity["podAntiAffinity"]
    doc["spec"]["placement"].pop("gpuProduct")
    doc["spec"]["placement"]["affinity"] = {}
    assert "affinity" not in by_kind(render(parse(doc)))[("Deployment", "glm5-pcie")]["spec"]["template"]["spec"]
