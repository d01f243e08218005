"""Model sources end to end, on the API emulator and the real kube-apiserver: SpecDecodeDeployments whose models
come from a PersistentVolumeClaim or the hub are admitted, reconciled to SpecValid=True and rendered with the claim
mounted read-only in every pod (a LeaderWorkerSet's workers included) or the fetch init container; a form the API
does not know is refused at admission with the field and the accepted forms."""

from __future__ import annotations

import pytest

from tests.e2e.test_operator_e2e import APPS, LWS, sdd
from tests.k8s.cluster import ApiFailure, condition, wait_for


def pod_specs(workload: dict) -> list[dict]:
    if workload["kind"] == "LeaderWorkerSet" or "leaderWorkerTemplate" in workload["spec"]:
        lwt = workload["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]
    return [workload["spec"]["template"]["spec"]]


def test_pvc_models_mount_the_claim_read_only_in_every_pod_of_a_multi_node_group(cluster):
    body = sdd(
        "pvc",
        tp=16,
        draft_tp=2,
        target={"model": "pvc://model-store/ds/DeepSeek-V3.1", "tensorParallelSize": 16},
        draft={"model": "pvc://drafts/dsv3-eagle3", "tensorParallelSize": 2},
    )
    cluster.create_sdd(body)
    lws = wait_for(lambda: cluster.get(LWS, "leaderworkersets", "pvc"), what="LeaderWorkerSet pvc")
    wait_for(lambda: condition(cluster.get_sdd("pvc"), "SpecValid").get("status") == "True", what="SpecValid")
    specs = pod_specs(lws)
    assert len(specs) == 2
    for spec in specs:
        claims = {v["persistentVolumeClaim"]["claimName"]: v for v in spec["volumes"] if "persistentVolumeClaim" in v}
        assert set(claims) == {"model-store", "drafts"}
        assert all(v["persistentVolumeClaim"]["readOnly"] is True for v in claims.values())
        mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["/mnt/pvc/model-store"]["readOnly"] is True and mounts["/mnt/pvc/drafts"]["readOnly"] is True
        assert "initContainers" not in spec  # nothing to fetch
    runtime_yaml = cluster.get("v1", "configmaps", "pvc-runtime")["data"]["runtime.yaml"]
    assert "pvc://model-store/ds/DeepSeek-V3.1" in runtime_yaml  # the launcher resolves it in the pod


def test_hub_models_get_the_fetch_init_container_and_an_offline_runtime(cluster):
    body = sdd(
        "hub",
        target={"model": "hf://meta-llama/Llama-3.1-70B-Instruct@main", "tensorParallelSize": 8},
        draft={"model": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "tensorParallelSize": 1},
        modelCache={"sizeLimit": "300Gi", "tokenSecretRef": {"name": "hf-token"}},
    )
    cluster.create_sdd(body)
    deployment = wait_for(lambda: cluster.get(APPS, "deployments", "hub"), what="Deployment hub")
    wait_for(lambda: condition(cluster.get_sdd("hub"), "SpecValid").get("status") == "True", what="SpecValid")
    (spec,) = pod_specs(deployment)
    cache = next(v for v in spec["volumes"] if v["name"] == "model-cache")
    assert cache["emptyDir"]["sizeLimit"] == "300Gi"
    (fetch,) = spec["initContainers"]
    assert fetch["command"][:2] == ["specdecode-runtime", "fetch-models"]
    fetch_env = {e["name"]: e for e in fetch["env"]}
    assert fetch_env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
    assert "HF_HUB_OFFLINE" not in fetch_env
    runtime = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in runtime["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and "HF_TOKEN" not in env
    assert env["HF_HUB_CACHE"] == fetch_env["HF_HUB_CACHE"]["value"]
    cache_mount = next(m for m in runtime["volumeMounts"] if m["name"] == "model-cache")
    assert cache_mount["readOnly"] is True


@pytest.mark.parametrize(
    "field,model,fragment",
    [
        (
            "target",
            "s3://bucket/llama",
            "target.model must be an absolute path, pvc://CLAIM/PATH or hf://ORG/NAME[@REVISION]",
        ),
        ("target", "meta-llama/Llama-3-8B", "for a Hugging Face Hub repository use hf://meta-llama/Llama-3-8B"),
        ("draft", "models/eagle", "draft.model: models/eagle is not an absolute path"),
        ("draft", "pvc://Models/x", "draft.model: pvc:// takes pvc://CLAIM/PATH"),
        ("draft", "hf://only-a-name", "draft.model: hf:// takes hf://ORG/NAME[@REVISION]"),
    ],
)
def test_unknown_model_forms_are_refused_at_admission(cluster, field, model, fragment):
    body = sdd("bad-model")
    body["spec"][field]["model"] = model
    with pytest.raises(ApiFailure) as err:
        cluster.create_sdd(body)
    assert err.value.status == 422
    assert fragment in err.value.body["message"], err.value.body["message"]
