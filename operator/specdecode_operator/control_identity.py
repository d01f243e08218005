"""The operator's identity toward the runtime pods' step endpoint, when it is its ServiceAccount token.

With ``control_auth: ServiceAccount`` (the chart's default) the operator asks the API server (TokenRequest on its
own ServiceAccount, ``serviceaccounts/token`` ``create``) for a token per SpecDecodeDeployment, bound to that
deployment's own audience (``render.control_auth.deployment_audience``) and valid for ``TOKEN_SECONDS``; it is
requested again once ``REFRESH_FRACTION`` of its life has passed, and dropped when the deployment's tuner asks for
no push. Before a token is sent, its claims are checked against what was asked for (audience exactly that one,
subject our ServiceAccount, expiry within the requested life): a token for anything else is never sent.

The runtime pods are told what to accept (``render.control_auth.ControlAuth``): the cluster's issuer (read once
from the API server's OIDC discovery document), our ServiceAccount, and their own audience. No Secret exists in
the object's namespace, so Live step control works in every watched namespace without a Secret grant.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import time
import weakref
from typing import Any

from .kube_client import ApiError
from .render.control_auth import ControlAuth, deployment_audience, service_account_subject

log = logging.getLogger("specdecode.operator")
TOKEN_SECONDS = 600  # the shortest life the API server grants
REFRESH_FRACTION = 0.5  # a token is replaced once half its life has passed
CLOCK_SKEW = 60  # seconds of the API server's clock ahead of ours that a token's expiry may show
MAX_TOKENS = 4096  # deployments whose token is kept
DISCOVERY = "/.well-known/openid-configuration"


def _segment(segment: str) -> dict:
    value = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    if not isinstance(value, dict):
        raise ValueError("a JWT segment that is not a JSON object")
    return value


def unverified_claims(token: str) -> dict:
    """The claims of a compact JWS (header.payload.signature) without checking its signature: what
    ``jwt.decode(token, options={"verify_signature": False})`` returns, and ValueError where it raises. Read here
    with the standard library: PyJWT and the ``cryptography`` package it loads were the operator process's only
    users of them, about 8 MB of resident memory for a base64 decode of our own token."""
    header, payload, _ = token.split(".", 2)
    _segment(header)
    return _segment(payload)


def subject(config) -> str:
    return service_account_subject(config.operator_namespace, config.control_service_account)


def token_problem(token: str, audience: str, sub: str, now: float, seconds: int = TOKEN_SECONDS) -> str | None:
    """Why ``token`` must not be sent to a deployment of ``audience`` (None: it may): it must be bound to exactly
    that audience, name our ServiceAccount, and expire within the life we asked for."""
    try:
        claims = unverified_claims(token)
    except (ValueError, UnicodeDecodeError) as e:
        return f"not a JWT ({e})"
    aud = claims.get("aud")
    if (aud if isinstance(aud, list) else [aud]) != [audience]:
        return f"bound to audience {aud!r}, not only {audience!r}"
    if claims.get("sub") != sub:
        return f"subject {claims.get('sub')!r}, not {sub!r}"
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or not now < exp <= now + seconds + CLOCK_SKEW:
        return f"expiry {exp!r} not within {seconds} s from now"
    return None


class ControlIdentity:
    """Per-deployment step-control tokens of the operator's ServiceAccount, through ``client`` (a KubeClient)."""

    def __init__(self, client, config, clock=time.time):
        self.client, self.config, self.clock = client, config, clock
        self.subject = subject(config)
        self.issuer: str | None = None
        self._tokens: collections.OrderedDict[str, tuple[float, float, str]] = collections.OrderedDict()
        self.requests = 0  # TokenRequests made (tests)

    async def auth(self) -> ControlAuth:
        """What the runtime pods must accept. The issuer is read once (ApiError until it could be)."""
        if self.issuer is None:
            doc = await self.client.request("GET", DISCOVERY, verb="get")
            issuer = doc.get("issuer") if isinstance(doc, dict) else None
            if not isinstance(issuer, str) or not issuer:
                raise ApiError(0, "NoIssuer", f"the API server's {DISCOVERY} names no issuer")
            self.issuer = issuer
        return ControlAuth(issuer=self.issuer, audience=self.config.control_audience, subjects=(self.subject,))

    def cached_auth(self) -> ControlAuth | None:
        if self.issuer is None:
            return None
        return ControlAuth(issuer=self.issuer, audience=self.config.control_audience, subjects=(self.subject,))

    async def token_for(self, namespace: str, name: str, uid: str | None) -> str | None:
        """A token for this deployment's pods only; None (and a log line) when none can be had now."""
        audience = deployment_audience(self.config.control_audience, namespace, name, uid)
        now = self.clock()
        hit = self._tokens.get(audience)
        if hit is not None and now < hit[0] + (hit[1] - hit[0]) * REFRESH_FRACTION:
            self._tokens.move_to_end(audience)
            return hit[2]
        self._tokens.pop(audience, None)
        ns, sa = self.config.operator_namespace, self.config.control_service_account
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": TOKEN_SECONDS},
        }
        self.requests += 1
        try:
            out = await self.client.request(
                "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", body=body, verb="create"
            )
        except ApiError as e:
            log.warning("step control: no token for %s/%s: TokenRequest failed: %s %s", namespace, name, e.status, e)
            return None
        token = ((out or {}).get("status") or {}).get("token") if isinstance(out, dict) else None
        if not isinstance(token, str) or not token:
            log.warning("step control: the TokenRequest for %s/%s returned no token", namespace, name)
            return None
        problem = token_problem(token, audience, self.subject, now)
        if problem is not None:
            log.warning("step control: token for %s/%s not sent: %s", namespace, name, problem)
            return None
        self._tokens[audience] = (now, float(unverified_claims(token)["exp"]), token)
        while len(self._tokens) > MAX_TOKENS:
            self._tokens.popitem(last=False)
        return token

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        """Drop the cached token (a pod refused it: ask for a new one next time)."""
        self._tokens.pop(deployment_audience(self.config.control_audience, namespace, name, uid), None)


_identities: weakref.WeakKeyDictionary[Any, ControlIdentity] = weakref.WeakKeyDictionary()


def identity(client, config) -> ControlIdentity | None:
    """The operator's one ControlIdentity for ``client`` in ServiceAccount mode, else None (Secret mode)."""
    if config.control_auth != "ServiceAccount":
        return None
    found = _identities.get(client)
    if found is None or found.config is not config:
        found = _identities[client] = ControlIdentity(client, config)
    return found
