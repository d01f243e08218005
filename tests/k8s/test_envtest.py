"""The local API server fixture itself: who each kubeconfig authenticates as, what RBAC lets it do, and that
stopping leaves no process and no data behind (also through ``python -m tests.k8s.envtest up|down``). The first
tests read the session's server (tests/conftest.py); the stop tests start servers of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.k8s.apiserver import kubectl
from tests.k8s.cluster import wait_for
from tests.k8s.envtest import ROOT, Environment


def whoami(kubeconfig) -> dict:
    return json.loads(kubectl(kubeconfig, "auth", "whoami", "-o", "json"))["status"]["userInfo"]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_each_kubeconfig_authenticates_as_its_identity(envtest_environment):
    env = envtest_environment
    admin = whoami(env.kubeconfig)
    assert admin["username"] == "envtest-admin" and "system:masters" in admin["groups"]
    alice = whoami(env.kubeconfig_for("alice", ["devs", "qa"]))
    assert alice["username"] == "alice" and {"devs", "qa"} <= set(alice["groups"])
    sa = whoami(env.service_account_kubeconfig("team-a", "runner"))
    assert sa["username"] == "system:serviceaccount:team-a:runner"
    assert "system:serviceaccounts:team-a" in sa["groups"]


def test_rbac_is_enforced_for_everyone_but_the_admin(envtest_environment):
    env = envtest_environment
    mark = env.audit_offset()
    alice = env.kubeconfig_for("alice", ["devs"])
    assert kubectl(env.kubeconfig, "auth", "can-i", "list", "secrets", "-A").strip() == "yes"
    with pytest.raises(RuntimeError, match="forbidden"):
        kubectl(alice, "get", "secrets", "-n", "default")
    # a Role of our own: the built-in view/edit ClusterRoles are aggregated by kube-controller-manager, absent here
    kubectl(env.kubeconfig, "create", "role", "cm-reader", "--verb=list", "--resource=configmaps", "-n", "default")
    kubectl(
        env.kubeconfig, "create", "rolebinding", "devs-cm-reader", "--role=cm-reader", "--group=devs", "-n", "default"
    )
    # the authorizer sees the new binding through its informer, a moment later
    wait_for(
        lambda: kubectl(alice, "auth", "can-i", "list", "configmaps", "-n", "default", check=False).strip() == "yes",
        timeout=10,
        what="alice may list configmaps",
    )
    kubectl(alice, "get", "configmaps", "-n", "default", "-o", "name")
    refused = [e for e in env.audit_events(mark, user="alice") if e["responseStatus"]["code"] == 403]
    assert refused and refused[0]["objectRef"]["resource"] == "secrets"


def test_stop_leaves_no_process_and_no_data(envtest_environment):
    bins = envtest_environment  # the session's server: already built and started
    with Environment() as env:
        assert env.startup_seconds < 60
        pids, workdir = env.pids, env.workdir
        assert all(alive(p) for p in pids.values()) and (workdir / "etcd").is_dir()
        assert kubectl(env.kubeconfig, "get", "--raw", "/version")
    assert not any(alive(p) for p in pids.values())
    assert not workdir.exists()
    assert bins.request("GET", "/readyz")[0] == 200  # the other server is untouched


def test_up_runs_in_the_background_and_down_removes_it(tmp_path):
    state = tmp_path / "envtest"
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "tests.k8s.envtest", *a, "--dir", str(state)],  # noqa: E731
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    up = run("up")
    assert up.returncode == 0, up.stderr
    pids = json.loads((state / "state.json").read_text())["pids"]
    assert oct(os.stat(state / "kubeconfig").st_mode & 0o777) == "0o600"
    assert "Server Version: v1.36" in kubectl(state / "kubeconfig", "version")
    down = run("down")
    assert down.returncode == 0, down.stderr
    assert not state.exists() and not any(alive(p) for p in pids.values())


def test_a_start_whose_port_was_taken_meanwhile_retries_on_new_ports(envtest_environment, monkeypatch):
    """free_port() closes the port before the server binds it, so a second test worker can take it in between: the
    API server's port is taken here on purpose for the first start, which must come up on new ports."""
    import socket

    from tests.k8s import envtest

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real, calls = envtest.free_port, []

    def first_port_taken() -> int:
        calls.append(1)
        return taken.getsockname()[1] if len(calls) == 3 else real()  # etcd, peer, then the API server's port

    monkeypatch.setattr(envtest, "free_port", first_port_taken)
    try:
        with Environment() as env:
            assert env.request("GET", "/readyz")[0] == 200
            assert env.server != f"https://127.0.0.1:{taken.getsockname()[1]}" and len(calls) == 6
    finally:
        taken.close()
