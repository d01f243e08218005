"""Step-control callers authenticated by a Kubernetes ServiceAccount token, verified locally against the cluster's
service-account issuer keys: no Secret to distribute, no API call per request.

The operator obtains, per SpecDecodeDeployment, a short-lived token of its ServiceAccount bound to that
deployment's own audience (TokenRequest) and presents it. The runtime checks it as an OIDC relying party: the
issuer's discovery document (``<api server>/.well-known/openid-configuration``) names the JWKS; the token's signature
must verify with the key its ``kid`` names, using that key's own algorithm, and its issuer, audience (this
deployment's, so a token captured by another deployment's pod opens nothing here) and expiry must hold (PyJWT). A
token of the right issuer and audience but another subject (another ServiceAccount) is authentic but not allowed:
403; any other token, well-formed or not, is 401. The reasons go to the log, never into the answer.

Keys are fetched once and again when a token names a key id the set lacks (the issuer rotated its keys), at most
once per ``cooldown`` seconds (``failure_cooldown`` after a failed read). A refresh runs in one thread of its own
(single flight) with a bounded read; requests wait for it at most ``refresh_deadline`` seconds and then get
``Refused(503)``, as they do while the API server cannot be read. Nothing queues behind a hanging key endpoint.

The API server serves the discovery document and the JWKS to ServiceAccounts (ClusterRole
``system:service-account-issuer-discovery``, bound to ``system:serviceaccounts`` by default), so the runtime
authenticates those two reads with its own mounted token.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import ssl
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

import jwt

log = logging.getLogger(__name__)

MAX_DISCOVERY_BYTES = 64 * 1024  # the discovery document and the JWKS alike
MAX_TOKEN_BYTES = 16 * 1024  # a projected ServiceAccount token is ~1 kB
MAX_KEYS = 64
ALGORITHMS = ("RS256", "ES256")  # what kube-apiserver signs ServiceAccount tokens with


class Refused(Exception):
    """The caller is not allowed: ``status`` 401 (not authenticated), 403 (authenticated, not allowed) or 503 (the
    issuer's keys cannot be read now). ``message`` is for the log only."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class _Malformed(Exception):
    """The discovery document or the JWKS is not what an issuer serves."""


@dataclass(frozen=True)
class Settings:
    issuer: str  # the cluster's --service-account-issuer, e.g. https://kubernetes.default.svc.cluster.local
    audience: str  # the audience the caller's token must be bound to: this deployment's own
    subjects: tuple[str, ...]  # allowed callers: system:serviceaccount:<namespace>:<name>
    api_server: str  # where the issuer's discovery document is served (in a pod: https://kubernetes.default.svc)
    ca_file: str | None = None
    token_file: str | None = None  # the runtime's own token, for the discovery reads
    timeout: float = 5.0  # one key refresh (both reads) in all
    cooldown: float = 30.0  # at most one key refresh per this many seconds
    failure_cooldown: float = 5.0  # after a refresh that failed
    refresh_deadline: float = 2.0  # the longest a request waits for a refresh in flight


class ServiceAccountVerifier:
    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.clock = clock
        self._ssl = ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file else None
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] = {}
        self._inflight: concurrent.futures.Future[None] | None = None
        self._last_attempt: float | None = None
        self._outage: str | None = None  # why the last refresh could not read the keys; None after a good read
        self._failed = False
        self.refreshes = 0  # key refreshes started (tests, logs)

    # ------------------------------------------------------------------ reading the issuer's keys
    def _headers(self) -> dict[str, str]:
        if not self.settings.token_file:
            return {}
        with open(self.settings.token_file, "rb") as f:
            token = f.read(MAX_TOKEN_BYTES).decode("utf-8", "replace").strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _get(self, url: str, deadline: float) -> dict[str, Any]:
        """One JSON object from the API server, at most MAX_DISCOVERY_BYTES, read before ``deadline``."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no time left to read {url}")
        req = urllib.request.Request(
            url, headers={**self._headers(), "Accept": "application/json, application/jwk-set+json"}
        )
        body = bytearray()
        with urllib.request.urlopen(req, timeout=left, context=self._ssl) as r:
            while len(body) <= MAX_DISCOVERY_BYTES:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} not read within {self.settings.timeout} s")
                chunk = r.read1(16 * 1024)
                if not chunk:
                    break
                body += chunk
        if len(body) > MAX_DISCOVERY_BYTES:
            raise _Malformed(f"{url}: more than {MAX_DISCOVERY_BYTES} bytes")
        try:
            doc = json.loads(body)
        except ValueError as e:  # UnicodeDecodeError and JSONDecodeError alike
            raise _Malformed(f"{url}: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise _Malformed(f"{url}: a JSON {type(doc).__name__}, not an object")
        return doc

    def _fetch_keys(self) -> dict[str, jwt.PyJWK]:
        """The issuer's keys by key id. Its JWKS path is read from the API server we were given: the issuer's host
        name (kubernetes.default.svc...) resolves only inside the cluster."""
        deadline = time.monotonic() + self.settings.timeout
        base = self.settings.api_server.rstrip("/")
        doc = self._get(base + "/.well-known/openid-configuration", deadline)
        if doc.get("issuer") != self.settings.issuer:
            raise _Malformed(f"the API server's issuer is {doc.get('issuer')!r}, not {self.settings.issuer!r}")
        uri = doc.get("jwks_uri")
        if not isinstance(uri, str):
            raise _Malformed(f"jwks_uri is {type(uri).__name__}, not a URL")
        path = urllib.parse.urlsplit(uri).path
        if not path.startswith("/"):
            raise _Malformed(f"jwks_uri {uri!r} has no path")
        jwks = self._get(base + path, deadline)
        entries = jwks.get("keys")
        if not isinstance(entries, list):
            raise _Malformed("the JWKS has no list of keys")
        keys: dict[str, jwt.PyJWK] = {}
        for entry in entries[:MAX_KEYS]:
            if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
                continue
            try:
                key = jwt.PyJWK(entry)
            except Exception as e:  # PyJWT raises several kinds (and KeyError) on a key it cannot load
                log.info("issuer key %r skipped: %s: %s", entry.get("kid"), type(e).__name__, e)
                continue
            if key.algorithm_name in ALGORITHMS:
                keys[entry["kid"]] = key
        if not keys:
            raise _Malformed("the JWKS holds no usable RS256 or ES256 key")
        return keys

    def _refresh(self, done: concurrent.futures.Future[None]) -> None:
        failure: str | None
        outage: str | None
        try:
            keys = self._fetch_keys()
        except _Malformed as e:
            failure, outage = f"the issuer's documents are invalid: {e}", None
        except Exception as e:  # the API server cannot be read: an outage, not the caller's fault
            failure, outage = f"{type(e).__name__}: {e}", f"{type(e).__name__}: {e}"
        else:
            failure = outage = None
        with self._lock:
            if failure is None:
                self._keys = keys
            self._failed, self._outage, self._inflight = failure is not None, outage, None
        if failure is not None:
            log.warning("step control: issuer keys not refreshed: %s", failure)
        done.set_result(None)

    def _start_refresh(self) -> concurrent.futures.Future[None] | None:
        """The refresh in flight, or a new one when the cooldown allows; None otherwise."""
        with self._lock:
            if self._inflight is not None:
                return self._inflight
            wait = self.settings.failure_cooldown if self._failed else self.settings.cooldown
            now = self.clock()
            if self._last_attempt is not None and now - self._last_attempt < wait:
                return None
            self._last_attempt = now
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._inflight = done
            self.refreshes += 1
        threading.Thread(target=self._refresh, args=(done,), name="issuer-keys", daemon=True).start()
        return done

    # ------------------------------------------------------------------ verifying a token
    async def verify(self, token: str) -> str:
        """The caller's subject when it may call; ``Refused`` otherwise. Never blocks the event loop for longer than
        a signature check; waits at most ``refresh_deadline`` for a key refresh."""
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise Refused(401, "no token, or a token longer than any ServiceAccount token")
        try:
            header = jwt.get_unverified_header(token)
        except Exception as e:
            raise Refused(401, f"not a JWT: {type(e).__name__}: {e}") from None
        kid, alg = header.get("kid"), header.get("alg")
        if not isinstance(kid, str) or alg not in ALGORITHMS:
            raise Refused(401, f"key id {kid!r} / algorithm {alg!r} not of a ServiceAccount token")
        key = self._keys.get(kid)
        if key is None:
            done = self._start_refresh()
            if done is not None:
                try:
                    await asyncio.wait_for(
                        asyncio.shield(asyncio.wrap_future(done)), timeout=self.settings.refresh_deadline
                    )
                except TimeoutError:
                    raise Refused(503, "the issuer's keys are being read; not done in time") from None
            key = self._keys.get(kid)
            if key is None:
                if self._outage is not None:
                    raise Refused(503, f"the issuer's keys cannot be read: {self._outage}")
                raise Refused(401, f"key id {kid!r} is not among the issuer's keys")
        return self.check(token, key, alg)

    def check(self, token: str, key: jwt.PyJWK, alg: str) -> str:
        """Signature (with the key's own algorithm), issuer, audience, expiry, then the subject."""
        if alg != key.algorithm_name:
            raise Refused(401, f"algorithm {alg} does not match key type {key.algorithm_name}")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as e:
            raise Refused(401, f"{type(e).__name__}: {e}") from None
        except Exception as e:  # whatever else a crafted token makes the library raise is still the token's fault
            raise Refused(401, f"token not verifiable: {type(e).__name__}: {e}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or subject not in self.settings.subjects:
            raise Refused(403, f"{subject!r} may not change speculative steps")
        return subject


SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ENV_ISSUER = "SPECDECODE_CONTROL_ISSUER"


def settings_from_env(env: Any = None) -> Settings | None:
    """ServiceAccount-token auth as the pod's environment configures it; None (shared-Secret token only) when
    ``SPECDECODE_CONTROL_ISSUER`` is unset."""
    env = os.environ if env is None else env
    issuer = env.get(ENV_ISSUER, "").strip()
    if not issuer:
        return None
    subjects = tuple(s.strip() for s in env.get("SPECDECODE_CONTROL_SUBJECTS", "").split(",") if s.strip())
    audience = env.get("SPECDECODE_CONTROL_AUDIENCE", "").strip()
    if not subjects or not audience:
        raise ValueError(
            "SPECDECODE_CONTROL_ISSUER needs SPECDECODE_CONTROL_AUDIENCE and SPECDECODE_CONTROL_SUBJECTS "
            "(system:serviceaccount:<namespace>:<name>, comma-separated)"
        )
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    default_api = (
        f"https://{'[' + host + ']' if host and ':' in host else host}:{port}"
        if host
        else "https://kubernetes.default.svc"
    )
    return Settings(
        issuer=issuer,
        audience=audience,
        subjects=subjects,
        api_server=env.get("SPECDECODE_CONTROL_API_SERVER", default_api),
        ca_file=env.get("SPECDECODE_CONTROL_CA_FILE", f"{SA_DIR}/ca.crt"),
        token_file=env.get("SPECDECODE_CONTROL_TOKEN_FILE", f"{SA_DIR}/token"),
    )
