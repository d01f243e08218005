"""The ``Status`` failures the API server answers with, so clients (kopf, the kubernetes client) see real errors."""

from __future__ import annotations

import aiohttp.web

from .resources import ResourceMeta

_REASONS = {
    400: "BadRequest",
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    500: "InternalError",
    503: "ServiceUnavailable",
    429: "TooManyRequests",
    504: "Timeout",
}


def status_response(code: int, message: str, reason: str | None = None, details: dict | None = None):
    return aiohttp.web.json_response(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": code,
            "reason": reason or _REASONS.get(code, "Unknown"),
            "message": message,
            "details": details or {},
        },
        status=code,
    )


class Reject(Exception):
    """Raised anywhere in a handler; the dispatcher turns it into a ``status_response``."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code, self.message, self.reason, self.details = code, message, reason, details


def conflict(meta: ResourceMeta, name: str) -> Reject:
    """A stale ``resourceVersion``: the optimistic-concurrency failure clients retry on."""
    return Reject(
        409,
        f'Operation cannot be fulfilled on {meta.plural}.{meta.group} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        "Conflict",
    )
