"""The operator's /metrics serves a rotated certificate without a restart.

A CA and two certificates for the metrics Service's DNS name; the certificate mounted as the kubelet mounts a
Secret. The operator's own endpoint (``endpoints.Endpoints`` with ``metrics_auth.RotatingCertificate``) serves
certificate A to a client that verifies it against the CA under the Service's name; the Secret is rotated to B by
the kubelet's symlink swap; the next connection gets B, over the same listening socket."""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest

from specdecode_operator.endpoints import Endpoints
from specdecode_operator.metrics import OperatorMetrics
from specdecode_operator.metrics_auth import CERT_CHECK_SECONDS, RotatingCertificate, server_context
from tests.k8s.envtest import free_port
from tests.metrics.certs import Issuer, SecretVolume

SERVICE = "sd-specdecode-operator-metrics.specdecode-system.svc"  # the chart's serverName for release "sd"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def fetch(port: int, ca_pem: bytes) -> tuple[bytes, str]:
    """(the certificate the server presented, the HTTP status line of GET /metrics), verified as Prometheus does
    with the ServiceMonitor's tlsConfig: the CA from the Secret, the Service's DNS name."""
    client = ssl.create_default_context(cadata=ca_pem.decode())
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=SERVICE)
    try:
        served = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(f"GET /metrics HTTP/1.1\r\nHost: {SERVICE}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = (await reader.readline()).decode().strip()
        await reader.read()
        return served, status
    finally:
        writer.close()


@pytest.fixture
def issued(tmp_path):
    issuer = Issuer()
    volume = SecretVolume(tmp_path / "metrics-tls")
    return issuer, volume, issuer.issue(SERVICE), issuer.issue(SERVICE)


async def serve(tls: ssl.SSLContext) -> Endpoints:
    metrics = OperatorMetrics()
    return await Endpoints(
        metrics.registry,
        lambda: (True, {}),
        metrics_port=free_port(),
        health_port=None,
        host="127.0.0.1",
        metrics_tls=tls,
    ).start()


async def test_a_rotated_certificate_is_served_from_the_next_connection_on(issued):
    issuer, volume, a, b = issued
    volume.write(issuer.secret_data(a))
    clock = Clock()
    rotating = RotatingCertificate(volume.path, check_seconds=CERT_CHECK_SECONDS, clock=clock)
    endpoints = await serve(rotating.context)
    port = endpoints.ports["metrics"]
    try:
        assert await fetch(port, issuer.cert_pem) == (a.der, "HTTP/1.1 200 OK")
        volume.write(issuer.secret_data(b))  # cert-manager renewed it, the kubelet swapped ..data
        # looked at most every CERT_CHECK_SECONDS: until then A, then B, on the same listening socket
        clock.now += CERT_CHECK_SECONDS / 2
        assert (await fetch(port, issuer.cert_pem))[0] == a.der
        clock.now += CERT_CHECK_SECONDS / 2
        assert await fetch(port, issuer.cert_pem) == (b.der, "HTTP/1.1 200 OK")
        assert rotating.reloads == 1
        clock.now += CERT_CHECK_SECONDS
        assert (await fetch(port, issuer.cert_pem))[0] == b.der
        assert rotating.reloads == 1  # unchanged files are not loaded again
    finally:
        await endpoints.stop()


async def test_a_pair_that_does_not_load_keeps_the_previous_certificate(issued, caplog):
    issuer, volume, a, b = issued
    volume.write(issuer.secret_data(a))
    rotating = RotatingCertificate(volume.path, check_seconds=0)
    endpoints = await serve(rotating.context)
    port = endpoints.ports["metrics"]
    try:
        mismatched = {**issuer.secret_data(b), "tls.key": a.key_pem}
        volume.write(mismatched)
        with caplog.at_level(logging.WARNING, logger="specdecode.operator"):
            assert await fetch(port, issuer.cert_pem) == (a.der, "HTTP/1.1 200 OK")
        assert "does not load, serving the previous one" in caplog.text
        volume.write(issuer.secret_data(b))
        assert (await fetch(port, issuer.cert_pem))[0] == b.der
    finally:
        await endpoints.stop()


async def test_the_operator_follows_the_mounted_certificate_through_server_context(issued, monkeypatch):
    """``server_context`` (what ``endpoints.secure_metrics`` gives the operator for SPECDECODE_METRICS_CERT_DIR)
    follows rotations too."""
    issuer, volume, a, b = issued
    volume.write(issuer.secret_data(a))
    monkeypatch.setattr("specdecode_operator.metrics_auth.CERT_CHECK_SECONDS", 0.0)
    endpoints = await serve(server_context(str(volume.path), ["localhost"]))
    port = endpoints.ports["metrics"]
    try:
        assert (await fetch(port, issuer.cert_pem))[0] == a.der
        volume.write(issuer.secret_data(b))
        assert (await fetch(port, issuer.cert_pem))[0] == b.der
    finally:
        await endpoints.stop()
