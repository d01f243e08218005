"""spec.draft.adaptation in the rendered pods: with the capture on, every runtime pod (a Deployment's, and a
LeaderWorkerSet's leader and workers) mounts the claim read-write at the contract's directory and runtime.yaml
carries the capture section; off or absent, nothing of it is rendered."""

from __future__ import annotations

import copy

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import render
from specdecode_runtime.contract.config import CAPTURE_MOUNT_DIR, RuntimeConfig

CAPTURE = {"claimName": "traffic", "maxBytes": 1 << 31, "retentionSeconds": 3600, "sampleRatio": 0.25}


BASE = {
    "apiVersion": "specdecode.io/v1alpha1",
    "kind": "SpecDecodeDeployment",
    "metadata": {"name": "capture"},
    "spec": {
        "target": {"model": "/models/t", "tensorParallelSize": 8},
        "draft": {"model": "/models/d", "tensorParallelSize": 1},
    },
}


def doc(adaptation: dict | None, tp: int = 8) -> dict:
    d = copy.deepcopy(BASE)
    d["spec"]["target"]["tensorParallelSize"] = tp
    if adaptation is not None:
        d["spec"]["draft"]["adaptation"] = adaptation
    return d


def templates(manifests: list[dict]) -> list[dict]:
    out = []
    for m in manifests:
        if m["kind"] == "Deployment":
            out.append(m["spec"]["template"])
        elif m["kind"] == "LeaderWorkerSet":
            lws = m["spec"]["leaderWorkerTemplate"]
            out += [lws["leaderTemplate"], lws["workerTemplate"]]
    assert out
    return out


def runtime_yaml(manifests: list[dict]) -> str:
    cm = next(m for m in manifests if m["kind"] == "ConfigMap" and "runtime.yaml" in m.get("data", {}))
    return cm["data"]["runtime.yaml"]


@pytest.mark.parametrize("tp", [8, 16], ids=["deployment", "leaderworkerset"])
def test_capture_on_mounts_the_claim_and_configures_the_runtime(tp):
    manifests = render(parse(doc({"enabled": True, "capture": CAPTURE}, tp)))
    for t in templates(manifests):
        pod = t["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "capture")
        assert volume == {"name": "capture", "persistentVolumeClaim": {"claimName": "traffic"}}
        (container,) = [c for c in pod["containers"] if c["name"] == "runtime"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "capture")
        assert mount == {"name": "capture", "mountPath": CAPTURE_MOUNT_DIR}  # read-write
    text = runtime_yaml(manifests)
    assert yaml.safe_load(text)["capture"] == {
        "dir": CAPTURE_MOUNT_DIR,
        "maxBytes": 1 << 31,
        "retentionSeconds": 3600,
        "sampleRatio": 0.25,
    }
    cfg = RuntimeConfig.from_yaml(text)
    assert cfg.capture is not None and cfg.capture.sample_ratio == 0.25


@pytest.mark.parametrize(
    "adaptation",
    [None, {"enabled": False}, {"enabled": False, "capture": CAPTURE}],
    ids=["absent", "off", "off-with-claim"],
)
def test_capture_off_renders_nothing_of_it(adaptation):
    manifests = render(parse(doc(adaptation)))
    for t in templates(manifests):
        assert not [v for v in t["spec"]["volumes"] if v["name"] == "capture"]
        assert not [m for c in t["spec"]["containers"] for m in c["volumeMounts"] if m["name"] == "capture"]
    text = runtime_yaml(manifests)
    assert "capture" not in yaml.safe_load(text) and CAPTURE_MOUNT_DIR not in text


def test_capture_off_renders_exactly_what_no_adaptation_renders():
    assert render(parse(doc({"enabled": False, "capture": CAPTURE}))) == render(parse(doc(None)))


def test_the_config_hash_rolls_the_pods_when_the_capture_changes():
    def hashes(adaptation):
        return [t["metadata"]["annotations"] for t in templates(render(parse(doc(adaptation))))]

    assert hashes(None) != hashes({"enabled": True, "capture": CAPTURE})
