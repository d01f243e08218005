"""The cycle an engine actually serves, next to what the start-up cost probe predicted for it.

The tuner starts every pod from the probe's profile, so the probe is only as useful as its agreement with serving.
For each tier (``steps``) and batch size asked for, this times two greedy generations of the same prompts that
differ only in length, after a warm-up one that also applies the tier: the difference in wall time over the
difference in verify cycles (SGLang's own per-request ``spec_verify_ct``; decode steps without speculation) is the
served cycle, free of prefill, scheduling of new requests and first-call compilation. Per-cycle device reads of the
rank records are paused meanwhile (``rank_probe.quiet``), so the figure is what serving costs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from ..contract.draft_swap import DRAFT_PATH
from ..contract.goodput import CycleCost
from ..contract.metric_names import bucket_label
from ..contract.step_table import StepTable
from ..served_probe import Control
from .rank_probe import events

WARM_TOKENS = 8
SWITCH_TRIES = 4


def prompt_batch(n: int, vocab: int, salt: int = 0, pool: list[list[int]] | None = None) -> list[list[int]]:
    """``n`` distinct deterministic prompts of word tokens (ids from 3), or ``n`` from a pool of real text."""
    if pool:
        return [pool[(i + salt) % len(pool)] for i in range(n)]
    span = max(vocab - 3, 1)
    return [[3 + (13 * i + 7 * j * (i + 1) + salt) % span for j in range(8 + i % 8)] for i in range(n)]


def _cycles(outputs: list[dict], speculative: bool) -> int:
    if speculative:
        return max(int((o.get("meta_info") or {}).get("spec_verify_ct", 0) or 0) for o in outputs)
    return max(len(o.get("output_ids") or []) for o in outputs)


def _tokens(outputs: list[dict]) -> int:
    return sum(len(o.get("output_ids") or []) for o in outputs)


def put_steps(control: dict[str, Any], steps: int) -> dict:
    """PUT a one-tier step table to the pod's control API (the client the start-up calibration uses): the status
    and the answer's body."""
    status, body = Control(int(control["port"]), str(control["token"])).put(StepTable.single(steps))
    return {"steps": steps, "status": status, "body": body}


def draft_request(control: dict[str, Any], source: str | None = None, timeout: float = 900.0) -> dict:
    """POST ``source`` to the pod's draft endpoint (GET when None): the status and the answer's body, a refusal's
    included (it names the cause)."""
    url = f"http://127.0.0.1:{int(control['port'])}{DRAFT_PATH}"
    data = None if source is None else json.dumps({"source": source}).encode()
    headers = {"Authorization": f"Bearer {control['token']}", "Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, method="GET" if source is None else "POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback: the pod's own server
            status, raw = r.status, r.read(1 << 20)
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read(1 << 20)
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        body = {"raw": raw[:500].decode("utf-8", "replace")}
    return {"status": status, "body": body}


def _running_tier(rank_dir: Path) -> int | None:
    switches = events(rank_dir, 0, "switch")
    return int(switches[-1]["to"]) if switches else None


def predicted_cycle_ms(profile: dict[str, dict[str, float]], steps: int, batch: int) -> float | None:
    """The probe's cycle at (steps, batch) from the fitted per-bucket profile (the tuner's arithmetic)."""

    cost = profile.get(bucket_label(batch))
    return CycleCost(**cost).cycle_ms(steps, batch) if cost else None


def measure(
    generate: Callable[[list[list[int]], int], list[dict]],
    *,
    tiers: list[int],
    batches: tuple[int, ...],
    measure_tokens: int,
    vocab: int,
    speculative: bool,
    initial_steps: int | None,
    control: dict[str, Any] | None,
    rank_dir: Path,
    profile: dict[str, dict[str, float]],
    pool: list[list[int]] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = 1,
) -> list[dict]:
    """One row per (steps, batch): served cycle and tok/s, the probe's prediction and their ratio. Tiers are
    switched through the control API (Live pods); a static pod measures its one tier. With ``repeats`` > 1 each
    row is the median of that many timings, every sample kept (``served_cycle_ms_samples``): one timing of a
    host-bound engine moves with the host's speed that second."""
    quiet = Path(rank_dir) / "quiet"
    quiet.write_text("")
    rows: list[dict] = []
    try:
        for steps in tiers:
            switch_ms = None
            if control and speculative and steps != (_running_tier(rank_dir) or initial_steps):
                t_put = time.time()
                put_steps(control, steps)
                for _ in range(SWITCH_TRIES):  # the table reaches the ranks at the next exchange: decode until then
                    generate(prompt_batch(1, vocab, salt=steps, pool=pool), WARM_TOKENS * (steps + 2))
                    if _running_tier(rank_dir) == steps:
                        break
                sw = [e for e in events(rank_dir, 0, "switch") if e.get("to") == steps and e.get("t")]
                if sw:
                    switch_ms = round(1000.0 * (float(sw[-1]["t"]) - t_put), 2)
            for b in batches:
                prompts = prompt_batch(b, vocab, pool=pool)
                generate(prompts, WARM_TOKENS)
                short, long_ = WARM_TOKENS, WARM_TOKENS + measure_tokens
                timings = []  # (seconds, cycles, tokens) of each repeat
                for _ in range(max(1, repeats)):
                    t0 = clock()
                    o1 = generate(prompts, short)
                    t1 = clock()
                    o2 = generate(prompts, long_)
                    t2 = clock()
                    timings.append(
                        (
                            (t2 - t1) - (t1 - t0),
                            _cycles(o2, speculative) - _cycles(o1, speculative),
                            _tokens(o2) - _tokens(o1),
                        )
                    )
                per_cycle = sorted((dt / c, dt, c, n) for dt, c, n in timings if c > 0)
                _, dt, cycles, tokens = per_cycle[len(per_cycle) // 2] if per_cycle else (None, *timings[-1])
                row: dict[str, Any] = {
                    "steps": steps if speculative else 0,
                    "batch": b,
                    "cycles": cycles,
                    "served_cycle_ms": round(1000.0 * dt / cycles, 4) if cycles > 0 else None,
                    "tokens_per_s": round(tokens / dt, 2) if dt > 0 else None,
                    "accept_length": round(tokens / (b * cycles), 3) if cycles > 0 else None,
                }
                if len(timings) > 1:
                    row["served_cycle_ms_samples"] = [round(1000.0 * x[0], 4) for x in per_cycle]
                if switch_ms is not None:
                    row["switch_latency_ms"] = switch_ms
                    switch_ms = None
                pred = predicted_cycle_ms(profile, row["steps"], b) if profile else None
                if pred is not None:
                    row["predicted_cycle_ms"] = round(pred, 4)
                    if row["served_cycle_ms"]:
                        row["probe_over_served"] = round(pred / row["served_cycle_ms"], 4)
                rows.append(row)
    finally:
        quiet.unlink(missing_ok=True)
    return rows
