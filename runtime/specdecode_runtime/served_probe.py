"""Served calibration: the decode cycle the pod actually serves, per step tier and batch size, timed at start-up
before the pod reports healthy.

Why: the cost probe (:mod:`.cost_probe`) replays captured stages on dummy inputs and adds them up. What a cycle also
costs is the scheduler's host work around those launches (building the verify tree, accepting tokens, the overlap
scheduler's bookkeeping), which no replay sees. On one H200 a 304M code LM's served speculative cycle was 1.1-1.6x
what its replays add up to, so a planner fed the replays alone over-predicted its tok/s by as much. Here every
captured tier serves a few short greedy generations at each configured batch size through the pod's own HTTP
server while nothing else can reach it (SGLang's ``/health`` answers 503 until its warm-up is done, and this runs
inside that warm-up), and the pod's own cycle clock (``specdecode_cycle_seconds``, the series the tuner reads while
serving) gives the served cycle per bucket. The points are exported as ``specdecode_cost_seconds{stage="cycle"}``;
the contract's fit (:func:`.contract.cost_profile.calibrate`) turns them into the host terms of the profile the
tuner and the planner start from.

The measurement is pure over four callables (generate, read the counters, set a tier, a clock), so the tests drive
it against a fake engine and the CPU test bed drives it through real SGLang.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .contract.cost_profile import SERVED, ProbePoint
from .contract.derived import live
from .contract.metric_names import (
    CYCLE_SECONDS,
    DEFAULT_BUCKETS,
    DRAFT_STEPS,
    PHASES,
    REQUESTS_VERIFIED,
    VERIFY_CYCLES,
    bucket_label,
)
from .contract.step_table import STEPS_PATH, StepTable

log = logging.getLogger("specdecode.served_probe")

WARM_TOKENS = 8  # a tier's first generation after a switch (graphs, the table's exchange at the next cycle)
SWITCH_TRIES = 4  # warm generations before a tier that does not show in the counters is given up
MIN_CYCLES = 4  # fewer cycles in the batch's bucket than this is no measurement
MAX_BODY = 1 << 20  # bytes read of any answer


@dataclass(frozen=True)
class Totals:
    """One bucket's cumulative cycle-clock counters."""

    cycles: float = 0.0
    seconds: float = 0.0  # decode time over the four phases (prefill work is counted apart)
    requests: float = 0.0  # sum of the batch size over the cycles
    draft_steps: float = 0.0

    def plus(self, other: Totals, sign: float = 1.0) -> Totals:
        return Totals(*(a + sign * b for a, b in zip(astuple(self), astuple(other))))

    def minus(self, before: Totals) -> Totals:
        return self.plus(before, -1.0)


Generate = Callable[[Sequence[Sequence[int]], int], Any]  # (prompts as token ids, max new tokens): one batch
ReadTotals = Callable[[], Mapping[str, Totals]]  # bucket label -> counters now
SetTier = Callable[[int], None]


def prompts(n: int, salt: int = 0) -> list[list[int]]:
    """``n`` distinct deterministic prompts of 16-23 token ids in 10..209 (valid in any vocabulary the runtime
    serves; SGLang's own warm-up sends ids 10-12). Their content only moves acceptance, not the time of a cycle at a
    given tier and batch, which is what is measured."""
    return [[10 + (7 * i + 13 * j + salt) % 200 for j in range(16 + i % 8)] for i in range(n)]


def mean_steps(delta: Totals) -> float:
    return delta.draft_steps / delta.cycles if delta.cycles > 0 else float("nan")


def _sum(totals: Mapping[str, Totals]) -> Totals:
    out = Totals()
    for t in totals.values():
        out = out.plus(t)
    return out


def _runs_tier(delta: Totals, steps: int) -> bool:
    """Every cycle of ``delta`` ran ``steps`` draft steps (SGLang counts a tier's draft steps per cycle)."""
    return delta.cycles > 0 and abs(mean_steps(delta) - steps) < 1e-6


def switch(generate: Generate, read: ReadTotals, set_tier: SetTier, steps: int) -> bool:
    """Set the tier and decode until the counters show it running (the table reaches the ranks at the next
    exchange); False when it never does."""
    set_tier(steps)
    for attempt in range(SWITCH_TRIES):
        before = _sum(read())
        generate(prompts(1, salt=97 * (attempt + 1)), WARM_TOKENS * (steps + 2))
        if _runs_tier(_sum(read()).minus(before), steps):
            return True
    return False


def measure_point(
    generate: Generate,
    read: ReadTotals,
    steps: int,
    batch: int,
    tokens: int,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
) -> ProbePoint | None:
    """The served cycle of one tier at one batch size: ``batch`` prompts decoding ``tokens`` tokens together, after a
    short generation of the same batch (prefix cache and graphs warm). Only the cycles of ``batch``'s own bucket
    count (sequences that finish early leave smaller batches behind, in other buckets); the point's batch is their
    mean batch. None when too few cycles landed there or a cycle ran another tier."""
    label = bucket_label(batch, tuple(buckets))
    ids = prompts(batch, salt=steps)
    generate(ids, WARM_TOKENS)
    before = read().get(label, Totals())
    generate(ids, tokens)
    delta = read().get(label, Totals()).minus(before)
    if delta.cycles < MIN_CYCLES:
        log.warning(
            "specdecode: served calibration steps=%d batch=%d: %d cycles in bucket %s",
            steps,
            batch,
            delta.cycles,
            label,
        )
        return None
    if not _runs_tier(delta, steps):
        log.warning(
            "specdecode: served calibration steps=%d batch=%d: cycles ran %.2f steps", steps, batch, mean_steps(delta)
        )
        return None
    return ProbePoint(SERVED, steps, label, round(delta.requests / delta.cycles), delta.seconds / delta.cycles)


def calibrate(
    generate: Generate,
    read: ReadTotals,
    set_tier: SetTier | None,
    tiers: Iterable[int],
    batches: Iterable[int],
    tokens: int,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    deadline: float = float("inf"),
    clock: Callable[[], float] = time.monotonic,
) -> list[ProbePoint]:
    """Every tier (switched with ``set_tier``; None: the one the pod runs, ``tiers`` holding it alone) at every batch
    size, until ``deadline`` on ``clock``: what was measured by then is kept."""
    points: list[ProbePoint] = []
    for steps in sorted(set(int(t) for t in tiers)):
        if clock() > deadline:
            log.warning("specdecode: served calibration stopped at its time limit before steps=%d", steps)
            break
        if set_tier is not None and not switch(generate, read, set_tier, steps):
            log.warning("specdecode: served calibration: steps=%d never ran after the switch; skipped", steps)
            continue
        for b in sorted(set(int(x) for x in batches)):
            if clock() > deadline:
                break
            point = measure_point(generate, read, steps, b, tokens, buckets)
            if point is not None:
                points.append(point)
    return points


# ---- the pod's side: its HTTP server, its control API, its metrics files ---------------------------------------------
def totals_from_samples(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> dict[str, Totals]:
    """Per-bucket totals from ``(sample name, labels, value)`` of the contract's cycle-clock series."""
    acc: dict[str, dict[str, float]] = {}
    names = {
        f"{VERIFY_CYCLES}_total": "cycles",
        f"{REQUESTS_VERIFIED}_total": "requests",
        f"{DRAFT_STEPS}_total": "draft_steps",
        f"{CYCLE_SECONDS}_sum": "seconds",
    }
    for name, labels, value in samples:
        field = names.get(name)
        bucket = labels.get("bucket")
        if field is None or bucket is None:
            continue
        if field == "seconds" and labels.get("phase") not in PHASES:
            continue
        row = acc.setdefault(bucket, {})
        row[field] = row.get(field, 0.0) + float(value)
    return {b: Totals(**row) for b, row in acc.items()}


def read_metrics_dir() -> dict[str, Totals]:
    """The cycle clock's counters as the scheduler processes wrote them (``PROMETHEUS_MULTIPROC_DIR``, the files
    SGLang's ``/metrics`` serves): read in-process, no request through the server being calibrated."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return totals_from_samples((s.name, s.labels, s.value) for family in registry.collect() for s in family.samples)


def _request(method: str, url: str, body: Any = None, token: str | None = None, timeout: float = 60.0) -> Any:
    return _exchange(method, url, body, token, timeout)[1]


def _exchange(
    method: str, url: str, body: Any = None, token: str | None = None, timeout: float = 60.0
) -> tuple[int, Any]:
    """One bounded JSON request: the answer's status and its parsed body (an error status raises ``HTTPError``)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback: the pod's own servers
        status, raw = r.status, r.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ValueError(f"{method} {url}: answer larger than {MAX_BODY} bytes")
    return status, json.loads(raw or b"null")


def http_generate(base_url: str, timeout: float, api_key: str | None = None) -> Generate:
    """One ``/generate`` call for the whole batch: greedy, ``ignore_eos``, so every request decodes ``n`` tokens."""

    def generate(ids: Sequence[Sequence[int]], n: int) -> Any:
        body = {
            "input_ids": [list(x) for x in ids],
            "sampling_params": {"temperature": 0.0, "max_new_tokens": int(n), "ignore_eos": True},
        }
        return _request("POST", base_url + "/generate", body, token=api_key, timeout=timeout)

    return generate


@dataclass(frozen=True)
class Control:
    """The pod's step-control API (:mod:`.control`) on loopback."""

    port: int
    token: str
    timeout: float = 10.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{STEPS_PATH}"

    def get(self) -> tuple[StepTable, list[int]]:
        data = _request("GET", self.url, token=self.token, timeout=self.timeout)
        return StepTable.model_validate({"table": data["table"]}), sorted(int(c) for c in data["candidates"])

    def put(self, table: StepTable) -> tuple[int, Any]:
        """The answer's status and body (the table as accepted); a refusal raises ``HTTPError``."""
        return _exchange("PUT", self.url, table.to_json(), token=self.token, timeout=self.timeout)

    def set_tier(self, steps: int) -> None:
        self.put(StepTable.single(steps))


def wait_for_server(
    base_url: str, deadline: float, api_key: str | None = None, clock: Callable[[], float] = time.monotonic
) -> bool:
    """SGLang answers ``/model_info`` once its tokenizer manager and schedulers are up (its own warm-up waits the
    same way)."""
    while clock() < deadline:
        try:
            _request("GET", base_url + "/model_info", token=api_key, timeout=5.0)
            return True
        except (OSError, ValueError):
            time.sleep(1.0)
    return False


def run_at_start(
    base_url: str,
    control: Control | None,
    num_steps: int,
    batches: Sequence[int],
    tokens: int,
    timeout_s: float,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    metrics: Any = None,
    read: ReadTotals = read_metrics_dir,
    api_key: str | None = None,
) -> list[ProbePoint]:
    """The pod's calibration: wait for the server, measure every tier the control API lists (the running one alone
    without it), put the step table back as it was, export the points. Any failure is logged and ends the
    calibration: the pod then serves with the replayed profile alone, never fails to start for it."""
    deadline = time.monotonic() + timeout_s
    points: list[ProbePoint] = []
    original: StepTable | None = None
    try:
        if not wait_for_server(base_url, deadline, api_key):
            log.warning("specdecode: served calibration: the server did not answer within %.0f s", timeout_s)
            return []
        tiers, set_tier = [int(num_steps)], None
        if control is not None:
            original, tiers = control.get()
            set_tier = control.set_tier
        generate = http_generate(base_url, timeout=max(deadline - time.monotonic(), 1.0), api_key=api_key)
        points = calibrate(generate, read, set_tier, tiers, batches, tokens, buckets, deadline=deadline)
    except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError) as exc:
        log.warning("specdecode: served calibration stopped: %s", exc)
    finally:
        if control is not None and original is not None:
            try:
                control.put(original)
            except (OSError, ValueError) as exc:
                log.warning("specdecode: served calibration could not restore the step table: %s", exc)
    if metrics is not None:
        for p in points:
            metrics.set_cost(p.stage, p.steps, p.bucket, p.batch, p.seconds)
    log.info(
        "specdecode: served calibration (ms per cycle): %s",
        " ".join(f"k{p.steps}@b{p.batch}={1000 * p.seconds:.3f}" for p in points) or "none",
    )
    return points


def warmup_with_calibration(cfg: Any, stock_warmup: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """SGLang's ``launch_server(execute_warmup_func=...)``: the served calibration, then SGLang's own warm-up, which
    marks the server up. Until then ``/health`` answers 503, so no client traffic mixes into the measurement."""
    from prometheus_client import CollectorRegistry

    from .metrics import SpecMetrics

    served = cfg.cost_probe.served

    def warmup(server_args: Any) -> Any:
        control = None
        if live(cfg):
            try:
                token = Path(cfg.server.token_file).read_text(encoding="utf-8")[:4096].strip()
            except OSError as exc:
                log.warning("specdecode: served calibration measures the running tier only: %s", exc)
            else:
                control = Control(cfg.server.control_port, token)
        run_at_start(
            server_args.url(),
            control,
            cfg.speculative.num_steps,
            served.batches,
            served.tokens,
            served.timeout_seconds,
            buckets=cfg.server.buckets,
            metrics=SpecMetrics(
                registry=CollectorRegistry(), buckets=cfg.server.buckets, capture=cfg.capture is not None
            ),
            api_key=getattr(server_args, "api_key", None),
        )
        return stock_warmup(server_args)

    return warmup
