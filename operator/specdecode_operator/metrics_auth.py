"""Authenticated, authorized operator metrics: the controller-runtime secure-metrics contract.

Why: the operator's ``/metrics`` names every object it manages and its API error rates; a pod that can reach the
operator should not read it for free. A scrape must carry a bearer token the API server authenticates
(TokenReview) and whose user may ``get`` the non-resource URL ``/metrics`` (SubjectAccessReview; the chart's
``<fullname>-metrics-reader`` ClusterRole grants it to Prometheus' ServiceAccount). No token, or one the API server
does not accept: 401; an authenticated user without the grant: 403. Answers are cached per token for
``CACHE_SECONDS`` (bounded), so a scrape every 15 s costs two API calls a minute, not two per scrape.

The endpoint speaks HTTPS: with a certificate from ``cert_dir`` (``tls.crt``/``tls.key``, e.g. a mounted
cert-manager Secret) or, by default, a self-signed one made at start-up (Prometheus then scrapes with
``insecureSkipVerify``, as for controller-runtime operators; the bearer token still decides).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import logging
import pathlib
import ssl
import tempfile
import time

import kubernetes

log = logging.getLogger("specdecode.operator")

CACHE_SECONDS = 60.0
CACHE_MAX = 256
MAX_TOKEN_BYTES = 16 * 1024
PATH = "/metrics"


class MetricsAuth:
    """Decides 200/401/403 for one ``Authorization`` header."""

    def __init__(self, api: kubernetes.client.ApiClient, clock=time.monotonic):
        self.authn = kubernetes.client.AuthenticationV1Api(api)
        self.authz = kubernetes.client.AuthorizationV1Api(api)
        self.clock = clock
        self._cache: dict[str, tuple[float, int]] = {}

    def _review(self, token: str) -> int:
        review = self.authn.create_token_review(
            kubernetes.client.V1TokenReview(spec=kubernetes.client.V1TokenReviewSpec(token=token))
        )
        status = review.status
        if not status or not status.authenticated or not status.user:
            return 401
        user = status.user
        sar = self.authz.create_subject_access_review(
            kubernetes.client.V1SubjectAccessReview(
                spec=kubernetes.client.V1SubjectAccessReviewSpec(
                    user=user.username,
                    groups=user.groups,
                    uid=user.uid,
                    extra={k: list(v) for k, v in (user.extra or {}).items()},
                    non_resource_attributes=kubernetes.client.V1NonResourceAttributes(path=PATH, verb="get"),
                )
            )
        )
        return 200 if sar.status and sar.status.allowed else 403

    async def status(self, header: str | None) -> int:
        if not header or not header.startswith("Bearer ") or len(header) > MAX_TOKEN_BYTES:
            return 401
        token = header[len("Bearer ") :].strip()
        if not token:
            return 401
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        try:
            answer = await asyncio.to_thread(self._review, token)
        except kubernetes.client.ApiException as e:  # the API server could not decide: nothing is cached
            log.warning("metrics: token review failed: %s %s", e.status, e.reason)
            return 503 if (e.status or 500) >= 500 else 401
        if len(self._cache) >= CACHE_MAX:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_SECONDS}
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
        self._cache[key] = (now, answer)
        return answer


def self_signed(directory: pathlib.Path, names: list[str]) -> tuple[pathlib.Path, pathlib.Path]:
    """A key and a one-year self-signed certificate for ``names`` (DNS names or IP addresses)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    crt, pem = directory / "tls.crt", directory / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pem.chmod(0o600)
    return crt, pem


def server_context(cert_dir: str | None, names: list[str]) -> ssl.SSLContext:
    """TLS for the metrics endpoint: the certificate in ``cert_dir``, else a self-signed one (in a private temporary
    directory: the operator's root filesystem is read-only, /tmp is its writable emptyDir)."""
    if cert_dir:
        crt, pem = pathlib.Path(cert_dir) / "tls.crt", pathlib.Path(cert_dir) / "tls.key"
    else:
        crt, pem = self_signed(pathlib.Path(tempfile.mkdtemp(prefix="specdecode-metrics-")), names)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(crt), str(pem))
    return ctx
