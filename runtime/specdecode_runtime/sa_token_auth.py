"""Step-control callers authenticated by a Kubernetes ServiceAccount token, verified locally against the cluster's
service-account issuer keys: no Secret to distribute, no API call per request.

The operator presents its own projected ServiceAccount token bound to the runtime's audience (kubelet obtains it
with the TokenRequest API and rotates it). The runtime checks it as an OIDC relying party: the issuer's discovery
document (``<api server>/.well-known/openid-configuration``) names the JWKS; the token's signature must verify with
one of those keys, and its issuer, audience and expiry must hold (PyJWT). A token of the right issuer and audience
but another subject (another ServiceAccount) is authentic but not allowed: 403; anything else is 401. Keys are
fetched once and again when a token names a key id the set lacks (the issuer rotated its keys), at most once per
``cooldown`` seconds.

The API server serves the discovery document and the JWKS to ServiceAccounts (ClusterRole
``system:service-account-issuer-discovery``, bound to ``system:serviceaccounts`` by default), so the runtime
authenticates those two reads with its own mounted token.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import jwt

MAX_DISCOVERY_BYTES = 64 * 1024
MAX_TOKEN_BYTES = 16 * 1024  # a projected ServiceAccount token is ~1 kB
ALGORITHMS = ["RS256", "ES256"]  # what kube-apiserver signs ServiceAccount tokens with


class Refused(Exception):
    """The caller is not allowed: ``status`` 401 (not authenticated) or 403 (authenticated, not allowed)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Settings:
    issuer: str  # the cluster's --service-account-issuer, e.g. https://kubernetes.default.svc.cluster.local
    audience: str  # the audience the caller's token must be bound to
    subjects: tuple[str, ...]  # allowed callers: system:serviceaccount:<namespace>:<name>
    api_server: str  # where the issuer's discovery document is served (in a pod: https://kubernetes.default.svc)
    ca_file: str | None = None
    token_file: str | None = None  # the runtime's own token, for the discovery reads
    timeout: float = 5.0
    cooldown: float = 30.0  # at most one key refresh per this many seconds


class ServiceAccountVerifier:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._ssl = ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file else None
        self._jwks: jwt.PyJWKClient | None = None

    def _headers(self) -> dict[str, str]:
        if not self.settings.token_file:
            return {}
        token = Path(self.settings.token_file).read_text()[:MAX_TOKEN_BYTES].strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _jwks_client(self) -> jwt.PyJWKClient:
        """The issuer's JWKS, located by OIDC discovery. Its path is fetched from the API server we were given: the
        issuer's host name (kubernetes.default.svc...) resolves only inside the cluster."""
        if self._jwks is None:
            url = self.settings.api_server.rstrip("/") + "/.well-known/openid-configuration"
            req = urllib.request.Request(url, headers=self._headers())
            with urllib.request.urlopen(req, timeout=self.settings.timeout, context=self._ssl) as r:
                doc = json.loads(r.read(MAX_DISCOVERY_BYTES + 1)[:MAX_DISCOVERY_BYTES])
            if doc.get("issuer") != self.settings.issuer:
                raise Refused(
                    401,
                    f"the API server's issuer is {doc.get('issuer')!r}, not the configured {self.settings.issuer!r}",
                )
            path = urllib.parse.urlsplit(doc["jwks_uri"]).path
            self._jwks = jwt.PyJWKClient(
                self.settings.api_server.rstrip("/") + path,
                cache_keys=False,
                lifespan=self.settings.cooldown,
                timeout=self.settings.timeout,
                ssl_context=self._ssl,
                cooldown_duration=self.settings.cooldown,
            )
        self._jwks.headers = self._headers()  # the runtime's own token rotates too
        return self._jwks

    def verify(self, token: str) -> str:
        """The caller's subject when it may call; ``Refused`` otherwise. Blocking (a key fetch): call it from a
        thread in an event loop."""
        try:
            key = self._jwks_client().get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Refused(401, "the ServiceAccount token has expired") from None
        except jwt.InvalidAudienceError:
            raise Refused(
                401, f"the ServiceAccount token is not bound to audience {self.settings.audience!r}"
            ) from None
        except jwt.InvalidIssuerError:
            raise Refused(401, f"the token was not issued by {self.settings.issuer!r}") from None
        except jwt.PyJWKClientConnectionError as e:
            raise Refused(401, f"the issuer's keys could not be read: {e}") from None
        except (jwt.PyJWKClientError, jwt.InvalidTokenError) as e:
            raise Refused(401, f"not a valid ServiceAccount token of this cluster: {e}") from None
        except (OSError, ValueError, KeyError) as e:  # the discovery document
            raise Refused(401, f"the issuer's discovery document could not be read: {e}") from None
        subject = claims["sub"]
        if subject not in self.settings.subjects:
            raise Refused(
                403, f"{subject} may not change speculative steps (allowed: {', '.join(self.settings.subjects)})"
            )
        return subject


SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ENV_ISSUER = "SPECDECODE_CONTROL_ISSUER"


def settings_from_env(env=None) -> Settings | None:
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
