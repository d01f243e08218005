"""Tenant isolation of the rendered runtime pods: their own ServiceAccount with no token unless a feature needs one,
no shared control token in ServiceAccount step-control mode, and a control port that only the operator's pods may
reach: every render that opens a control port carries the NetworkPolicy that guards it, and that policy, evaluated
as Kubernetes defines NetworkPolicy (``netpol.py``), admits no other pod to it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from specdecode_operator.api.validate import InvalidSpec, parse
from specdecode_operator.render import RenderOptions, names, render
from specdecode_operator.render.control_auth import ControlAuth
from specdecode_runtime.contract.config import TOKEN_MOUNT_DIR
from tests.render.netpol import Pod, admits

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
AUTH = ControlAuth(
    "https://kubernetes.default.svc", "specdecode-runtime", ("system:serviceaccount:ops:specdecode-operator",)
)
OPERATOR_NS = "ops"
OPERATOR_LABELS = {"app.kubernetes.io/name": "specdecode-operator", "app.kubernetes.io/instance": "sd"}
MODES = ("Off", "Live", "Rollout")


def templates(manifests: list[dict]) -> list[dict]:
    """Every pod template: the Deployment's, or the LeaderWorkerSet's leader and worker templates."""
    out = []
    for m in manifests:
        if m["kind"] == "Deployment":
            out.append(m["spec"]["template"])
        elif m["kind"] == "LeaderWorkerSet":
            lwt = m["spec"]["leaderWorkerTemplate"]
            out += [lwt["leaderTemplate"], lwt["workerTemplate"]]
    assert out, "no workload rendered"
    return out


def variants():
    """Each example with each launcher, autotune mode and step-control mode the API accepts."""
    for example, launcher, mode, auth in itertools.product(EXAMPLES, ("specdecode", "sglang"), MODES, (None, AUTH)):
        doc = yaml.safe_load(example.read_text())
        doc["spec"].setdefault("runtime", {})["launcher"] = launcher
        doc["spec"].setdefault("speculative", {})["autotune"] = {
            **(doc["spec"]["speculative"].get("autotune") or {}),
            "mode": mode,
        }
        if launcher == "sglang":
            if mode != "Off":
                continue  # refused by the CRD: SGLang exports nothing the tuner reads
            doc["spec"]["draft"]["tensorParallelSize"] = doc["spec"]["target"]["tensorParallelSize"]
            doc["spec"]["draft"].pop("ranks", None)  # it runs the draft on the whole target group
        try:
            parse(doc)
        except InvalidSpec:
            continue  # e.g. hf:// models, which the stock SGLang launcher cannot fetch
        yield (
            pytest.param(
                doc,
                RenderOptions(operator_namespace=OPERATOR_NS, operator_labels=OPERATOR_LABELS, control_auth=auth),
                id=f"{example.stem}-{launcher}-{mode}-{'sa' if auth else 'secret'}",
            )
        )


VARIANTS = list(variants())


def rendered(doc: dict, options: RenderOptions) -> list[dict]:
    return render(parse(doc), options)


@pytest.mark.parametrize("doc,options", VARIANTS)
def test_runtime_pods_run_as_their_own_service_account_with_no_token_unless_one_is_projected(doc, options):
    manifests = rendered(doc, options)
    name = doc["metadata"]["name"]
    (account,) = [m for m in manifests if m["kind"] == "ServiceAccount"]
    assert account["metadata"]["name"] == names.service_account(name)
    assert account["metadata"]["labels"]["app.kubernetes.io/instance"] == name
    # no rights come with it (no RBAC object is rendered at all), no token is mounted from it by default
    assert account["automountServiceAccountToken"] is False
    assert set(account) == {"apiVersion", "kind", "metadata", "automountServiceAccountToken"}
    assert not [m for m in manifests if m["apiVersion"].startswith("rbac.authorization.k8s.io")]
    controlled = options.control_auth is not None and doc["spec"]["runtime"]["launcher"] == "specdecode"
    for template in templates(manifests):
        spec = template["spec"]
        assert spec["serviceAccountName"] == names.service_account(name)
        assert spec["automountServiceAccountToken"] is False
        projected = [
            s
            for v in spec["volumes"]
            for s in (v.get("projected") or {}).get("sources") or []
            if "serviceAccountToken" in s
        ]
        # a token only where the runtime reads the issuer's keys with it: ServiceAccount step control
        assert len(projected) == (1 if controlled else 0), spec["volumes"]


@pytest.mark.parametrize("doc,options", VARIANTS)
def test_service_account_step_control_mounts_no_shared_control_token(doc, options):
    manifests = rendered(doc, options)
    secret = names.control_secret(doc["metadata"]["name"])
    for template in templates(manifests):
        spec = template["spec"]
        secrets = [v for v in spec["volumes"] if (v.get("secret") or {}).get("secretName") == secret]
        mounts = [m for c in spec["containers"] for m in c["volumeMounts"] if m["mountPath"] == TOKEN_MOUNT_DIR]
        if options.control_auth is not None or doc["spec"]["runtime"]["launcher"] != "specdecode":
            assert secrets == [] and mounts == [], "a Secret of that name would set a shared token for the pods"
        else:  # Secret step control: the Secret the operator writes, optional so an offline render starts
            assert [v["secret"]["optional"] for v in secrets] == [True] and len(mounts) == 1


def probes(name: str, namespace: str) -> dict[str, tuple[Pod, bool]]:
    """Source pods, and whether the control port must admit each (the multi-node group's own pods: see below)."""
    runtime = names.selector(name)
    return {
        "the operator": (Pod(OPERATOR_NS, dict(OPERATOR_LABELS)), True),
        "the operator, with more labels": (Pod(OPERATOR_NS, {**OPERATOR_LABELS, "pod-template-hash": "x"}), True),
        "operator labels in the tenant's namespace": (Pod(namespace, dict(OPERATOR_LABELS)), False),
        "operator labels in another namespace": (Pod("elsewhere", dict(OPERATOR_LABELS)), False),
        "another pod of the operator's namespace": (Pod(OPERATOR_NS, {"app": "other"}), False),
        "half the operator's labels": (Pod(OPERATOR_NS, {"app.kubernetes.io/name": "specdecode-operator"}), False),
        "a pod of the tenant's namespace": (Pod(namespace, {"app": "client"}), False),
        "another deployment's runtime pod": (Pod(namespace, names.selector(f"{name}-other")), False),
        "this deployment's labels in another namespace": (Pod("elsewhere", dict(runtime)), False),
        "a pod with no labels anywhere": (Pod("default"), False),
    }


@pytest.mark.parametrize("doc,options", VARIANTS)
def test_every_control_port_is_guarded_by_a_policy_that_admits_only_the_operator(doc, options):
    manifests = rendered(doc, options)
    name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    control_ports = {
        p["containerPort"]
        for t in templates(manifests)
        for c in t["spec"]["containers"]
        for p in c.get("ports") or []
        if p["name"] == "control"
    }
    service_ports = {
        p["port"] for m in manifests if m["kind"] == "Service" for p in m["spec"]["ports"] if p["name"] == "control"
    }
    policies = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    if doc["spec"]["speculative"]["autotune"]["mode"] == "Live":
        assert control_ports, "Live step control without a control port"
    if not control_ports:
        assert not service_ports and not policies
        return
    (policy,) = policies
    assert policy["metadata"]["name"] == names.network_policy(name)
    nodes = 1 if any(m["kind"] == "Deployment" for m in manifests) else 2
    http = doc["spec"]["runtime"].get("port", 30000)
    for template in templates(manifests):
        labels = template["metadata"]["labels"]
        # the policy isolates every runtime pod, leaders and workers alike
        assert admits(policy, labels, Pod("elsewhere", {"x": "y"}), -1) is False
        for port in control_ports | service_ports:
            for what, (source, expected) in probes(name, namespace).items():
                assert admits(policy, labels, source, port) is expected, f"{what} on the control port {port}"
            # A multi-node group's own pods reach every port of each other (NCCL and SGLang's distributed init use
            # ports chosen at run time), the control port included; a single-node deployment's pods do not.
            assert admits(policy, labels, Pod(namespace, dict(labels)), port) is (nodes > 1)
        # the serving port stays open to everyone
        assert admits(policy, labels, Pod("elsewhere", {}), http) is True
