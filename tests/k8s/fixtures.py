"""Pytest fixtures for the e2e suite: ``cluster`` (emulator + operator thread, or SPECDECODE_E2E_KUBECONFIG)."""

from __future__ import annotations

import os
import pathlib

import kubernetes
import pytest
import yaml

from specdecode_operator.opconfig import OperatorConfig
from specdecode_operator.testbed.runner import EmulatorServer, OperatorThread, standard_emulator

from .cluster import Cluster, unique_namespace

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "specdecode.io_specdecodedeployments.yaml"
REAL = os.environ.get("SPECDECODE_E2E_KUBECONFIG")


def committed_crd() -> dict:
    return yaml.safe_load(CRD_FILE.read_text())


def operator_config(**overrides) -> OperatorConfig:
    values = dict(standalone=True, metrics_port=0, liveness_endpoint=None, resync_seconds=0.3,
                  request_timeout=2.0, backoff_seconds=0.02, settle_seconds=1.0, api_workers=8)
    values.update(overrides)
    return OperatorConfig(**values)


@pytest.fixture
def cluster_factory():
    """Build clusters with options (no admission, custom operator config); cleaned up at the end of the test."""
    opened = []

    def build(*, admission: bool = True, operator: bool = True, **config) -> Cluster:
        if REAL:
            cfg = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=REAL, client_configuration=cfg)
            namespace = unique_namespace()
            api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
            api.create_namespace({"metadata": {"name": namespace}})
            op = None
            if operator:
                os.environ["KUBECONFIG"] = REAL
                op = OperatorThread(operator_config(namespaces=(namespace,), **config)).__enter__()
            cluster = Cluster(cfg, namespace, emulator=None, operator=op)
            opened.append((cluster, None, op, lambda: api.delete_namespace(namespace)))
            return cluster
        server = EmulatorServer(standard_emulator(committed_crd(), admission=admission)).__enter__()
        op = OperatorThread(operator_config(server=server.url, **config)).__enter__() if operator else None
        cfg = kubernetes.client.Configuration()
        cfg.host = server.url
        cluster = Cluster(cfg, "default", emulator=server.emulator, operator=op)
        cluster.server = server
        opened.append((cluster, server, op, None))
        return cluster

    yield build
    for cluster, server, _op, finalize in reversed(opened):
        if cluster.operator is not None:  # the current one: a test may have restarted it
            cluster.operator.__exit__(None, None, None)
        if finalize:
            finalize()
        cluster.close()
        if server is not None:
            server.__exit__(None, None, None)


@pytest.fixture
def cluster(cluster_factory) -> Cluster:
    return cluster_factory()


@pytest.fixture
def emulated(cluster):
    if cluster.emulator is None:
        pytest.skip("needs the API emulator (fault injection, request log or simulated controllers)")
    return cluster
