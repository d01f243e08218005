"""Fault injection and the request log: how tests make the server fail or slow, and count what the operator sent."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Fault:
    """Answer matching requests with ``status`` (after ``delay`` seconds) or only delay them (a slow server)."""

    verb: str | None = None  # get, list, watch, create, update, patch, apply, delete
    resource: str | None = None  # plural
    name: str | None = None
    subresource: str | None = "*"  # "*" matches any, None only the main resource
    status: int | None = 500
    delay: float = 0.0
    times: int | None = None  # None: until removed
    every: int = 1  # hit every n-th matching request
    seen: int = 0
    hits: int = 0

    def matches(self, rec: RequestRecord) -> bool:
        if self.verb and self.verb != rec.verb and not (self.verb == "patch" and rec.verb == "apply"):
            return False
        if self.resource and self.resource != rec.resource:
            return False
        if self.name and self.name != rec.name:
            return False
        if self.subresource != "*" and self.subresource != rec.subresource:
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        self.seen += 1
        if (self.seen - 1) % self.every:
            return False
        self.hits += 1
        return True


@dataclasses.dataclass
class RequestRecord:
    verb: str
    group: str
    version: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    field_manager: str | None
    user_agent: str = ""
    status: int = 0
    time: float = 0.0

    @property
    def is_write(self) -> bool:
        return self.verb in ("create", "update", "patch", "apply", "delete")


def verb_of(request, method: str) -> str:
    """The API verb of a request, as RBAC and audit logs name it (apply is a PATCH with the apply content type)."""
    if method == "GET":
        if request.params.get("watch") in ("true", "1"):
            return "watch"
        return "get" if request.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        ctype = request.headers.get("Content-Type", "")
        return "apply" if ctype.startswith("application/apply-patch") else "patch"
    if method == "DELETE":
        return "delete"
    return method.lower()
