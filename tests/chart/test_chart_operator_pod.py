"""The operator Deployment: PodSecurity `restricted`, probes, resources, flags, peering and the PDB."""

import pytest

from chartlib import COMBOS, of_kind, one, render, render_notes


def pod_spec(values=None):
    return one(render(values), "Deployment")["spec"]["template"]["spec"]


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_pod_meets_restricted_pod_security(combo):
    spec = pod_spec(COMBOS[combo])
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"]["type"] == "RuntimeDefault"
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(forbidden)
    assert all("hostPath" not in v for v in spec.get("volumes", []))
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert not sc.get("privileged")
        assert all(p.get("hostPort") is None for p in c.get("ports", []))


def test_container_has_resources_and_probes_on_the_liveness_port():
    c = pod_spec()["containers"][0]
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert f"--liveness-port={ports['healthz']}" in c["args"]
    assert env(c)["SPECDECODE_METRICS_PORT"] == str(ports["metrics"])
    assert {v["mountPath"] for v in c["volumeMounts"]} == {"/tmp"}  # the only writable path


def env(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def operator_config(values=None):
    """The OperatorConfig the operator builds from the environment the chart gives it."""
    from specdecode_operator.opconfig import OperatorConfig

    c = pod_spec(values)["containers"][0]
    return OperatorConfig.from_env({k: v for k, v in env(c).items() if k.startswith("SPECDECODE_") and v is not None})


def test_environment_is_read_by_opconfig_as_intended():
    cfg = operator_config(COMBOS["overrides"])
    assert cfg.namespaces == () and cfg.standalone is False and cfg.peering_name == "sd-peering"
    assert cfg.default_image == "registry.example.com/sd/runtime@sha256:" + "a" * 64
    assert cfg.operator_namespace == "specdecode-system"
    assert cfg.metrics_port == 8080
    ns = operator_config(COMBOS["namespaced-single"])
    assert ns.namespaces == ("team-a",) and ns.standalone is True
    assert operator_config(COMBOS["namespaced"]).namespaces == ("team-a", "team-b")
    assert operator_config(COMBOS["metrics-off"]).metrics_port == 0
    assert operator_config(COMBOS["monitoring-on"]).metrics_port == 9090


def test_operator_pod_labels_match_what_the_operator_selects_on():
    """The runtime's NetworkPolicy admits the operator by opconfig.operator_labels."""
    from specdecode_operator.opconfig import OperatorConfig

    labels = one(render(), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert dict(OperatorConfig().operator_labels).items() <= labels.items()


def test_flags_parse_with_the_operator_cli():
    from specdecode_operator import cli

    parser = cli.build_parser()
    c = pod_spec(COMBOS["overrides"])["containers"][0]
    assert c["image"] == "registry.example.com:5000/sd/op:1.2.3"
    assert "--log-level=debug" in c["args"]
    try:
        parser.parse_args(["operator", "run", "--help"])
    except SystemExit as e:
        if e.code != 0:
            pytest.skip("`specdecode operator run` is not registered in this checkout yet")
    parser.parse_args(["operator", "run", *c["args"]])  # SystemExit(2) on an unknown flag


def test_multiple_replicas_use_peering_single_replica_does_not():
    docs = render({"replicaCount": 2})
    peering = one(docs, "ClusterKopfPeering")["metadata"]["name"]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert env(container)["SPECDECODE_PEERING_NAME"] == peering and env(container)["SPECDECODE_STANDALONE"] == "false"
    single = render(COMBOS["single-replica"])
    assert not of_kind(single, "ClusterKopfPeering") and not of_kind(single, "PodDisruptionBudget")
    assert env(one(single, "Deployment")["spec"]["template"]["spec"]["containers"][0])["SPECDECODE_STANDALONE"] == "true"


def test_namespaced_peering_is_one_kopfpeering_per_watched_namespace():
    docs = render(COMBOS["namespaced"])
    assert sorted(p["metadata"]["namespace"] for p in of_kind(docs, "KopfPeering")) == ["team-a", "team-b"]
    assert not of_kind(docs, "ClusterKopfPeering")


def test_pdb_selects_the_operator_pods():
    docs = render({"replicaCount": 3})
    pdb, dep = one(docs, "PodDisruptionBudget"), one(docs, "Deployment")
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


def test_metrics_service_targets_the_metrics_port():
    docs = render(COMBOS["monitoring-on"])
    svc, sm = one(docs, "Service"), one(docs, "ServiceMonitor")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["metadata"]["labels"]["release"] == "kps"


def test_notes_give_next_steps_and_the_crd_upgrade_command():
    notes = render_notes()
    assert "kubectl apply --server-side -f" in notes and "rollout status" in notes
    assert "team-a" in render_notes(COMBOS["namespaced"])
