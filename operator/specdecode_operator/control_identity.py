"""The operator's identity toward the runtime pods' step endpoint, when it is its ServiceAccount token.

With ``control_auth: ServiceAccount`` (the chart's default) kubelet projects a token of the operator's
ServiceAccount, bound to the runtime's audience, at ``control_token_file`` and rotates it. The operator sends that
token with every step-table push (re-read when the file changes), and tells the runtime pods what to accept: the
token's own issuer and subject (``render.control_auth.ControlAuth``). No Secret exists in the object's namespace, so
Live step control works in every watched namespace without a Secret grant. When the file is missing or unreadable,
the per-object control-token Secret is used as before (and a warning logged once).
"""

from __future__ import annotations

import base64
import json
import logging
import os

from .render.control_auth import ControlAuth

log = logging.getLogger("specdecode.operator")
MAX_TOKEN_BYTES = 16 * 1024
_cache: dict[str, tuple[tuple, str]] = {}  # path -> ((mtime_ns, size), token)
_warned: set[str] = set()


def bearer(config) -> str | None:
    """The operator's projected token, or None (Secret mode, or no readable token file)."""
    if config.control_auth != "ServiceAccount":
        return None
    path = config.control_token_file
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
        hit = _cache.get(path)
        if hit is None or hit[0] != stamp:
            with open(path, "rb") as f:
                token = f.read(MAX_TOKEN_BYTES + 1)[:MAX_TOKEN_BYTES].decode().strip()
            _cache[path] = hit = (stamp, token)
        return hit[1] or None
    except (OSError, UnicodeDecodeError) as e:
        if path not in _warned:
            _warned.add(path)
            log.warning(
                "control token file %s unusable (%s): step control falls back to the control-token Secret", path, e
            )
        return None


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


def control_auth(config) -> ControlAuth | None:
    """What the runtime pods must accept: the issuer and subject of our own token, for ``control_audience``."""
    token = bearer(config)
    if token is None:
        return None
    try:
        claims = unverified_claims(token)  # our own token, from kubelet
        return ControlAuth(issuer=claims["iss"], audience=config.control_audience, subjects=(claims["sub"],))
    except (ValueError, KeyError) as e:
        if "claims" not in _warned:
            _warned.add("claims")
            log.warning(
                "control token file %s is not a ServiceAccount token (%s): step control falls back to the "
                "control-token Secret",
                config.control_token_file,
                e,
            )
        return None
