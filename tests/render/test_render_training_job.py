"""The training Job of spec.draft.adaptation.training (render/training_job.py): a golden file for a GPU attempt from
pvc:// models, then what each setting controls: the bounds, restricted pod security, the owner, the mounts, the
two command lines (train, then the offline gate writing its summary to the termination message) and the defaults
it takes from placement."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import names, training_job
from specdecode_runtime.contract import adaptation as contract
from specdecode_runtime.contract.config import CAPTURE_MOUNT_DIR

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "training-job.yaml"
IMAGE = "ghcr.io/specdecode/runtime:test"
TRAINING = {
    "intervalSeconds": 3600,
    "maxSeconds": 1800,
    "maxSteps": 2000,
    "maxMemoryGiB": 60,
    "gpus": 1,
    "resources": {"limits": {"memory": "96Gi"}, "requests": {"cpu": 8, "memory": "64Gi"}},
    "minRatio": 1.05,
}
BASE = {
    "apiVersion": "specdecode.io/v1alpha1",
    "kind": "SpecDecodeDeployment",
    "metadata": {"name": "llama", "namespace": "llm", "uid": "0c5e-uid"},
    "spec": {
        "target": {"model": "pvc://weights/llama-8b", "tensorParallelSize": 8},
        "draft": {
            "model": "pvc://weights/eagle3",
            "tensorParallelSize": 1,
            "adaptation": {"enabled": True, "capture": {"claimName": "traffic"}, "training": TRAINING},
        },
        "speculative": {"numSteps": 5},
        "placement": {"nodeSelector": {"pool": "h200"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
    },
}


def sdd(*unset, **training):
    d = copy.deepcopy(BASE)
    d["spec"]["draft"]["adaptation"]["training"].update(training)
    for key in unset:
        d["spec"]["draft"]["adaptation"]["training"].pop(key)
    return parse(d)


def job(obj=None, serving="pvc://weights/eagle3", attempt=3):
    return training_job.training_job(obj or sdd(), serving, attempt, IMAGE)


def test_golden():
    text = yaml.safe_dump(job(), sort_keys=False, width=120)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), f"{GOLDEN} differs; rerun with UPDATE_GOLDEN=1 after reviewing the change"


def test_owned_labelled_and_bounded():
    j = job()
    md = j["metadata"]
    assert md["name"] == "llama-adapt-3" and md["namespace"] == "llm"
    assert md["ownerReferences"] == [
        {
            "apiVersion": "specdecode.io/v1alpha1",
            "kind": "SpecDecodeDeployment",
            "name": "llama",
            "uid": "0c5e-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert md["labels"] == {**names.labels("llama", "training"), training_job.ATTEMPT_LABEL: "3"}
    # not the serving pods' selector: a training pod never joins the Service
    assert j["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "training"
    spec = j["spec"]
    assert spec["activeDeadlineSeconds"] == 1800 and spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == training_job.FINISHED_TTL_SECONDS
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_a_long_name_stays_within_a_job_name():
    d = copy.deepcopy(BASE)
    d["metadata"]["name"] = "a" * 47
    assert len(job(parse(d), attempt=999_999_999)["metadata"]["name"]) <= 63


def test_restricted_pod_security():
    pod = job()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for c in pod["initContainers"] + pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
        assert "privileged" not in sc


def test_commands_train_from_the_serving_draft_then_gate_into_the_termination_message():
    pod = job()["spec"]["template"]["spec"]
    (train,), (gate,) = pod["initContainers"], pod["containers"]
    out = f"{CAPTURE_MOUNT_DIR}/adapt/llama/attempt-3"
    assert train["command"] == [
        *("specdecode-runtime", "adapt", "train", "--capture", CAPTURE_MOUNT_DIR),
        *("--target", "/mnt/pvc/weights/llama-8b", "--init-draft", "/mnt/pvc/weights/eagle3", "--out", out),
        *("--minutes", "20", "--device", "cuda", "--max-steps", "2000", "--max-memory-gb", "60"),
    ]
    assert gate["command"][:3] == ["specdecode-runtime", "adapt", "score"]
    args = gate["command"]
    assert args[args.index("--drafts") + 1 : args.index("--drafts") + 3] == ["/mnt/pvc/weights/eagle3", out]
    assert args[args.index("--min-ratio") + 1] == "1.05" and args[args.index("--steps") + 1] == "5"
    assert args[args.index("--summary") + 1] == contract.TERMINATION_LOG
    for c in (train, gate):
        assert c["terminationMessagePath"] == contract.TERMINATION_LOG
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert c["image"] == IMAGE


def test_an_adapted_serving_draft_is_the_init_draft():
    adapted = contract.attempt_dir("llama", 2)
    train = job(serving=adapted)["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert train[train.index("--init-draft") + 1] == adapted


def test_mounts_the_capture_claim_and_the_models_read_only():
    pod = job()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["capture"]["persistentVolumeClaim"] == {"claimName": "traffic"}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert not mounts[CAPTURE_MOUNT_DIR].get("readOnly")  # the candidate is written next to the records
    assert mounts["/mnt/pvc/weights"]["readOnly"] is True
    assert pod["initContainers"][0]["volumeMounts"] == pod["containers"][0]["volumeMounts"]


def test_gpus_resources_and_placement():
    c = job()["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == {
        "limits": {"memory": "96Gi", "nvidia.com/gpu": "1"},
        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
    }
    pod = job()["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "h200"} and pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    own = job(sdd(nodeSelector={"pool": "train"}, tolerations=[]))["spec"]["template"]["spec"]
    assert own["nodeSelector"] == {"pool": "train"} and "tolerations" not in own


def test_zero_gpus_trains_on_the_cpu():
    j = job(sdd("maxSteps", "maxMemoryGiB", "resources", gpus=0))
    c = j["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in c
    train = j["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert train[train.index("--device") + 1] == "cpu" and "--max-steps" not in train


def test_deterministic():
    assert job() == job()


@pytest.mark.parametrize("bad", ["hf://org/eagle3"])
def test_a_hub_draft_has_no_path(bad):
    with pytest.raises(ValueError, match="hub"):
        training_job.local_path(bad)
