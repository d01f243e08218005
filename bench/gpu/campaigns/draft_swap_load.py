#!/usr/bin/env python3
"""A draft swapped in place under a steady load, on one GPU: what it costs the pod that keeps serving.

Why this exists: loading a new draft into running pods (``POST /specdecode/v1/draft``) is only worth doing instead
of a restart if the pod serves on through it: no failed request, no target reload, a pause of milliseconds, and the
new draft's acceptance showing at once. This serves the trained target in Live mode at a fixed step count under
``--batch`` client threads and swaps the trained head for a briefly trained one and back, recording per second the
served tok/s, each swap's answer (its duration on the pod and the scheduler loop's pause), the accept length of
each stretch from the pod's own per-position counters, and greedy outputs before and after (the target verifies
every token, so they must not change with the draft).

Usage (GPU machine, kit installed; bench/gpu/campaigns/draft_swap.sh chains it after training):
  python3 bench/gpu/campaigns/draft_swap_load.py --target T --draft FULL --brief BRIEF --heldout H --out swap.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_tune import Load, greedy_outputs, http, pod_samples, prompts_from, start_server, wait_ready  # noqa: E402

from specdecode_runtime.contract.draft_swap import DRAFT_PATH  # noqa: E402
from specdecode_runtime.contract.metric_names import POSITION_ACCEPTED, REQUESTS_VERIFIED  # noqa: E402


def accept_length(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Tokens per request per verify cycle between two scrapes: 1 + accepted draft positions / requests verified."""

    def total(samples: dict[str, float], name: str) -> float:
        return sum(v for k, v in samples.items() if k.startswith(name + "_total{"))

    verified = total(after, REQUESTS_VERIFIED) - total(before, REQUESTS_VERIFIED)
    accepted = total(after, POSITION_ACCEPTED) - total(before, POSITION_ACCEPTED)
    return round(1.0 + accepted / verified, 4) if verified > 0 else None


def timeline(load: Load, t0: float, t1: float, step: float = 1.0) -> list[float]:
    """Served tok/s in consecutive ``step``-second windows from ``t0`` to ``t1``."""
    out, t = [], t0
    while t + step <= t1 + 1e-9:
        out.append(round(load.tokens_per_s(t, t + step), 1))
        t += step
    return out


def swap(control: dict, source: str) -> dict:
    """POST the swap and return the pod's answer with the request's wall time on the client."""
    t0 = time.perf_counter()
    try:
        status, raw = http(
            "POST", f"http://127.0.0.1:{control['port']}{DRAFT_PATH}", {"source": source}, control["token"], 600
        )
        body = json.loads(raw)
    except Exception as exc:  # a refusal (4xx/5xx) is a result too
        status = getattr(exc, "code", None)
        body = {"error": repr(exc)[:400]}
        read = getattr(exc, "read", None)
        if read is not None:
            try:
                body = json.loads(read())
            except Exception:
                pass
    return {"status": status, "client_s": round(time.perf_counter() - t0, 4), **body}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True, help="the trained head the pod starts with")
    ap.add_argument("--brief", required=True, help="a head of the same shape trained briefly (swapped in, then out)")
    ap.add_argument("--heldout", required=True, type=Path)
    ap.add_argument("--batch", type=int, default=8, help="client threads of the steady load")
    ap.add_argument("--steps", type=int, default=3, help="the fixed step count served throughout")
    ap.add_argument("--stretch-seconds", type=float, default=20.0, help="seconds served with each draft")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--check-prompts", type=int, default=4, help="greedy prompts compared before and after")
    ap.add_argument("--mem-fraction", type=float, default=0.5)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    work = a.out.parent / "swap-work"
    work.mkdir(parents=True, exist_ok=True)
    opts = SimpleNamespace(
        server="live",
        target=a.target,
        draft=a.draft,
        mem_fraction=a.mem_fraction,
        max_batch=64,
        dtype=None,
        initial_steps=a.steps,
        served_calibration=None,
        served_tokens=64,
    )
    proc, url, control = start_server(opts, work)
    report: dict = {"args": {k: str(v) for k, v in vars(a).items()}, "device": os.environ.get("GPU_NAME", "")}
    try:
        report["ready_s"] = round(wait_ready(url, proc, 900), 1)
        pid = proc.pid
        prompts = prompts_from(a.heldout, 64, 600)
        check = prompts[: a.check_prompts]
        greedy = {"full_before": greedy_outputs(url, check, 64)}
        load = Load(url, prompts, a.batch, a.max_new_tokens).start()
        time.sleep(5.0)  # every client thread past its first prefill
        marks = [("full", time.perf_counter(), pod_samples(url))]
        swaps = []
        for name, source in (("brief", a.brief), ("full_again", a.draft)):
            time.sleep(a.stretch_seconds)
            at = time.perf_counter()
            answer = swap(control, source)
            swaps.append({"to": name, "source": source, "at_s": round(at - marks[0][1], 2), **answer})
            marks.append((name, time.perf_counter(), pod_samples(url)))
        time.sleep(a.stretch_seconds)
        end = (time.perf_counter(), pod_samples(url))
        load.close()
        greedy["full_after"] = greedy_outputs(url, check, 64)
        stretches = []
        for i, (name, t, samples) in enumerate(marks):
            t_next, s_next = (marks[i + 1][1], marks[i + 1][2]) if i + 1 < len(marks) else end
            stretches.append(
                {
                    "draft": name,
                    "seconds": round(t_next - t, 2),
                    "tokens_per_s": round(load.tokens_per_s(t, t_next), 1),
                    "accept_length": accept_length(samples, s_next),
                }
            )
        t0 = marks[0][1]
        report.update(
            batch=a.batch,
            steps=a.steps,
            swaps=swaps,
            stretches=stretches,
            timeline_tokens_per_s=timeline(load, t0, end[0]),
            failed_requests=len(load.errors),
            errors=load.errors[:10],
            completed_requests=len(load.records),
            target_restarts=0 if proc.poll() is None and proc.pid == pid else 1,
            greedy_identical=greedy["full_before"] == greedy["full_after"],
            server_alive=proc.poll() is None,
        )
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except Exception:
            pass
        a.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report.get(k) for k in ("swaps", "stretches", "failed_requests", "greedy_identical")}))
    return (
        0 if report.get("failed_requests") == 0 and all(s.get("status") == 200 for s in report.get("swaps", [])) else 1
    )


if __name__ == "__main__":
    sys.exit(main())
