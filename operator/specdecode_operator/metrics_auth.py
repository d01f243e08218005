"""Authenticated, authorized operator metrics: the controller-runtime secure-metrics contract.

Why: the operator's ``/metrics`` names every object it manages and its API error rates; a pod that can reach the
operator should not read it for free. A scrape must carry a bearer token the API server authenticates
(TokenReview) and whose user may ``get`` the non-resource URL ``/metrics`` (SubjectAccessReview; the chart's
``<fullname>-metrics-reader`` ClusterRole grants it to Prometheus' ServiceAccount). No token, or one the API server
does not accept: 401; an authenticated user without the grant: 403. Answers are cached per token for
``CACHE_SECONDS`` (bounded), so a scrape every 15 s costs two API calls a minute, not two per scrape. The API
server's calls are bounded in time and in number; when it cannot answer, a scrape gets 503 at once.

The endpoint speaks HTTPS: with a certificate from ``cert_dir`` (``tls.crt``/``tls.key``, e.g. a mounted
cert-manager Secret; a rotated one is served from the next handshake on, see ``RotatingCertificate``) or, by
default, a self-signed one made at start-up (Prometheus then scrapes with ``insecureSkipVerify``, as for
controller-runtime operators; the bearer token still decides).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import datetime
import hashlib
import ipaddress
import logging
import os
import pathlib
import ssl
import tempfile
import threading
import time

import kubernetes

log = logging.getLogger("specdecode.operator")

CACHE_SECONDS = 60.0
CACHE_MAX = 256  # decided tokens (200 or 403) remembered
NEGATIVE_CACHE_MAX = 1024  # tokens the API server refused (401), kept apart: a flood of them evicts no scraper
MAX_TOKEN_BYTES = 16 * 1024
PATH = "/metrics"
REVIEW_TIMEOUT = (2.0, 3.0)  # (connect, read) seconds per review call
REVIEW_DEADLINE = 5.0  # a scrape waits at most this long for its review, retries included
MAX_INFLIGHT = 4  # reviews running at once; more answer 503 at once instead of queueing
OUTAGE_SECONDS = 2.0  # after a failed review, uncached tokens get 503 without a call for this long
CERT_CHECK_SECONDS = 10.0  # a mounted certificate's files are looked at (two stat calls) at most this often


class MetricsAuth:
    """Decides 200/401/403 (503: the API server cannot decide now) for one ``Authorization`` header.

    Every review call has a timeout and runs on this class's own threads (at most ``MAX_INFLIGHT``), never the
    event loop's default pool; concurrent requests with one token share one review; answers are cached per token
    (refusals apart, so unknown tokens cannot push out a scraper's entry), and after a failed call the API server
    is left alone for ``OUTAGE_SECONDS``."""

    def __init__(self, api: kubernetes.client.ApiClient, clock=time.monotonic):
        self.authn = kubernetes.client.AuthenticationV1Api(api)
        self.authz = kubernetes.client.AuthorizationV1Api(api)
        self.clock = clock
        self._cache: collections.OrderedDict[str, tuple[float, int]] = collections.OrderedDict()
        self._negative: collections.OrderedDict[str, tuple[float, int]] = collections.OrderedDict()
        self._pending: dict[str, asyncio.Future[int]] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(MAX_INFLIGHT, thread_name_prefix="metrics-review")
        self._down_until = 0.0
        self._running = 0  # review threads still running, including those a scrape stopped waiting for
        self._lock = threading.Lock()
        self.reviews = 0  # review calls made (tests)

    def _run(self, token: str) -> int:
        try:
            return self._review(token)
        finally:
            with self._lock:
                self._running -= 1

    def _review(self, token: str) -> int:
        review = self.authn.create_token_review(
            kubernetes.client.V1TokenReview(spec=kubernetes.client.V1TokenReviewSpec(token=token)),
            _request_timeout=REVIEW_TIMEOUT,
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
            ),
            _request_timeout=REVIEW_TIMEOUT,
        )
        if sar.status and sar.status.allowed:
            return 200
        # The scraper is told only that it is not allowed; who it is and what would allow it go to the log
        # (once per token and CACHE_SECONDS: the answer is cached).
        log.info(
            "metrics: %s may not get %s (%s); the chart's <release>-metrics-reader ClusterRole grants it",
            user.username,
            PATH,
            (sar.status.reason if sar.status else None) or "no rule allows it",
        )
        return 403

    def _cached(self, key: str, now: float) -> int | None:
        for cache in (self._cache, self._negative):
            hit = cache.get(key)
            if hit is not None:
                if now - hit[0] < CACHE_SECONDS:
                    return hit[1]
                del cache[key]
        return None

    def _remember(self, key: str, now: float, answer: int) -> None:
        cache, limit = (self._negative, NEGATIVE_CACHE_MAX) if answer == 401 else (self._cache, CACHE_MAX)
        cache[key] = (now, answer)
        cache.move_to_end(key)
        while len(cache) > limit:
            cache.popitem(last=False)  # the oldest entry

    async def status(self, header: str | None) -> int:
        if not header or not header.startswith("Bearer ") or len(header) > MAX_TOKEN_BYTES:
            return 401
        token = header[len("Bearer ") :].strip()
        if not token:
            return 401
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        answer = self._cached(key, now)
        if answer is not None:
            return answer
        pending = self._pending.get(key)
        if pending is not None:  # the same token under review: share its answer
            return await asyncio.shield(pending)
        if now < self._down_until or self._running >= MAX_INFLIGHT:
            return 503
        loop = asyncio.get_running_loop()
        self._pending[key] = future = loop.create_future()
        try:
            answer = await self._decide(token)
            if answer != 503:
                self._remember(key, self.clock(), answer)
            future.set_result(answer)
            return answer
        finally:
            if not future.done():
                future.set_result(503)
            del self._pending[key]

    async def _decide(self, token: str) -> int:
        self.reviews += 1
        loop = asyncio.get_running_loop()
        with self._lock:
            self._running += 1
        try:
            return await asyncio.wait_for(loop.run_in_executor(self._pool, self._run, token), REVIEW_DEADLINE)
        except kubernetes.client.ApiException as e:  # the API server answered without deciding: nothing is cached
            log.warning("metrics: token review failed: %s %s", e.status, e.reason)
            if (e.status or 500) < 500 and e.status != 429:
                return 401
        except Exception as e:  # unreachable, timed out, or an answer the client cannot read
            log.warning("metrics: token review failed: %s: %s", type(e).__name__, e)
        self._down_until = self.clock() + OUTAGE_SECONDS
        return 503

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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


def _context(crt: pathlib.Path, pem: pathlib.Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(crt), str(pem))
    return ctx


class RotatingCertificate:
    """The certificate in ``cert_dir``, served afresh once its files change: no restart when it is rotated.

    Why: cert-manager renews a certificate well before it expires and the kubelet then updates the mounted Secret,
    by writing the new files into a fresh directory and swapping the volume's ``..data`` symlink to it. A context
    loaded once at start-up would serve the old certificate until it expires and every scrape then fails.

    How: ``context`` is the listening context; its TLS handshake callback (run at every ClientHello, with or without
    SNI) looks at the files at most every ``check_seconds``: one ``stat`` of each, which follows the symlinks, so a
    swap shows as another inode and a rewrite in place as another mtime or size. When they changed, the pair is
    loaded into a new context and every handshake from then on is switched to it. A pair that does not load (a
    certificate that does not match its key while the files are being replaced one by one) is logged and the
    previous certificate served on; the next change is tried again."""

    def __init__(self, cert_dir: str | os.PathLike, *, check_seconds: float | None = None, clock=time.monotonic):
        self.crt = pathlib.Path(cert_dir) / "tls.crt"
        self.key = pathlib.Path(cert_dir) / "tls.key"
        self.check_seconds = CERT_CHECK_SECONDS if check_seconds is None else check_seconds
        self.clock = clock
        self.reloads = 0  # certificates loaded after the first (tests)
        self._stamp = self._files()
        self.context = _context(self.crt, self.key)
        self._current = self.context
        self._checked_at = clock()
        self.context.sni_callback = self._hello

    def _files(self) -> tuple | None:
        """What identifies the current pair: device, inode, mtime and size of both files (None: one is missing)."""
        try:
            return tuple((s.st_dev, s.st_ino, s.st_mtime_ns, s.st_size) for s in map(os.stat, (self.crt, self.key)))
        except OSError:
            return None

    def current(self) -> ssl.SSLContext:
        """The context to serve with now, loading the files again if they changed since the last look."""
        now = self.clock()
        if now - self._checked_at >= self.check_seconds:
            self._checked_at = now
            stamp = self._files()
            if stamp is not None and stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._current = _context(self.crt, self.key)
                except (OSError, ssl.SSLError) as e:
                    log.warning(
                        "metrics: the changed certificate in %s does not load, serving the previous one: %s",
                        self.crt.parent,
                        e,
                    )
                else:
                    self.reloads += 1
                    log.info("metrics: serving the rotated certificate from %s", self.crt.parent)
        return self._current

    def _hello(self, conn, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        current = self.current()
        if current is not self.context:
            conn.context = current
        return None


def server_context(cert_dir: str | None, names: list[str]) -> ssl.SSLContext:
    """TLS for the metrics endpoint: the certificate in ``cert_dir``, followed through rotations
    (``RotatingCertificate``), else a self-signed one (in a private temporary directory: the operator's root
    filesystem is read-only, /tmp is its writable emptyDir)."""
    if cert_dir:
        return RotatingCertificate(cert_dir).context
    crt, pem = self_signed(pathlib.Path(tempfile.mkdtemp(prefix="specdecode-metrics-")), names)
    return _context(crt, pem)
