"""What a write request carries besides its URL: the body (JSON or YAML) and the field manager it writes as."""

from __future__ import annotations

from typing import Any

import yaml

from .errors import Reject


def body_of(request) -> Any:
    data = request.data
    if data is None and request.text:
        try:
            data = yaml.safe_load(request.text)
        except yaml.YAMLError as e:
            raise Reject(400, f"malformed body: {e}", "BadRequest") from None
    return data


def manager_of(request) -> str:
    """``?fieldManager=``, else the client's name from its User-Agent, as the real server defaults it."""
    return request.params.get("fieldManager") or _manager_from_agent(request)


def _manager_from_agent(request) -> str:
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0] or "unknown"
