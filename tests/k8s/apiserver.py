"""The real API server prepared the way a user's cluster is: CRDs applied with kubectl, the chart's RBAC bound to the
operator's ServiceAccount, and the operator in its own process holding only that ServiceAccount's token.

``ApiServerBed`` is set up once per test session on an ``envtest.Environment``; ``OperatorProcess`` is one operator
(``specdecode operator run``) per test, watching that test's namespace.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request
from typing import Any

import yaml

from .envtest import Environment, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
CHART = ROOT / "charts" / "specdecode-operator"
UPSTREAM_CRDS = ROOT / "tests" / "data" / "upstream-crds"
RELEASE = "sd"
OPERATOR_NAMESPACE = "specdecode-system"
# Marker that replaces the LeaderWorkerSet excerpt's two inlined PodTemplateSpec schemas (tests/data/upstream-crds/SOURCE.md).
ELIDED = "x-specdecode-elided"


def kubectl_binary() -> str:
    """The pinned kubectl (envtest/fetch-tools.sh), else the one on PATH."""
    from . import tools

    if tools.FETCH.exists():
        return tools.kubectl()
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("no kubectl: envtest/fetch-tools.sh is missing and none is on PATH")
    return found


def kubectl(
    kubeconfig: os.PathLike | str, *args: str, input: str | None = None, timeout: float = 120, check: bool = True
) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run(
        [kubectl_binary(), *args], capture_output=True, text=True, input=input, timeout=timeout, env=env
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done.stdout


def _unelide(node: Any) -> Any:
    """The excerpt's elided PodTemplateSpec nodes keep everything the operator writes (upstream they are fully typed;
    here ``x-kubernetes-preserve-unknown-fields`` stops the API server from pruning them)."""
    if isinstance(node, dict):
        out = {k: _unelide(v) for k, v in node.items() if k != ELIDED}
        if ELIDED in node:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    if isinstance(node, list):
        return [_unelide(v) for v in node]
    return node


def third_party_crds() -> str:
    """The vendored LeaderWorkerSet and ServiceMonitor CRDs as one YAML stream."""
    docs = []
    for path in sorted(UPSTREAM_CRDS.glob("*.yaml")):
        docs += [_unelide(d) for d in yaml.safe_load_all(path.read_text()) if d]
    return yaml.safe_dump_all(docs, sort_keys=False)


def chart_rbac(values: dict | None = None, release: str = RELEASE) -> list[dict]:
    """The chart's ServiceAccount, (Cluster)Roles and bindings of the operator, rendered by Helm's Go SDK
    (helm-python-sdk); not the CRD upgrade hook's own (tests/chart/test_crd_upgrade_real.py binds those)."""
    import helm_python as helm

    rendered = helm.Chart.load(str(CHART)).render(
        {"replicaCount": 1, **(values or {})}, name=release, namespace=OPERATOR_NAMESPACE, is_install=True
    )
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return [
        d
        for path, text in sorted(rendered.items())
        if path.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d and d.get("kind") in kinds and "helm.sh/hook" not in (d["metadata"].get("annotations") or {})
    ]


class ApiServerBed:
    """A started Environment with our CRD (and the third-party ones) established and the operator's ServiceAccount.

    The chart is rendered in namespaced mode (``watch.allNamespaces: false``) for each test namespace, as a user
    who runs one operator per team would install it: its ClusterRole holds only the cluster-scoped reads, and a
    Role + RoleBinding in the watched namespace holds the rest. The operator then runs with ``--namespace``.
    """

    def __init__(self, env: Environment):
        self.env = env
        self.operator_kubeconfig: pathlib.Path | None = None
        self.operator_user = ""

    def prepare(self) -> ApiServerBed:
        admin = self.env.kubeconfig
        kubectl(admin, "apply", "--server-side", "--field-manager=e2e-setup", "-f", str(CRDS))
        kubectl(admin, "apply", "--server-side", "--field-manager=e2e-setup", "-f", "-", input=third_party_crds())
        kubectl(admin, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kubectl(admin, "create", "namespace", OPERATOR_NAMESPACE)
        (sa,) = [
            d["metadata"]["name"]
            for d in chart_rbac(self.namespaced_values("default"))
            if d["kind"] == "ServiceAccount"
        ]
        self.operator_kubeconfig = self.env.service_account_kubeconfig(OPERATOR_NAMESPACE, sa)
        self.operator_user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{sa}"
        return self

    @staticmethod
    def namespaced_values(namespace: str) -> dict:
        """The chart's values for an operator watching ``namespace`` as the suite runs it: control-token Secrets
        (``OperatorConfig.control_auth``'s default; the chart's own default, ServiceAccount tokens, is installed as
        is by tests/e2e/test_default_install_live_control.py), so the chart grants the Secret rights it uses."""
        return {"watch": {"allNamespaces": False, "namespaces": [namespace]}, "controlAuth": {"mode": "Secret"}}

    def grant(self, namespace: str, without: tuple[str, str] | None = None) -> None:
        """Apply the chart's RBAC for an operator watching ``namespace`` (it must exist). ``without=(group,
        resource)`` leaves that resource out of every rule, to show that a missing rule is caught."""
        docs = chart_rbac(self.namespaced_values(namespace))
        if without:
            group, resource = without
            for doc in docs:
                if doc["kind"] in ("Role", "ClusterRole"):
                    for rule in doc["rules"]:
                        if group in rule.get("apiGroups", ()):  # nonResourceURLs rules name no group
                            rule["resources"] = [r for r in rule["resources"] if r != resource]
                    doc["rules"] = [r for r in doc["rules"] if r.get("resources") or r.get("nonResourceURLs")]
        kubectl(
            self.env.kubeconfig,
            "apply",
            "--server-side",
            "--field-manager=e2e-setup",
            "-f",
            "-",
            input=yaml.safe_dump_all(docs, sort_keys=False),
        )

    def forbidden(self, since: int = 0, user: str | None = None) -> list[str]:
        """Requests of the operator's ServiceAccount (or ``user``) that RBAC refused (403) since audit offset
        ``since``."""
        out = []
        for e in self.env.audit_events(since, user=user or self.operator_user):
            if (e.get("responseStatus") or {}).get("code") != 403:
                continue
            ref = e.get("objectRef") or {}
            out.append(
                f"{e['verb']} {ref.get('apiGroup') or 'core'}/{ref.get('resource')}"
                f"{'/' + ref['subresource'] if ref.get('subresource') else ''}"
                f" ns={ref.get('namespace', '-')} name={ref.get('name', '-')}"
            )
        return out


# OperatorConfig fields the operator reads from SPECDECODE_* variables (config.OperatorConfig.from_env).
_ENV_FIELDS = (
    "default_image",
    "runtime_image_policy",
    "request_timeout",
    "scrape_timeout",
    "tune_restart_seconds",
    "tune_interval_scale",
    "prometheus_url",
    "rollout_blocked_seconds",
    "api_recheck_seconds",
    "default_image",
    "label_selector",
    "operator_namespace",
)


class OperatorProcess:
    """``specdecode operator run`` in its own process with a kubeconfig, as a Deployment's pod would run it; ready
    when kopf's liveness endpoint answers. A context manager, like the in-thread runner."""

    def __init__(
        self, kubeconfig: os.PathLike | str, namespaces: tuple[str, ...], log_path: os.PathLike | str, **config: Any
    ):
        self.kubeconfig = str(kubeconfig)
        self.namespaces = namespaces
        self.log_path = pathlib.Path(log_path)
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.liveness = config.get("liveness_endpoint") or f"http://127.0.0.1:{free_port()}/healthz"
        # /metrics is always served: the tests read the reconciliation count from it (``reconcile_passes``)
        self.metrics_port = config.get("metrics_port") or free_port()

    def command(self) -> list[str]:
        exe = pathlib.Path(sys.executable).parent / "specdecode"
        cmd = [str(exe), "operator", "run", "--liveness", self.liveness, "--metrics-port", str(self.metrics_port)]
        for ns in self.namespaces:
            cmd += ["--namespace", ns]
        if "resync_seconds" in self.config:
            cmd += ["--resync-seconds", str(self.config["resync_seconds"])]
        return cmd

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "SPECDECODE_"))}
        env["KUBECONFIG"] = self.kubeconfig
        env["SPECDECODE_STANDALONE"] = "1"  # one replica: no leader election
        for field in _ENV_FIELDS:
            if self.config.get(field) is not None:
                env["SPECDECODE_" + field.upper()] = str(self.config[field])
        return env

    def __enter__(self) -> OperatorProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command(),
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=open(self.log_path, "ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.liveness, timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"the operator did not become live in 60 s:\n{self.log_tail()}")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def reconcile_passes(self) -> float:
        """Reconciliation passes this operator has completed, from its /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "specdecode_operator_reconciles_total"
        )

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
