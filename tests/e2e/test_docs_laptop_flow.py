"""The laptop flow of docs/operator.md ("A real API server on a laptop"), run as written: its commands are read from
the document and executed by bash in a directory laid out like the repository (the Makefile, crds/, examples/,
envtest/, tests/ and .venv linked in; .envtest made there), so a command the document gets wrong fails here.

`make tools envtest-up` starts a real kube-apiserver without add-on APIs (no prometheus-operator CRDs, no
LeaderWorkerSet); the exports put the kubectl `make tools` fetched and the venv's `specdecode` on PATH; kubectl
applies the CRDs and the example; `specdecode operator run --all-namespaces` runs in the background (with
``--liveness-port``/``--metrics-port`` moved to free ports: the defaults may be taken on a shared machine); the
document's `kubectl get sdd` is polled until the object settles: only the missing pods (``NoPods``, ``RollingOut``)
keep it from Ready. `make envtest-down` stops it all.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.k8s import tools
from tests.k8s.cluster import condition, wait_for
from tests.k8s.envtest import free_port
from tests.k8s.fixtures import ROOT
from tests.k8s.realapi import require_binaries

DOC = ROOT / "docs" / "operator.md"
SECTION = "### A real API server on a laptop"
SLACK = 60.0  # a loaded 2-core machine: the operator's start-up and first pass


def documented_commands() -> list[str]:
    """The indented command block under SECTION, comments removed."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} lost its section {SECTION!r}"
    lines = text.split(SECTION, 1)[1].splitlines()[1:]
    block = []
    for line in lines:
        if not line.strip():
            if block:
                break
            continue
        if not line.startswith("    "):
            break
        block.append(re.split(r"\s+#\s", line.strip(), maxsplit=1)[0].strip())
    return block


def bash(script: str, env: dict, cwd: pathlib.Path, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{script!r} exited {done.returncode}:\n{done.stderr[-3000:]}{done.stdout[-2000:]}"
    return done


@pytest.fixture
def checkout(tmp_path) -> pathlib.Path:
    """A directory that looks like the repository's root to the documented commands."""
    require_binaries()
    if shutil.which("make") is None:
        pytest.skip("no make")
    tools.tools_dir()  # fetched (or found cached) before `make tools` is timed by the flow
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("Makefile", "crds", "examples", "envtest", "tests"):
        (work / name).symlink_to(ROOT / name)
    (work / ".venv").symlink_to(pathlib.Path(sys.prefix))  # the environment these tests run in: the repo's .venv
    return work


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_documented_laptop_flow_ends_short_of_ready_only_for_lack_of_pods(checkout, tmp_path):
    commands = documented_commands()
    start = [c for c in commands if c.endswith("&")]
    assert len(start) == 1 and re.fullmatch(r"specdecode operator run --all-namespaces\s*&", start[0]), commands
    setup = commands[: commands.index(start[0])]
    after = commands[commands.index(start[0]) + 1 :]
    (look,) = [c for c in after if c.startswith("kubectl get sdd")]
    (teardown,) = [c for c in after if c.startswith("make envtest-down")]
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KUBECONFIG", "SPECDECODE_")) or k == "SPECDECODE_CACHE"
    }  # built binaries' cache
    # a new user's PATH: neither the fetched kubectl nor the venv on it until the document's export puts them there
    ours = {str(tools.tools_dir().resolve()), str((pathlib.Path(sys.prefix) / "bin").resolve())}
    base["PATH"] = os.pathsep.join(
        p for p in base.get("PATH", "").split(os.pathsep) if p and str(pathlib.Path(p).resolve()) not in ours
    )
    env_file = tmp_path / "env"
    try:
        bash("set -e\n" + "\n".join(setup) + f"\nenv -0 > {env_file}", base, checkout)
        env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        # the kubectl the flow calls is the one `make tools` fetched, found on the PATH the document sets
        found = bash("command -v kubectl", env, checkout).stdout.strip()
        assert pathlib.Path(found).resolve() == (tools.tools_dir() / "kubectl").resolve(), found
        assert pathlib.Path(env["KUBECONFIG"]).is_file()
        operator_log = tmp_path / "operator.log"
        command = start[0].rstrip("&").strip() + f" --liveness-port {free_port()} --metrics-port {free_port()}"
        with open(operator_log, "ab") as out:
            operator = subprocess.Popen(
                ["bash", "-c", f"exec {command}"], env=env, cwd=checkout, stdout=out, stderr=subprocess.STDOUT
            )
        try:

            def settled():
                listed = yaml.safe_load(bash(look, env, checkout, timeout=60).stdout)
                (obj,) = listed["items"]
                return (
                    obj
                    if condition(obj, "MetricsAvailable").get("reason") == "NoPods"
                    and condition(obj, "ApisAvailable").get("status") == "False"
                    else None
                )

            try:
                obj = wait_for(settled, timeout=SLACK, interval=0.5, what="the example settled")
            except AssertionError as e:
                raise AssertionError(f"{e}\noperator:\n{operator_log.read_text()[-4000:]}") from None
            assert operator.poll() is None, operator_log.read_text()[-4000:]
        finally:
            operator.terminate()
            operator.wait(20)
        conditions = {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}
        assert conditions["SpecValid"] == ("True", "Valid")
        assert conditions["Degraded"][0] == "False", conditions
        assert conditions["Ready"] == ("False", "RollingOut"), conditions  # no pod runs without a kubelet
        assert conditions["MetricsAvailable"] == ("False", "NoPods"), conditions
        assert conditions["ApisAvailable"] == ("False", "ApiNotServed"), conditions
        assert "ServiceMonitor (monitoring.coreos.com/v1)" in condition(obj, "ApisAvailable")["message"]
        # nothing else is wrong: every condition not named above is in its good state
        assert conditions.get("Stalled", ("False", "AsExpected"))[0] == "False", conditions  # it can still progress
        named = {"SpecValid", "Degraded", "Ready", "MetricsAvailable", "ApisAvailable", "Progressing", "Stalled"}
        assert set(conditions) <= named, conditions
        assert "Traceback" not in operator_log.read_text()
    finally:
        bash(teardown, env if env_file.exists() else base, checkout, timeout=60)
    assert not (checkout / ".envtest").exists()
