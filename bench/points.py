"""The one format of a measured point: one JSON line per point, written by the campaign runner (``bench/campaign.py``)
and by the extractors that read older raw reports (``bench/reports/``), read back by the renderer.

A line::

    {"campaign": "trained-replay", "device": "1x NVIDIA H200", "shape": "trained-304m", "tp": 1,
     "mode": "static", "steps": 3, "batch": 8, "round": 0,
     "metrics": {"tok_s": 2101.5, "cycle_ms": 7.9, "accept_len": 3.1},
     "commit": "4d9c4f3", "date": "2026-12-06", "command": "python bench/campaign.py run ..."}

- ``mode``: ``nospec`` (a server without speculation), ``static`` (the patched runtime at one step count, a
  one-tier step table), ``stock`` (stock SGLang's EAGLE-3 at that step count), ``live`` (the operator's tuner
  driving the pod; ``steps`` is null), ``tier0`` (the Live pod at steps 0);
- ``steps``: the step count, required for ``static`` and ``stock``, 0 for ``tier0``, null for ``nospec`` and
  ``live``;
- ``round``: which repeat of the same configuration (rounds alternate configurations, so drift spreads over all);
- ``metrics``: the names of :data:`METRICS` only, each a number or null;
- ``commit``, ``device``, ``date``, ``command``: every point records where it came from;
- ``source`` (optional): the raw report a point was extracted from.

:func:`load` reads a file back with bounds on its size and refuses a bad line naming the line and the field.
The standard library only: the GPU machine writes these lines too.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODES = ("nospec", "tier0", "static", "stock", "live")
METRICS = {
    "tok_s": "served tokens per second: what the clients saw",
    "decode_tok_s": "tokens the pod's decode cycles emitted over their busy time (its own counters)",
    "cycle_ms": "mean decode cycle, milliseconds",
    "accept_len": "tokens per sequence per decode cycle",
    "mean_batch": "mean sequences per decode cycle",
    "cycles": "decode cycles over the point",
    "requests": "requests completed over the point",
    "wall_s": "seconds the point took",
}
PROVENANCE = ("commit", "device", "date", "command")
MAX_STEPS = 16
MAX_BATCH = 4096
MAX_BYTES = 16 << 20  # a file of points
MAX_LINE = 64 << 10  # one point
MAX_TEXT = 2000  # one string field


class PointsError(ValueError):
    """A point that is not one: the message names the line (when read from a file) and the field."""


@dataclass(frozen=True)
class Point:
    campaign: str
    device: str
    shape: str
    tp: int
    mode: str
    steps: int | None
    batch: int
    round: int
    metrics: dict[str, float | None]
    commit: str
    date: str
    command: str
    source: str | None = field(default=None)

    def __post_init__(self) -> None:
        check(asdict(self))

    def key(self) -> tuple[str, int | None, int]:
        """The configuration a point measured, rounds aside."""
        return (self.mode, self.steps, self.batch)

    def to_json(self) -> str:
        d = asdict(self)
        if d["source"] is None:
            del d["source"]
        return json.dumps(d, separators=(", ", ": "))


def _text(d: dict, name: str, optional: bool = False) -> None:
    v = d.get(name)
    if v is None and optional:
        return
    if not isinstance(v, str) or not v.strip():
        raise PointsError(f"{name}: a non-empty string is required, got {v!r}")
    if len(v) > MAX_TEXT:
        raise PointsError(f"{name}: at most {MAX_TEXT} characters, got {len(v)}")


def _int(d: dict, name: str, lo: int, hi: int) -> None:
    v = d.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise PointsError(f"{name}: a whole number within {lo}..{hi} is required, got {v!r}")


def check(d: Any) -> None:
    """Refuse a point's dict that breaks the format, naming the field."""
    if not isinstance(d, dict):
        raise PointsError(f"a point is a JSON object, got {type(d).__name__}")
    known = {f for f in Point.__dataclass_fields__}
    unknown = sorted(set(d) - known)
    if unknown:
        raise PointsError(f"{unknown[0]}: not a field of a point (fields: {', '.join(sorted(known))})")
    for name in ("campaign", "shape", "command", *PROVENANCE):
        _text(d, name)
    _text(d, "source", optional=True)
    _int(d, "tp", 1, 1024)
    _int(d, "batch", 1, MAX_BATCH)
    _int(d, "round", 0, 1_000_000)
    mode = d.get("mode")
    if mode not in MODES:
        raise PointsError(f"mode: one of {', '.join(MODES)} is required, got {mode!r}")
    steps = d.get("steps")
    if mode in ("nospec", "live"):
        if steps is not None:
            raise PointsError(f"steps: null for mode {mode}, got {steps!r}")
    elif mode == "tier0":
        if steps != 0:
            raise PointsError(f"steps: 0 for mode tier0, got {steps!r}")
    else:
        _int(d, "steps", 0, MAX_STEPS)
    metrics = d.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise PointsError(f"metrics: an object of at least one of {', '.join(METRICS)} is required, got {metrics!r}")
    for name, v in metrics.items():
        if name not in METRICS:
            raise PointsError(f"metrics.{name}: not a metric (metrics: {', '.join(METRICS)})")
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
            raise PointsError(f"metrics.{name}: a finite number >= 0 or null is required, got {v!r}")


def parse(d: Any) -> Point:
    check(d)
    return Point(**d)


def load(path: Path, max_bytes: int = MAX_BYTES) -> list[Point]:
    """Every point of a JSON-lines file (blank lines skipped); a file over ``max_bytes``, a line over
    :data:`MAX_LINE` or a bad line raises :class:`PointsError` as ``FILE:LINE: FIELD: why``."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PointsError(f"{path}: {exc.strerror or exc}") from exc
    if size > max_bytes:
        raise PointsError(f"{path}: {size} bytes, over the {max_bytes} a file of points may have")
    out = []
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if len(raw) > MAX_LINE:
                raise PointsError(f"{path}:{n}: a line of {len(raw)} bytes, over the {MAX_LINE} a point may have")
            if not raw.strip():
                continue
            try:
                d = json.loads(raw)
            except ValueError as exc:
                raise PointsError(f"{path}:{n}: not JSON ({exc})") from exc
            try:
                out.append(parse(d))
            except PointsError as exc:
                raise PointsError(f"{path}:{n}: {exc}") from exc
    return out


def write(path: Path, points: list[Point]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(p.to_json() + "\n" for p in points))


def append(path: Path, point: Point) -> None:
    """One more line, as a campaign measures it: a run cut short keeps the points it took."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(point.to_json() + "\n")
