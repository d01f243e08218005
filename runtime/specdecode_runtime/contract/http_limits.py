"""Limits every HTTP server of the project applies (the runtime's control port, the simulator, the operator's
metrics and health ports), and a bounded JSON body reader.

Why here: the control port accepts writes that reshape GPU work, and the operator's ports face the whole cluster
network. A client that sends headers slowly, a huge body, a deeply nested document or a 10 000-digit integer must
cost a bounded amount of memory and time and get a 4xx, never a 5xx or a stuck connection.

- ``SERVER_LIMITS`` are ``aiohttp.web.AppRunner`` keyword arguments: a connection must deliver a complete request
  within ``keepalive_timeout`` seconds of connecting (aiohttp arms that timer at connection time and closes the
  connection if no full request head has arrived), and request lines and headers are capped.
- ``read_json`` reads at most ``max_bytes`` of a body within ``timeout`` seconds, requires ``application/json``
  (415 otherwise), and parses with bounded nesting depth and integer length.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

REQUEST_DEADLINE_SECONDS = 10.0  # a connection must deliver a complete request head within this
SERVER_LIMITS: dict[str, Any] = {
    "keepalive_timeout": REQUEST_DEADLINE_SECONDS,
    "max_line_size": 4096,
    "max_field_size": 4096,
    "max_headers": 32,
}
MAX_BODY_BYTES = 16 * 1024  # a full step table is < 1 kB
MAX_JSON_DEPTH = 8
MAX_INT_DIGITS = 18  # fits int64; Python's own limit (4300 digits) raises ValueError instead


class BodyError(Exception):
    """A request body refused with a 4xx status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _bounded_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS:
        raise BodyError(400, f"integer with {len(digits)} digits: at most {MAX_INT_DIGITS} are accepted")
    return int(text)


def _check_depth(text: str, limit: int) -> None:
    """Reject nesting deeper than ``limit`` before the parser recurses (Python's parser raises RecursionError)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                raise BodyError(400, f"JSON nested deeper than {limit} levels")
        elif ch in "]}":
            depth -= 1


def parse_json(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse ``raw`` as UTF-8 JSON with bounded depth and integer length; every failure is a ``BodyError(400)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError(400, "body is not UTF-8") from None
    _check_depth(text, max_depth)
    try:
        return json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except BodyError:
        raise
    except (ValueError, RecursionError) as exc:
        raise BodyError(400, f"body is not valid JSON: {str(exc)[:200]}") from None


def _no_constant(name: str) -> Any:
    raise BodyError(400, f"{name} is not JSON")


async def read_json(
    request: Any, *, max_bytes: int = MAX_BODY_BYTES, timeout: float | None = None, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """The JSON body of an aiohttp request, bounded in content type, size, time (default
    ``REQUEST_DEADLINE_SECONDS``), depth and integer length."""
    timeout = REQUEST_DEADLINE_SECONDS if timeout is None else timeout
    if request.content_type != "application/json":
        raise BodyError(415, f"Content-Type must be application/json, got {request.content_type or 'none'!r}")
    if request.content_length is not None and request.content_length > max_bytes:
        raise BodyError(413, f"body of {request.content_length} bytes: at most {max_bytes} are accepted")
    try:
        async with asyncio.timeout(timeout):
            raw = bytearray()
            while len(raw) <= max_bytes:
                chunk = await request.content.read(max_bytes + 1 - len(raw))
                if not chunk:
                    break
                raw += chunk
    except TimeoutError:
        raise BodyError(408, f"body not received within {timeout:g} s") from None
    if len(raw) > max_bytes:
        raise BodyError(413, f"body larger than {max_bytes} bytes")
    return parse_json(bytes(raw), max_depth=max_depth)
