"""Pytest fixtures for the e2e suite.

``cluster`` / ``cluster_factory`` are parametrised over two API servers, so every e2e test runs on both:

- ``emulator``: the in-process API emulator with the operator in a thread (fault injection, request log,
  simulated controllers: ``cluster.emulator``);
- ``apiserver``: a real kube-apiserver + etcd (tests/k8s/envtest.py), CRDs applied with ``kubectl apply
  --server-side``, the operator in its own process under the chart's RBAC. A request the chart's RBAC refuses
  fails the test. With SPECDECODE_E2E_KUBECONFIG set, that cluster replaces the local API server (then the operator
  runs with the kubeconfig's own credentials).

``emulator_factory`` / ``emulated`` are for tests that need the emulator's extra powers.
The real API server is skipped when its binaries cannot be built (no Go), unless SPECDECODE_REQUIRE_ENVTEST=1
(``make test``), which turns that into a failure.
"""

from __future__ import annotations

import os
import pathlib

import kubernetes
import pytest
import yaml

from specdecode_operator.config import OperatorConfig
from specdecode_operator.testbed.runner import EmulatorServer, OperatorThread, standard_emulator

from .cluster import Cluster, unique_namespace

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "specdecode.io_specdecodedeployments.yaml"
REAL = os.environ.get("SPECDECODE_E2E_KUBECONFIG")
BACKENDS = ("emulator", "apiserver")


def committed_crd() -> dict:
    return yaml.safe_load(CRD_FILE.read_text())


TEST_CONFIG = dict(
    standalone=True,
    metrics_port=0,
    liveness_endpoint=None,
    resync_seconds=0.3,
    request_timeout=2.0,
    backoff_seconds=0.02,
    settle_seconds=1.0,
    api_workers=8,
)


def operator_config(**overrides) -> OperatorConfig:
    values = dict(TEST_CONFIG)
    values.update(overrides)
    return OperatorConfig(**values)


@pytest.fixture(scope="session")
def envtest_environment(tmp_path_factory):
    """A real kube-apiserver + etcd for the whole session (a few seconds to start once built)."""
    from .envtest import Environment, EnvtestUnavailable

    try:
        # `make envtest` (a dependency of `make test`) builds the binaries; a test run only reuses them
        env = Environment(workdir=tmp_path_factory.mktemp("envtest"), build=False).start()
    except EnvtestUnavailable as e:
        if os.environ.get("SPECDECODE_REQUIRE_ENVTEST") == "1":
            pytest.fail(f"the real API server is required (SPECDECODE_REQUIRE_ENVTEST=1): {e}")
        pytest.skip(f"no kube-apiserver/etcd binaries: {e}")
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="session")
def apiserver_bed(envtest_environment):
    """The real API server with CRDs installed by kubectl and the chart's RBAC bound to the operator's ServiceAccount."""
    from .apiserver import ApiServerBed

    return ApiServerBed(envtest_environment).prepare()


def _factory(request, tmp_path, backend: str):
    opened = []

    def build(*, admission: bool = True, operator: bool = True, **config) -> Cluster:
        if backend == "emulator":
            server = EmulatorServer(standard_emulator(committed_crd(), admission=admission)).__enter__()
            cfg = kubernetes.client.Configuration()
            cfg.host = server.url
            cluster = Cluster(cfg, "default", emulator=server.emulator)
            cluster.operator_overrides = dict(config)
            cluster.operator_factory = lambda: OperatorThread(
                operator_config(server=server.url, **cluster.operator_overrides)
            ).__enter__()
            cluster.server = server
            opened.append((cluster, server, None))
            if operator:
                cluster.start_operator()
            return cluster
        return _real_cluster(request, tmp_path, opened, operator, config)

    yield build
    errors = []
    for cluster, server, finalize in reversed(opened):
        if cluster.operator is not None:  # the current one: a test may have restarted it
            cluster.operator.__exit__(None, None, None)
        if finalize:
            errors += finalize()
        cluster.close()
        if server is not None:
            server.__exit__(None, None, None)
    if errors:
        pytest.fail(
            "the API server refused the operator (is a rule missing from the chart's RBAC?):\n  " + "\n  ".join(errors),
            pytrace=False,
        )


def _real_cluster(request, tmp_path, opened, operator: bool, config: dict) -> Cluster:
    from .apiserver import OperatorProcess

    namespace = unique_namespace()
    if REAL:
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=REAL, client_configuration=cfg)
        operator_kubeconfig, bed = REAL, None
    else:
        bed = request.getfixturevalue("apiserver_bed")
        cfg = bed.env.configuration()
        operator_kubeconfig = bed.operator_kubeconfig
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    core.create_namespace({"metadata": {"name": namespace}})
    if bed is not None:
        bed.grant(namespace)
    mark = bed.env.audit_offset() if bed else 0
    log = tmp_path / f"operator-{namespace}.log"
    cluster = Cluster(cfg, namespace, emulator=None)
    cluster.operator_overrides = dict(config)
    cluster.operator_factory = lambda: OperatorProcess(
        operator_kubeconfig, (namespace,), log, **{**TEST_CONFIG, **cluster.operator_overrides}
    ).__enter__()
    cluster.bed = bed

    def finalize() -> list[str]:
        core.delete_namespace(namespace)  # no namespace controller here: it stays Terminating, harmlessly
        core.api_client.close()
        return bed.forbidden(mark) if bed else []

    opened.append((cluster, None, finalize))
    if operator:
        cluster.start_operator()
    return cluster


@pytest.fixture(params=BACKENDS)
def cluster_factory(request, tmp_path):
    """Build clusters with options (no admission, custom operator config) on each API server; cleaned up after the test."""
    yield from _factory(request, tmp_path, request.param)


@pytest.fixture
def emulator_factory(request, tmp_path):
    """``cluster_factory`` on the API emulator only: for tests that inject faults, read its request log or play
    controllers and kubelets."""
    yield from _factory(request, tmp_path, "emulator")


@pytest.fixture
def apiserver_factory(request, tmp_path):
    """``cluster_factory`` on the real API server only: for what only it has (RBAC, its audit log)."""
    yield from _factory(request, tmp_path, "apiserver")


@pytest.fixture
def cluster(cluster_factory) -> Cluster:
    return cluster_factory()


@pytest.fixture
def emulated(emulator_factory) -> Cluster:
    return emulator_factory()
