"""The operator Deployment: probes, resources, flags, leader election and the PDB (PodSecurity `restricted`:
test_pod_security.py)."""

from tests.chart.chartlib import COMBOS, of_kind, one, render, render_notes


def pod_spec(values=None):
    return one(render(values), "Deployment")["spec"]["template"]["spec"]


def test_container_has_resources_and_probes_on_the_liveness_port():
    c = pod_spec()["containers"][0]
    assert (
        c["resources"]["requests"]["cpu"]
        and c["resources"]["requests"]["memory"]
        and c["resources"]["limits"]["memory"]
    )
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert f"--liveness-port={ports['healthz']}" in c["args"]
    assert env(c)["SPECDECODE_METRICS_PORT"] == str(ports["metrics"])
    writable = {v["mountPath"] for v in c["volumeMounts"] if not v.get("readOnly")}
    assert writable == {"/tmp"}  # the only writable path (the step-control token is mounted read-only)


def env(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def operator_config(values=None):
    """The OperatorConfig the operator builds from the environment the chart gives it."""
    from specdecode_operator.config import OperatorConfig

    c = pod_spec(values)["containers"][0]
    return OperatorConfig.from_env({k: v for k, v in env(c).items() if k.startswith("SPECDECODE_") and v is not None})


def test_environment_is_read_by_the_operator_config_as_intended():
    cfg = operator_config(COMBOS["overrides"])
    assert cfg.namespaces == ()
    assert cfg.default_image == "registry.example.com/sd/runtime@sha256:" + "a" * 64
    assert cfg.operator_namespace == "specdecode-system"
    assert cfg.metrics_port == 8080
    ns = operator_config(COMBOS["namespaced-single"])
    assert ns.namespaces == ("team-a",)
    assert operator_config(COMBOS["namespaced"]).namespaces == ("team-a", "team-b")
    assert operator_config(COMBOS["metrics-off"]).metrics_port == 0
    assert operator_config(COMBOS["monitoring-on"]).metrics_port == 9090


def test_operator_pod_labels_match_what_the_operator_selects_on():
    """The runtime's NetworkPolicy admits the operator by OperatorConfig.operator_labels."""
    from specdecode_operator.config import OperatorConfig

    labels = one(render(), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert dict(OperatorConfig().operator_labels).items() <= labels.items()


def cli_config(values=None):
    """The OperatorConfig `specdecode operator run` builds from the chart's args and environment."""
    from specdecode_operator import cli
    from specdecode_operator.cli.operator import config_from_args

    c = pod_spec(values)["containers"][0]
    args = cli.build_parser().parse_args(["operator", "run", *c["args"]])  # SystemExit(2) on an unknown flag
    environment = {k: v for k, v in env(c).items() if k.startswith("SPECDECODE_") and v is not None}
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, environment, clear=True):
        return config_from_args(args)


def test_flags_parse_with_the_operator_cli():
    c = pod_spec(COMBOS["overrides"])["containers"][0]
    assert c["image"] == "registry.example.com:5000/sd/op:1.2.3"
    assert "--log-level=debug" in c["args"]
    cfg = cli_config(COMBOS["overrides"])
    assert cfg.leader_election is True and cfg.lease_name == "sd-lease"
    assert cfg.identity == "$(POD_NAME)"  # the kubelet expands it from the env var of that name
    assert env(c)["POD_NAME"] is None  # ... which comes from the downward API
    assert any(e["name"] == "POD_NAME" and e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" for e in c["env"])


def test_every_replica_count_elects_one_leader_by_lease():
    """Leader election is on for one replica too: a rolling update briefly runs two pods (maxSurge 1)."""
    for values in ({}, COMBOS["single-replica"], COMBOS["namespaced"]):
        docs = render(values)
        cfg = cli_config(values)
        assert cfg.leader_election is True and cfg.lease_name == "sd-specdecode-operator"
        assert cfg.operator_namespace == "specdecode-system"
        assert not of_kind(docs, "ClusterKopfPeering") and not of_kind(docs, "KopfPeering")
        role = next(r for r in of_kind(docs, "Role") if r["metadata"]["name"].endswith("-leader-election"))
        assert role["metadata"]["namespace"] == cfg.operator_namespace
        named = [r for r in role["rules"] if r.get("resourceNames")]
        assert named and all(r["resourceNames"] == [cfg.lease_name] for r in named)
    assert one(render(), "Deployment")["spec"]["replicas"] == 2


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
    assert "kubectl apply --server-side --force-conflicts -f" in notes and "rollout status" in notes
    assert "team-a" in render_notes(COMBOS["namespaced"])
