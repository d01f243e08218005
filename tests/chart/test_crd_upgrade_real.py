"""The chart's CRD upgrade hook on a real kube-apiserver: `specdecode crd apply`, run as the hook Job runs it (its
ServiceAccount, bound to the chart's hook ClusterRole and nothing else), upgrades an older CRD to this release's,
whose new field the API server then serves, and creates the CRD where it is missing."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdecode_operator.api.crd import crd as generated_crd
from tests.chart.chartlib import NAMESPACE, render
from tests.k8s.cluster import minimal_sdd
from tests.k8s.realapi import ApiServer, started_environment

CRD_NAME = "specdecodedeployments.specdecode.io"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
TEAM = "crd-upgrade"
SDDS = f"/apis/specdecode.io/v1alpha1/namespaces/{TEAM}/specdecodedeployments"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = started_environment(tmp_path_factory.mktemp("envtest-crd-upgrade"))
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
def hook_kubeconfig(env, api) -> Path:
    """Credentials of the hook Job's ServiceAccount, with exactly the chart's hook ClusterRole bound to it."""
    hooks = [d for d in render() if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]
    by_kind = {d["kind"]: d for d in hooks}
    for kind, path in (
        ("ClusterRole", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
        ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ):
        api.call("POST", path, by_kind[kind])
    return env.service_account_kubeconfig(NAMESPACE, by_kind["ServiceAccount"]["metadata"]["name"])


def crd_apply(kubeconfig: Path) -> subprocess.CompletedProcess:
    """`specdecode crd apply` as the hook's container runs it (no in-cluster credentials here: the kubeconfig)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    env["KUBECONFIG"] = str(kubeconfig)
    exe = Path(sys.executable).parent / "specdecode"
    return subprocess.run(
        [str(exe), "crd", "apply", "--request-timeout=10", "--wait=60"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def older_crd() -> dict:
    """This release's CRD without status.runtimeImage: what a previous release installed."""
    old = copy.deepcopy(generated_crd())
    status = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    del status["properties"]["runtimeImage"]
    return old


def status_keeps_runtime_image(api: ApiServer, name: str) -> bool:
    """Whether the served schema keeps status.runtimeImage (an unknown field is pruned)."""
    record = {"launcher": "specdecode", "image": "registry.example.com/runtime:1"}
    written = api.call(
        "PATCH",
        f"{SDDS}/{name}/status",
        {"status": {"runtimeImage": record}},
        content_type="application/merge-patch+json",
    )
    return (written.get("status") or {}).get("runtimeImage") == record


def wait_until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_the_hook_upgrades_an_older_crd_and_the_new_field_is_served(api, hook_kubeconfig):
    api.apply_crd(older_crd())  # as `helm install` of the previous release left it
    api.ensure_namespace(TEAM)
    api.call("POST", SDDS, minimal_sdd("llama"))
    assert not status_keeps_runtime_image(api, "llama")  # the older CRD prunes the field

    done = crd_apply(hook_kubeconfig)
    assert done.returncode == 0, done.stderr
    assert f"{CRD_NAME} applied (field manager specdecode-crds), established" in done.stdout

    crd = api.get_crd(CRD_NAME)
    assert (
        "runtimeImage" in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    )
    assert "specdecode-crds" in {m["manager"] for m in crd["metadata"]["managedFields"]}
    assert wait_until(lambda: status_keeps_runtime_image(api, "llama")), "the new field is not served"
    # nothing else changed hands: the objects the CRD holds are still there
    assert api.call("GET", f"{SDDS}/llama")["metadata"]["name"] == "llama"


def test_the_hook_creates_a_missing_crd_through_its_named_grant(api, hook_kubeconfig):
    """An install with --skip-crds: server-side apply creates the CRD through a PATCH to its named URL, which
    the hook ClusterRole's resourceNames admits; a POST (a create RBAC cannot limit by name) is refused."""
    config = ApiServer(str(hook_kubeconfig))
    try:
        with pytest.raises(Exception) as refused:
            config.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", generated_crd())
        assert getattr(refused.value, "status", None) == 403, refused.value
    finally:
        config.close()
    api.call("DELETE", CRD_PATH)
    assert wait_until(lambda: _missing(api), timeout=60)
    done = crd_apply(hook_kubeconfig)
    assert done.returncode == 0, done.stderr
    assert api.get_crd(CRD_NAME)["metadata"]["name"] == CRD_NAME


def test_the_hook_may_touch_no_other_crd(env, hook_kubeconfig):
    other = copy.deepcopy(generated_crd())
    other["metadata"]["name"] = "widgets.specdecode.io"
    other["spec"]["names"].update(plural="widgets", singular="widget", kind="Widget", shortNames=["wdg"])
    config = ApiServer(str(hook_kubeconfig))
    try:
        with pytest.raises(Exception) as refused:
            config.apply_crd(other)
        assert getattr(refused.value, "status", None) == 403, refused.value
    finally:
        config.close()


def test_an_unreachable_api_server_fails_within_the_timeouts(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {token: t}}]\n"
    )
    started = time.monotonic()
    done = crd_apply(kubeconfig)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "applying specdecodedeployments.specdecode.io" in done.stderr
    assert time.monotonic() - started < 60


def _missing(api: ApiServer) -> bool:
    try:
        api.get_crd(CRD_NAME)
    except Exception as e:
        return getattr(e, "status", None) == 404
    return False
