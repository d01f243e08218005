"""The chart with the real helm v4 and kubectl v1.36 binaries against a real kube-apiserver.

`helm lint`, `helm template | kubectl apply --dry-run=server` for every values combination, and a release's whole
life: install (the chart's CRDs included), upgrade with changed values, uninstall. Then what a user sees of the
CRD through kubectl: the `kubectl get sdd` columns and `kubectl explain sdd.spec --recursive`.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

from tests.chart.chartlib import CHART, COMBOS
from tests.k8s import tools
from tests.k8s.realapi import ApiServer, started_environment

TESTS = Path(__file__).resolve().parents[1]

UPSTREAM = TESTS / "data" / "upstream-crds"
RELEASE, NAMESPACE = "sd", "specdecode-system"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """An API server of this module's own: the release installs the chart's CRDs into a server that has none."""
    env = started_environment(tmp_path_factory.mktemp("envtest-helm"))
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="module")
def api(env):
    api = ApiServer(env.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory):
    return tmp_path_factory.mktemp("helm")


def kubectl(env, *args, **kw):
    return tools.run("kubectl", *args, kubeconfig=env.kubeconfig, **kw)


def helm(env, home, *args, **kw):
    return tools.run("helm", *args, kubeconfig=env.kubeconfig, home=home, **kw)


def test_helm_lint_is_clean(helm_home):
    done = tools.run("helm", "lint", "--strict", str(CHART), home=helm_home)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


def test_helm_lint_refuses_values_outside_the_schema(helm_home):
    done = tools.run("helm", "lint", "--strict", str(CHART), "--set", "replicaCount=two", home=helm_home, check=False)
    assert done.returncode != 0
    assert "replicaCount" in done.stdout + done.stderr


NO_HOOK = {"crds": {"upgrade": False}}


def template(env, home, tmp_path, values: dict) -> tuple[str, list[dict]]:
    """`helm template` of the release (templates only) with ``values``: the text and its objects."""
    values_file = tmp_path / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    text = helm(env, home, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(values_file)).stdout
    return text, [d for d in yaml.safe_load_all(text) if d]


def key(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata'].get('namespace', '')}/{doc['metadata']['name']}"


def existing(env, docs: list[dict]) -> set[str]:
    """Which of ``docs`` exist on the server (`kubectl get -f` of the rendered objects)."""
    if not docs:
        return set()
    out = kubectl(env, "get", "-f", "-", "-o", "json", "--ignore-not-found", input=yaml.safe_dump_all(docs)).stdout
    found = json.loads(out)["items"] if out.strip() else []
    return {key(d) for d in found}


def may_watch_sdds(api, namespace: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{RELEASE}-specdecode-operator",
            "resourceAttributes": {
                "group": "specdecode.io",
                "resource": "specdecodedeployments",
                "verb": "watch",
                "namespace": namespace,
            },
        },
    }
    return api.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]["allowed"]


def test_release_lifecycle_installs_crds_upgrades_and_uninstalls(env, api, helm_home, tmp_path):
    chart_crds = [d for f in sorted((CHART / "crds").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    assert "specdecodedeployments.specdecode.io" in {c["metadata"]["name"] for c in chart_crds}
    # install: the chart's crds/ go in first, then the templates
    # no Job controller on this API server: the CRD upgrade hook Job would never complete (it is tested on its own,
    # tests/chart/test_crd_upgrade_real.py)
    _, first = template(env, helm_home, tmp_path, NO_HOOK)
    helm(
        env,
        helm_home,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "crds.upgrade=false",
    )
    for crd in chart_crds:
        established = api.get_crd(crd["metadata"]["name"])["status"]["conditions"]
        assert {c["type"]: c["status"] for c in established}["Established"] == "True", crd["metadata"]["name"]
    assert existing(env, first) == {key(d) for d in first}
    status = json.loads(helm(env, helm_home, "status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed" and status["version"] == 1
    (deployment,) = [d for d in first if d["kind"] == "Deployment"]
    name = deployment["metadata"]["name"]
    live = api.call("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")
    assert live["spec"]["replicas"] == deployment["spec"]["replicas"] == 2
    assert "--log-level=info" in live["spec"]["template"]["spec"]["containers"][0]["args"]
    # the API server itself decides what the rendered ServiceAccount may do with the rendered RBAC
    assert may_watch_sdds(api, "team-x") and may_watch_sdds(api, "team-a")

    # upgrade with changed values: one replica, debug logs, one watched namespace
    api.ensure_namespace("team-a")
    changed = {
        "replicaCount": 1,
        "logLevel": "debug",
        "watch": {"allNamespaces": False, "namespaces": ["team-a"]},
        **NO_HOOK,
    }
    _, second = template(env, helm_home, tmp_path, changed)
    values_file = tmp_path / "changed.yaml"
    values_file.write_text(yaml.safe_dump(changed))
    helm(env, helm_home, "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(values_file))
    assert existing(env, second) == {key(d) for d in second}
    dropped = [d for d in first if key(d) not in {key(s) for s in second}]
    assert dropped, "the changed values should drop objects (a one-replica release has no PodDisruptionBudget)"
    assert existing(env, dropped) == set(), "helm upgrade left objects the new values no longer render"
    live = api.call("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")
    container = live["spec"]["template"]["spec"]["containers"][0]
    assert live["spec"]["replicas"] == 1 and "--log-level=debug" in container["args"]
    assert {e["name"]: e.get("value") for e in container["env"]}["SPECDECODE_NAMESPACES"] == "team-a"
    assert live["metadata"]["generation"] == 2
    assert may_watch_sdds(api, "team-a") and not may_watch_sdds(api, "team-x")
    history = json.loads(helm(env, helm_home, "history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [h["status"] for h in history] == ["superseded", "deployed"]

    # a value outside values.schema.json is refused before anything reaches the server
    bad = helm(
        env,
        helm_home,
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "logLevel=loud",
        check=False,
    )
    assert bad.returncode != 0 and "logLevel" in bad.stderr, bad.stderr
    assert api.call("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")["metadata"]["generation"] == 2

    # uninstall: every templated object goes; CRDs stay (helm never deletes them, nor the objects they hold)
    helm(env, helm_home, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "60s")
    assert existing(env, second) == set()
    for crd in chart_crds:
        api.get_crd(crd["metadata"]["name"])
    assert helm(env, helm_home, "list", "-n", NAMESPACE, "-q").stdout.strip() == ""


def install_prerequisite_crds(env, api):
    """What `--dry-run=server` of the templates needs: the chart's CRDs and the prometheus-operator ones."""
    crds = [d for f in sorted((CHART / "crds").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    crds += [
        yaml.safe_load((UPSTREAM / f"monitoring.coreos.com_{kind}.yaml").read_text())
        for kind in ("servicemonitors", "prometheusrules")
    ]
    for crd in crds:
        api.apply_crd(crd)


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_rendered_chart_is_accepted_by_a_server_side_dry_run(env, api, helm_home, combo):
    install_prerequisite_crds(env, api)
    for ns in ("specdecode-system", "team-a", "team-b", "monitoring"):
        api.ensure_namespace(ns)
    values = helm_home / f"values-{combo}.yaml"
    values.write_text(yaml.safe_dump(COMBOS[combo]))
    rendered = helm(
        env, helm_home, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds", "-f", str(values)
    ).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered) if d]
    assert "CustomResourceDefinition" in kinds and "Deployment" in kinds
    done = kubectl(
        env,
        "apply",
        "--dry-run=server",
        "--server-side",
        "--field-manager=helm-template-check",
        "--validate=strict",
        "-f",
        "-",
        input=rendered,
    )
    applied = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(applied) == len(kinds), done.stdout
    assert all(line.endswith("serverside-applied (server dry run)") for line in applied), done.stdout


def test_kubectl_get_sdd_prints_the_crd_columns(env, api):
    crd = yaml.safe_load((TESTS.parent / "crds" / "specdecode.io_specdecodedeployments.yaml").read_text())
    api.apply_crd(crd)
    api.ensure_namespace("columns")
    sdd = yaml.safe_load((TESTS.parent / "examples" / "pcie8-glm5-eagle3.yaml").read_text())
    sdd["metadata"]["namespace"] = "columns"
    kubectl(env, "apply", "--server-side", "-f", "-", input=yaml.safe_dump(sdd))
    name = sdd["metadata"]["name"]
    status = {
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AllReplicasReady",
                    "message": "",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ],
            "speculative": {"numSteps": 4, "acceptLength": 2.75, "tokensPerSecond": 131.5},
            "runtimeImage": {"launcher": "specdecode", "image": "runtime:0.1.0", "available": "runtime:0.2.0"},
        }
    }
    api.call(
        "PATCH",
        f"/apis/specdecode.io/v1alpha1/namespaces/columns/specdecodedeployments/{name}/status",
        status,
        content_type="application/merge-patch+json",
    )
    every = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    columns = [c for c in every if not c.get("priority")]  # the rest only with -o wide
    wide = kubectl(env, "get", "sdd", "-n", "columns", "-o", "wide").stdout.splitlines()
    assert re.split(r"\s{2,}", wide[0].strip()) == ["NAME"] + [c["name"].upper() for c in every]
    assert re.split(r"\s{2,}", wide[1].strip())[-1] == "runtime:0.2.0"  # Image Available: a default not adopted
    out = kubectl(env, "get", "sdd", "-n", "columns").stdout.splitlines()
    assert re.split(r"\s{2,}", out[0].strip()) == ["NAME"] + [c["name"].upper() for c in columns]
    row = dict(zip(["NAME"] + [c["name"] for c in columns], re.split(r"\s{2,}", out[1].strip())))
    expected = {
        "NAME": name,
        "Ready": "True",
        "Target TP": "8",
        "Draft TP": "1",
        "Mode": "Live",
        "Steps": "4",
        "Accept": "2.75",
        "Tok/s": "131.5",
    }
    assert {k: row.get(k) for k in expected if k == "NAME" or any(c["name"] == k for c in columns)} == {
        k: v for k, v in expected.items() if k == "NAME" or any(c["name"] == k for c in columns)
    }, out
    assert {"Ready", "Target TP", "Draft TP", "Steps", "Accept", "Tok/s", "Age"} <= {c["name"] for c in columns}
    # the short name and the category resolve too
    assert (
        f"specdecodedeployment.specdecode.io/{name}"
        in kubectl(env, "get", "specdecode", "-n", "columns", "-o", "name").stdout
    )


def test_kubectl_explain_lists_every_spec_field_with_its_description(env, api):
    from specdecode_operator.api.models import Draft, SpecDecodeDeploymentSpec

    api.apply_crd(yaml.safe_load((TESTS.parent / "crds" / "specdecode.io_specdecodedeployments.yaml").read_text()))
    deadline = time.monotonic() + 60
    while (done := kubectl(env, "explain", "sdd.spec", "--recursive", check=False)).returncode != 0:
        # the API server publishes a new CRD's OpenAPI a moment after it is Established
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.5)
    tree = done.stdout
    header = dict(re.findall(r"^(GROUP|KIND|VERSION):\s+(\S+)$", tree, flags=re.M))
    assert header == {"GROUP": "specdecode.io", "KIND": "SpecDecodeDeployment", "VERSION": "v1alpha1"}, tree[:300]

    def fields(model, depth=1):
        for name, info in model.model_fields.items():
            yield name, depth
            sub = info.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                yield from fields(sub, depth + 1)

    listed = re.findall(r"^( +)(\w+)\t?\s*<", tree, flags=re.M)
    found = {(name, len(indent) // 2) for indent, name in listed}
    for name, depth in fields(SpecDecodeDeploymentSpec):
        assert (name, depth) in found, f"{name} (depth {depth}) not in kubectl explain:\n{tree}"
    assert re.search(r"^    tensorParallelSize\t<integer> -required-$", tree, flags=re.M)
    field = kubectl(env, "explain", "sdd.spec.draft.tensorParallelSize").stdout
    assert "FIELD: tensorParallelSize <integer>" in field
    assert " ".join(Draft.model_fields["tensorParallelSize"].description.split()) in " ".join(field.split())
