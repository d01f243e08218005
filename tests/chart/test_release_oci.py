"""The chart release end to end: `charts/release.sh` (what `make release` runs) packages the chart with its CRDs and
pushes it to a real OCI registry on loopback (the CNCF distribution registry, tests/k8s/registry.py); the release is
installed from there with `helm install oci://...` onto a real kube-apiserver and upgraded to a second version whose
CRD has a new optional field, by the documented path (docs/helm.md): the new chart's crds/ applied server-side
first, then `helm upgrade`. Afterwards a SpecDecodeDeployment using the new field is accepted, the ones created
before keep working, and nothing was deleted or recreated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tomllib

import pytest
import yaml

from tests.chart.chartlib import CHART, ROOT
from tests.k8s import tools
from tests.k8s.realapi import ApiServer, Refusal, started_environment
from tests.k8s.registry import Registry, RegistryUnavailable

RELEASE_SCRIPT = ROOT / "charts" / "release.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PREVIOUS = f"{VERSION}-rc.1"  # SemVer: a pre-release sorts before the release
NEW_FIELD = "modelCache"  # the optional spec field the previous release's CRD lacks
CRD_NAME = "specdecodedeployments.specdecode.io"
RELEASE, NAMESPACE, TEAM = "sd", "specdecode-system", "team-a"
SDDS = f"/apis/specdecode.io/v1alpha1/namespaces/{TEAM}/specdecodedeployments"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    try:
        reg = Registry(tmp_path_factory.mktemp("registry")).start()
    except RegistryUnavailable as e:
        if os.environ.get("SPECDECODE_REQUIRE_ENVTEST") == "1":
            pytest.fail(f"the OCI registry is required (SPECDECODE_REQUIRE_ENVTEST=1; `make registry` builds it): {e}")
        pytest.skip(f"no OCI registry binary (`make registry` builds it): {e}")
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = started_environment(tmp_path_factory.mktemp("envtest-release"))
    yield env
    env.stop()


@pytest.fixture(scope="module")
def api(env):
    api = ApiServer(env.kubeconfig)
    yield api
    api.close()


def release(chart, registry, out, version: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    environ = {**os.environ, "CHART": str(chart), "OUT": str(out), "HELM": tools.helm()}
    environ.pop("VERSION", None)
    if version is not None:
        environ["VERSION"] = version
    done = subprocess.run(
        [str(RELEASE_SCRIPT), registry, "--plain-http"], capture_output=True, text=True, timeout=120, env=environ
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def previous_chart(tmp_path):
    """The chart as the previous release shipped it: the same templates, a CRD without the new field."""
    chart = tmp_path / "previous" / CHART.name
    shutil.copytree(CHART, chart)
    (crd_file,) = (chart / "crds").glob("*.yaml")
    crd = yaml.safe_load(crd_file.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert NEW_FIELD in spec["properties"]
    del spec["properties"][NEW_FIELD]
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def sdd(name: str, **spec) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, "namespace": TEAM},
        "spec": {
            "target": {"model": "/models/t", "tensorParallelSize": 8},
            "draft": {"model": "/models/d", "tensorParallelSize": 1},
            **spec,
        },
    }


def spec_fields(api) -> set[str]:
    crd = api.get_crd(CRD_NAME)
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def test_one_version_names_the_package_the_chart_and_the_images():
    """pyproject.toml's version is the release's: the committed Chart.yaml, the default images and the chart's
    default runtime image say the same, so a chart installed from the working tree matches the released one."""
    from specdecode_operator import images

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    tags = {
        name: ref.rsplit(":", 1)[1]
        for name, ref in [
            ("RUNTIME_IMAGE", images.RUNTIME_IMAGE),
            ("OPERATOR_IMAGE", images.OPERATOR_IMAGE),
            ("values runtime.image", values["runtime"]["image"]),
        ]
    }
    assert {"version": chart["version"], "appVersion": chart["appVersion"], **tags} == dict.fromkeys(
        ["version", "appVersion", *tags], VERSION
    )


def test_release_refuses_a_version_helm_cannot_tag(tmp_path):
    done = release(CHART, "oci://127.0.0.1:1/charts", tmp_path, version="1.0", check=False)
    assert done.returncode == 2 and "'1.0' is not MAJOR.MINOR.PATCH" in done.stderr
    usage = subprocess.run([str(RELEASE_SCRIPT), "https://example.invalid"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "usage: charts/release.sh oci://" in usage.stderr


def test_chart_from_the_registry_installs_and_upgrades_with_a_crd_change(env, api, registry, tmp_path):
    home = tmp_path / "helm"

    def helm(*args, **kw):
        return tools.run("helm", *args, kubeconfig=env.kubeconfig, home=home, **kw)

    def kubectl(*args, **kw):
        return tools.run("kubectl", *args, kubeconfig=env.kubeconfig, **kw)

    # two releases in the registry: the previous one (CRD without the new field) and this tree's
    out = tmp_path / "dist"
    pushed_previous = release(previous_chart(tmp_path), registry.url, out, PREVIOUS).stdout.strip()
    pushed = release(CHART, registry.url, out).stdout.strip()
    assert (pushed_previous, pushed) == (
        f"{registry.url}/{CHART.name}:{PREVIOUS}",
        f"{registry.url}/{CHART.name}:{VERSION}",
    )
    assert registry.tags(f"charts/{CHART.name}") == sorted([PREVIOUS, VERSION])
    with tarfile.open(out / f"{CHART.name}-{VERSION}.tgz") as package:
        meta = yaml.safe_load(package.extractfile(f"{CHART.name}/Chart.yaml"))
        packaged_crd = package.extractfile(f"{CHART.name}/crds/specdecode.io_specdecodedeployments.yaml").read()
    assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)
    assert packaged_crd == (ROOT / "crds" / "specdecode.io_specdecodedeployments.yaml").read_bytes()
    oci = f"{registry.url}/{CHART.name}"

    # install the previous release from the registry: its CRD comes along
    helm(
        "install",
        RELEASE,
        oci,
        "--version",
        PREVIOUS,
        "--plain-http",
        "-n",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "crds.upgrade=false",  # no Job controller here (the previous chart is this one, older CRD)
    )
    (listed,) = json.loads(helm("list", "-n", NAMESPACE, "-o", "json").stdout)
    assert (listed["chart"], listed["app_version"], listed["status"]) == (
        f"{CHART.name}-{PREVIOUS}",
        PREVIOUS,
        "deployed",
    )
    deployment = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}-{CHART.name}"
    image = api.call("GET", deployment)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{PREVIOUS}")  # appVersion is the image tag the chart deploys
    crd_uid = api.get_crd(CRD_NAME)["metadata"]["uid"]
    assert NEW_FIELD not in spec_fields(api)

    api.ensure_namespace(TEAM)
    before = api.call("POST", SDDS, sdd("before"), query=[("fieldValidation", "Strict")])
    with pytest.raises(Refusal) as refused:  # the previous CRD does not know the field
        api.call("POST", SDDS, sdd("early", modelCache={"sizeLimit": "100Gi"}), query=[("fieldValidation", "Strict")])
    assert NEW_FIELD in str(refused.value.body.get("message")), refused.value.body

    # upgrade as docs/helm.md says: the new chart's CRDs server-side first (helm never upgrades crds/), then helm
    pulled = tmp_path / "pulled"
    helm("pull", oci, "--version", VERSION, "--plain-http", "--untar", "--untardir", str(pulled))
    applied = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(pulled / CHART.name / "crds"))
    assert f"customresourcedefinition.apiextensions.k8s.io/{CRD_NAME} serverside-applied" in applied.stdout
    # (the chart's own CRD upgrade hook is off: no Job controller runs here; tests/chart/test_crd_upgrade_real.py)
    helm("upgrade", RELEASE, oci, "--version", VERSION, "--plain-http", "-n", NAMESPACE, "--set", "crds.upgrade=false")
    kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")

    crd = api.get_crd(CRD_NAME)
    assert crd["metadata"]["uid"] == crd_uid, "the CRD was recreated: its SpecDecodeDeployments went with it"
    assert NEW_FIELD in spec_fields(api)
    after = api.call(
        "POST",
        SDDS,
        sdd(
            "after",
            target={"model": "hf://acme/target@v1", "tensorParallelSize": 8},
            modelCache={"claimName": "hf-cache", "tokenSecretRef": {"name": "hf-token"}},
        ),
        query=[("fieldValidation", "Strict")],
    )
    assert after["spec"][NEW_FIELD]["tokenSecretRef"] == {"name": "hf-token", "key": "token"}  # the new default
    # the object from before the upgrade is the same object and still takes changes
    still = api.call("GET", f"{SDDS}/before")
    assert still["metadata"]["uid"] == before["metadata"]["uid"] and still["spec"] == before["spec"]
    patched = api.call(
        "PATCH", f"{SDDS}/before", {"spec": {"replicas": 2}}, content_type="application/merge-patch+json"
    )
    assert patched["metadata"]["generation"] == 2 and patched["spec"]["replicas"] == 2
    names = {o["metadata"]["name"] for o in api.call("GET", SDDS)["items"]}
    assert names == {"before", "after"}

    history = json.loads(helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [(h["chart"], h["status"]) for h in history] == [
        (f"{CHART.name}-{PREVIOUS}", "superseded"),
        (f"{CHART.name}-{VERSION}", "deployed"),
    ]
    image = api.call("GET", deployment)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{VERSION}")
