"""The operator pod (chart) and every rendered runtime pod meet the Pod Security Standard `restricted`, checked by
the table in pod_security.py; the one documented exception is a user's own hostPath model volume."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import RenderOptions
from specdecode_operator.render import render as render_sdd
from tests.chart.chartlib import COMBOS, one, render
from tests.chart.pod_security import violations

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def runtime_pods(sdd: dict) -> list[tuple[str, dict, dict]]:
    """(where, pod metadata, pod spec) of every pod template the renderer produces for ``sdd``."""
    out = []
    for m in render_sdd(parse(sdd), RenderOptions()):
        if m["kind"] == "Deployment":
            t = m["spec"]["template"]
            out.append((f"Deployment/{m['metadata']['name']}", t["metadata"], t["spec"]))
        elif m["kind"] == "LeaderWorkerSet":
            lwt = m["spec"]["leaderWorkerTemplate"]
            for role in ("leaderTemplate", "workerTemplate"):
                if role in lwt:
                    out.append((f"LeaderWorkerSet/{role}", lwt[role]["metadata"], lwt[role]["spec"]))
    return out


def user_model_volume(sdd: dict) -> str | None:
    volume = ((sdd.get("spec") or {}).get("runtime") or {}).get("modelVolume") or {}
    return next(iter(volume), None)


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_operator_pod_meets_restricted(combo):
    template = one(render(COMBOS[combo]), "Deployment")["spec"]["template"]
    assert violations(template["spec"], template["metadata"]) == []
    for c in template["spec"]["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_crd_upgrade_hook_pod_meets_restricted(combo):
    jobs = [d for d in render(COMBOS[combo]) if d["kind"] == "Job" and d["metadata"]["name"].endswith("-crd-upgrade")]
    if COMBOS[combo].get("rbac", {}).get("create") is False:
        assert jobs == []
        return
    (job,) = jobs
    template = job["spec"]["template"]
    assert violations(template["spec"], template["metadata"]) == []
    for c in template["spec"]["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_runtime_pods_meet_restricted(example):
    sdd = yaml.safe_load(example.read_text())
    pods = runtime_pods(sdd)
    assert pods
    for where, md, spec in pods:
        found = violations(spec, md)
        if user_model_volume(sdd) == "hostPath":  # the user's choice, listed in docs/operator.md
            found = [v for v in found if "volume models" not in v]
        assert found == [], where
        assert spec["automountServiceAccountToken"] is False
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
            assert writable == {"/dev/shm", "/tmp"}, where


def test_a_pvc_model_volume_keeps_the_runtime_pod_restricted():
    sdd = yaml.safe_load((ROOT / "examples" / "multinode-tp16-lws.yaml").read_text())
    sdd["spec"]["runtime"]["modelVolume"] = {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
    assert all(violations(spec, md) == [] for _, md, spec in runtime_pods(sdd))


COMPLIANT = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
    ],
    "volumes": [{"name": "v", "emptyDir": {}}],
}
BROKEN = {  # (path to set, value, control expected to report it)
    "privileged": (["containers", 0, "securityContext", "privileged"], True, "Privileged Containers"),
    "hostNetwork": (["hostNetwork"], True, "Host Namespaces"),
    "hostPath": (["volumes", 0], {"name": "v", "hostPath": {"path": "/"}}, "HostPath Volumes"),
    "nfs volume": (["volumes", 0], {"name": "v", "nfs": {"server": "s", "path": "/"}}, "Volume Types"),
    "hostPort": (["containers", 0, "ports"], [{"containerPort": 80, "hostPort": 80}], "Host Ports"),
    "escalation": (["containers", 0, "securityContext", "allowPrivilegeEscalation"], True, "Privilege Escalation"),
    "root allowed": (["securityContext", "runAsNonRoot"], False, "Running as Non-root"),
    "uid 0": (["containers", 0, "securityContext", "runAsUser"], 0, "Running as Non-root user"),
    "unconfined": (["securityContext", "seccompProfile"], {"type": "Unconfined"}, "Seccomp"),
    "no drop": (["containers", 0, "securityContext", "capabilities"], {}, "Capabilities (restricted)"),
    "SYS_ADMIN": (["containers", 0, "securityContext", "capabilities", "add"], ["SYS_ADMIN"], "Capabilities"),
    "unsafe sysctl": (["securityContext", "sysctls"], [{"name": "kernel.msgmax", "value": "1"}], "Sysctls"),
    "procMount": (["containers", 0, "securityContext", "procMount"], "Unmasked", "/proc Mount Type"),
    "selinux user": (["securityContext", "seLinuxOptions"], {"user": "root"}, "SELinux"),
    "host process": (["securityContext", "windowsOptions"], {"hostProcess": True}, "HostProcess"),
}


def test_the_checker_accepts_a_compliant_pod():
    assert violations(COMPLIANT) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_checker_reports_each_control(case):
    path, value, control = BROKEN[case]
    pod = copy.deepcopy(COMPLIANT)
    node = pod
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    found = violations(pod)
    assert any(v.startswith(control + ":") for v in found), found
