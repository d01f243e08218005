"""The draft-swap endpoint's wire format: ``GET/POST`` :data:`DRAFT_PATH` on the runtime's control port.

``POST {"source": "/abs/path/to/draft"}`` asks the pod to load a new draft checkpoint in place of the one it serves
(same architecture, tensor names, shapes and dtypes: docs/runtime.md "Loading a new draft in place"); the answer is
the new identity, or a refusal naming its cause while the old draft keeps serving. ``GET`` answers the identity
served now. Standard library only: the operator's client and the runtime's endpoint share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DRAFT_PATH = "/specdecode/v1/draft"
MAX_SOURCE_CHARS = 4096  # PATH_MAX on Linux

# Why a swap was refused (``cause`` of a refusal). Every one of them leaves the old draft serving.
SOURCE = "source"  # the request's source is not an absolute path
NOT_FOUND = "not_found"  # no such directory, or no config.json / weight files in it
UNREADABLE = "unreadable"  # a file that cannot be read or parsed (bad JSON, a damaged safetensors header)
CONFIG = "config"  # config.json differs from the served draft's (architecture, sizes, features)
MISSING_TENSOR = "missing_tensor"  # a tensor the served draft has is not in the checkpoint
EXTRA_TENSOR = "extra_tensor"  # the checkpoint has a tensor the served draft does not
SHAPE = "shape"  # a tensor of another shape
DTYPE = "dtype"  # a tensor of another dtype
RANKS_DISAGREE = "ranks_disagree"  # ranks read different bytes at that path (e.g. other files on another node)
UNSUPPORTED = "unsupported"  # the served draft cannot be reloaded in place (quantized, repacked weights, ...)
TIMEOUT = "timeout"  # a rank did not finish reading the checkpoint in time
COPY_FAILED = "copy_failed"  # the copy into the served weights failed on a rank; every rank restored the old draft

CAUSES = (
    SOURCE,
    NOT_FOUND,
    UNREADABLE,
    CONFIG,
    MISSING_TENSOR,
    EXTRA_TENSOR,
    SHAPE,
    DTYPE,
    RANKS_DISAGREE,
    UNSUPPORTED,
    TIMEOUT,
    COPY_FAILED,
)
# The answer's HTTP status per cause: the request's checkpoint is wrong (422), the served draft cannot be swapped
# (409), the pod failed (500 / 504: not the request's fault, the old draft serves on).
CAUSE_STATUS = {UNSUPPORTED: 409, COPY_FAILED: 500, TIMEOUT: 504}

RESULT_OK = "ok"
RESULT_REFUSED = "refused"


class SwapBusy(RuntimeError):
    """A swap is queued or running; one at a time (the endpoint answers 409)."""


class DraftRequestError(ValueError):
    """A request body that names no usable source: ``field`` and what is expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def parse_draft_request(data: Any) -> str:
    """The ``source`` of a ``POST`` body: an object with exactly that key, an absolute path of at most
    :data:`MAX_SOURCE_CHARS` characters."""
    if not isinstance(data, dict):
        raise DraftRequestError("body", 'expected a JSON object: {"source": "/absolute/path/to/draft"}')
    unknown = sorted(str(k) for k in data if k != "source")
    if unknown:
        raise DraftRequestError(unknown[0], f"unknown field(s) {unknown}; the body is {{'source': <absolute path>}}")
    if "source" not in data:
        raise DraftRequestError("source", "missing: the directory of the new draft checkpoint, an absolute path")
    source = data["source"]
    if not isinstance(source, str):
        raise DraftRequestError("source", f"must be a string (an absolute path), got {type(source).__name__}")
    if not source or len(source) > MAX_SOURCE_CHARS:
        raise DraftRequestError("source", f"must be 1..{MAX_SOURCE_CHARS} characters, got {len(source)}")
    if "\x00" in source:
        raise DraftRequestError("source", "must not contain a NUL character")
    if "://" in source:
        raise DraftRequestError(
            "source",
            f"{source!r}: a path inside the pod is required (a mounted claim is at /mnt/pvc/CLAIM/PATH); "
            "pvc:// and hf:// sources are resolved at start-up only",
        )
    if not source.startswith("/"):
        raise DraftRequestError("source", f"{source!r} is not an absolute path")
    return source


@dataclass(frozen=True)
class DraftIdentity:
    """Which draft a pod serves: where it was read from and a digest of its tensors (``sha256:<hex>`` over every
    tensor's name, dtype, shape and bytes in name order: the same for the same tensors whatever the file layout)."""

    source: str
    digest: str | None  # None: not computed (the checkpoint could not be read at start-up)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "digest": self.digest}
