"""The operator's draft canary against one real runtime pod on the CPU, once: a corrupted draft rolled back, then the
agreeing draft promoted over it, under a steady greedy load (tests/sglang_e2e/draft_canary.py runs both; the test
tests/sglang_e2e/test_draft_canary_cpu.py asserts the same runs).

Writes the ``cpu`` and ``cpu_meta`` keys of ``results/draft_swap.json`` (any other key, ``gpu`` included, is kept)
and the CPU section of ``results/draft_swap.md``. Tiny models on a CPU: the numbers say that the canary decides
correctly and in time without failing a request, not how fast a swap is on a GPU.

    PYTHONPATH=operator:runtime:. python bench/operator/draft_canary_cpu.py [--work DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "operator", ROOT / "runtime", ROOT / "tests" / "sglang_e2e", ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import draft_canary as dc  # noqa: E402
from renderer import write_section  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SECTION = "## CPU"
TITLE = "Draft swap: the operator's canary against real pods"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git(
        "status", "--porcelain", "--", "operator", "runtime", "tests/sglang_e2e", "bench/operator/draft_canary_cpu.py"
    )
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted edits)" if dirty else "")


def run(work: Path) -> dict:
    from specdecode_runtime.cpu.tiny_models import make_tiny_models

    models = make_tiny_models(work / "models", seed=0)
    with dc.bed(models, work) as b:
        back = dc.rollout(b.cluster, b.pod, "canary-rollback", b.pod.agree, b.pod.noisy, b.reference)
        up = dc.rollout(b.cluster, b.pod, "canary-promote", b.pod.noisy, b.pod.agree, b.reference)
        startup = b.startup_s
    return {"rollback": back, "promote": up, "startup_s": startup}


def summary(out: dict) -> dict:
    back, up = out["rollback"], out["promote"]
    return {
        "failed_requests": back.load["failed"] + up.load["failed"],
        "rollback_intervals": back.verdict_interval if back.outcome == "RolledBack" else None,
        "promoted": up.outcome == "Serving" and up.served_after == up.new,
        "rollback_seconds": back.verdict_s,
        "promote_intervals": up.verdict_interval,
        "promote_seconds": up.verdict_s,
        "acceptance_ratio": {"rollback": dc.ratio_of(back), "promote": dc.ratio_of(up)},
        "requests": back.load["requests"] + up.load["requests"],
        "tokens_equal_reference": back.load["failed"] == 0 and up.load["failed"] == 0,
        "problems": {"rollback": dc.rolled_back_problems(back), "promote": dc.promoted_problems(up)},
        "settings": {
            "interval_s": dc.interval_s(),
            "intervalSeconds": dc.INTERVAL_SECONDS,
            "tune_interval_scale": dc.INTERVAL_SCALE,
            "rollout": {"intervals": dc.ROLLOUT_INTERVALS, "minAcceptRatio": dc.MIN_ACCEPT_RATIO},
            "verdict_limit": {"intervals": dc.verdict_intervals(), "seconds": dc.verdict_limit_s()},
            "noise_scale": dc.NOISE_SCALE,
            "clients": dc.CLIENTS,
            "max_new_tokens": dc.MAX_NEW_TOKENS,
            "steps": dc.STEPS,
        },
        "runs": {"rollback": back.to_json(), "promote": up.to_json()},
    }


def markdown(cpu: dict, meta: dict) -> str:
    s, r, ratio = cpu["settings"], cpu["runs"], cpu["acceptance_ratio"]

    def steps(run: dict) -> str:
        return "; ".join(f"{st['k']}: {st['phase']} at {st['end']:.1f} s" for st in run["steps"])

    def para(text: str) -> str:
        return textwrap.fill(" ".join(text.split()), width=118, break_on_hyphens=False)

    problems = {k: "; ".join(v) or "none" for k, v in cpu["problems"].items()}
    intro = para(f"""Tiny models on a CPU (`make_tiny_models`: a 2-layer Llama target with a 64-wide hidden state and
        its agreeing EAGLE draft; the pinned SGLang under `specdecode-runtime launch`, one pod); the operator's
        `DraftRollouts` stepped as its tuning loop steps them, with its real `PodsApi`, and status.draft applied to a
        real kube-apiserver. These numbers show that the canary decides correctly and in time without failing a
        request, not how long a swap takes on a GPU. `{meta["command"]}`, {meta["date"]}, commit {meta["commit"]}.""")
    settings = para(f"""Settings: one replica (the canary alternates the pod between the drafts, one tuner interval
        each); `intervalSeconds` {s["intervalSeconds"]} x `tune_interval_scale` {s["tune_interval_scale"]} =
        {s["interval_s"]:g} s per interval; `rollout: {{intervals: {s["rollout"]["intervals"]}, minAcceptRatio:
        {s["rollout"]["minAcceptRatio"]}}}`, so a verdict needs {s["verdict_limit"]["intervals"]} intervals (limit
        {s["verdict_limit"]["seconds"]:g} s with the slack); {s["steps"]} draft steps; {s["clients"]} client threads
        sending greedy requests of {s["max_new_tokens"]} tokens back to back; the corrupted draft is
        `noisy_copy(scale={s["noise_scale"]:g})` of the agreeing one. The reference is the same pod's answer at steps
        0 (no speculation, through its step endpoint) for each prompt, taken once before any swap.""")
    trace = para(f"""Steps (interval: phase at seconds after the canary started): rollback {steps(r["rollback"])};
        promotion {steps(r["promote"])}.""")
    return f"""{SECTION}

{intro}

{settings}

| | result |
|---|---|
| failed requests (errors, or tokens unlike the reference) | {cpu["failed_requests"]} of {cpu["requests"]} |
| agreeing -> corrupted: rolled back after | {cpu["rollback_intervals"]} tuner intervals ({cpu["rollback_seconds"]} s after the canary started); acceptance ratio new/old {ratio["rollback"]} |
| corrupted -> agreeing: promoted | {cpu["promoted"]}, after {cpu["promote_intervals"]} tuner intervals ({cpu["promote_seconds"]} s); acceptance ratio new/old {ratio["promote"]} |
| problems the test's checks found | rollback: {problems["rollback"]}; promotion: {problems["promote"]} |

{trace}
"""


def write(cpu: dict, meta: dict) -> None:
    write_section(RESULTS, "draft_swap", {"cpu": cpu, "cpu_meta": meta}, SECTION, markdown(cpu, meta), TITLE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, help="working directory (default: a fresh temporary one)")
    ap.add_argument("--no-write", action="store_true", help="print the result, leave results/ alone")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="draft-canary-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    out = run(work)
    cpu = summary(out)
    cpu["wall_s"] = {"startup": round(out["startup_s"], 1), "total": round(time.monotonic() - t0, 1)}
    meta = {
        "command": "PYTHONPATH=operator:runtime:. .venv/bin/python bench/operator/draft_canary_cpu.py",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "device": "CPU (tiny models)",
    }
    print(json.dumps({k: v for k, v in cpu.items() if k != "runs"}, indent=2))
    if not args.no_write:
        write(cpu, meta)
    ok = not cpu["problems"]["rollback"] and not cpu["problems"]["promote"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
