"""One campaign runner: a small YAML names what to measure, the runner measures every point of it and writes one
JSON line per point (``bench/points.py``), which ``bench/renderer.py points`` renders.

    python bench/campaign.py plan CAMPAIGN.yaml              # the points it would measure, nothing run
    python bench/campaign.py run CAMPAIGN.yaml --out DIR     # DIR/points.jsonl (+ DIR/points_summary.{json,md})

A campaign::

    name: llama8b-steps          # the points' campaign
    backend: gpu                 # gpu: the patched SGLang on this machine's GPUs; sim: the simulator
    shape: llama3-8b             # a model shape of bench/shapes.py, or the served model's own name
    tp: 1
    steps: [1, 3, 5, 7]          # the static step counts
    batches: [1, 8, 32]          # client threads
    modes: [nospec, tier0, static, live]
    repeats: 3                   # rounds: every configuration once per round, rounds one after the other
    requests: {replay: 16, max_new_tokens: 256, prompt_chars: 240}
    gpu: {target: DIR, draft: DIR, heldout: FILE}      # backend gpu
    sim: {scenario: bench/scenarios/h200-llama8b-measured.yaml, seconds: 20}   # backend sim

Each point is measured as ``bench/gpu/campaigns/live_tune.py --replay N`` measures a static point: a fixed set of
``replay`` requests per client thread (the same prompts for every configuration), tok/s from the first send to the
last answer, the pod's own counters over it for the decode figures. ``nospec`` runs on a server without speculation,
``tier0``/``static`` on the Live pod with a one-tier step table, ``live`` runs the operator's tuner under the steady
load for ``gpu.live_seconds`` and then replays the set with its final table. The simulator measures ``nospec``,
``tier0`` and ``static`` over ``sim.seconds`` of simulated time at the point's batch, a seed per round.

A campaign file with an unknown key or a bad value exits 2 naming the field.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "runtime", ROOT / "bench", ROOT / "bench" / "gpu" / "campaigns"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
import live_tune  # noqa: E402
import points as pts  # noqa: E402
import renderer  # noqa: E402
from reports.live_runs import point_metrics  # noqa: E402

from specdecode_runtime.contract.scenario import load_scenario  # noqa: E402
from specdecode_runtime.simulate.engine import SimEngine  # noqa: E402

MAX_FILE = 64 << 10  # a campaign is a few lines
MAX_POINTS = 5000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Requests(_Model):
    replay: int = Field(16, ge=1, le=10_000, description="requests per client thread for each point")
    max_new_tokens: int = Field(256, ge=1, le=32_768)
    prompt_chars: int = Field(240, ge=1, le=100_000)


class Gpu(_Model):
    target: str = Field(min_length=1)
    draft: str = ""
    heldout: str = Field(min_length=1, description="text the prompts are cut from")
    dtype: str = ""
    max_batch: int = Field(32, ge=1, le=pts.MAX_BATCH)
    mem_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    live_seconds: float = Field(50.0, gt=0, le=3600)
    interval: float = Field(5.0, ge=5.0, le=600, description="the tuner's interval (the CRD's minimum is 5 s)")


class Sim(_Model):
    scenario: str = Field(min_length=1)
    seconds: float = Field(20.0, gt=0, le=86_400, description="simulated seconds per point")


class Campaign(_Model):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    backend: Literal["gpu", "sim"]
    shape: str = Field(min_length=1, max_length=100)
    tp: int = Field(1, ge=1, le=64)
    steps: list[int] = Field(default_factory=list, max_length=pts.MAX_STEPS)
    batches: list[int] = Field(min_length=1, max_length=32)
    modes: list[Literal["nospec", "tier0", "static", "live"]] = Field(min_length=1, max_length=4)
    repeats: int = Field(1, ge=1, le=100)
    requests: Requests = Requests()
    gpu: Gpu | None = None
    sim: Sim | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Campaign:
        for k in self.steps:
            if not 1 <= k <= pts.MAX_STEPS:
                raise ValueError(f"steps: each within 1..{pts.MAX_STEPS} (steps 0 is mode tier0), got {k}")
        for b in self.batches:
            if not 1 <= b <= pts.MAX_BATCH:
                raise ValueError(f"batches: each within 1..{pts.MAX_BATCH}, got {b}")
        for name, xs in (("steps", self.steps), ("batches", self.batches), ("modes", self.modes)):
            if len(set(xs)) != len(xs):
                raise ValueError(f"{name}: listed twice: {xs}")
        if "static" in self.modes and not self.steps:
            raise ValueError("steps: mode static needs at least one step count")
        if self.backend == "gpu":
            if self.gpu is None:
                raise ValueError("gpu: backend gpu needs gpu.target and gpu.heldout")
            if set(self.modes) - {"nospec"} and not self.gpu.draft:
                raise ValueError("gpu.draft: modes tier0, static and live serve a draft")
            if self.gpu.max_batch < max(self.batches):
                raise ValueError(f"gpu.max_batch: {self.gpu.max_batch} is below the largest batch {max(self.batches)}")
        if self.backend == "sim":
            if self.sim is None:
                raise ValueError("sim: backend sim needs sim.scenario")
            if "live" in self.modes:
                raise ValueError("modes: live needs the operator's tuner against a pod: backend gpu")
        if self.repeats * len(self.batches) * len(self.plan_configs()) > MAX_POINTS:
            raise ValueError(f"repeats: over {MAX_POINTS} points in all")
        return self

    def plan_configs(self) -> list[tuple[str, int | None]]:
        out: list[tuple[str, int | None]] = []
        for m in self.modes:
            if m == "static":
                out += [("static", k) for k in self.steps]
            else:
                out.append((m, 0 if m == "tier0" else None))
        return out


@dataclass(frozen=True)
class Spec:
    """One point to measure."""

    mode: str
    steps: int | None
    batch: int
    round: int


def plan(c: Campaign) -> list[Spec]:
    """Every point: round by round, within a round batch by batch, every configuration once."""
    return [Spec(m, k, b, r) for r in range(c.repeats) for b in c.batches for m, k in c.plan_configs()]


class CampaignError(ValueError):
    """A campaign file that is not one: the message names the field."""


def load(path: Path) -> Campaign:
    try:
        if path.stat().st_size > MAX_FILE:
            raise CampaignError(f"{path}: over {MAX_FILE} bytes")
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise CampaignError(f"{path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise CampaignError(f"{path}: not YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise CampaignError(f"{path}: a campaign is a mapping of keys, got {type(data).__name__}")
    try:
        return Campaign.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"]) or "campaign"
        msg = e["msg"].removeprefix("Value error, ")
        raise CampaignError(f"{path}: {where}: {msg}") from exc


# ------------------------------------------------------------------------------------------------------- backends


class SimBackend:
    """The simulator (``specdecode_runtime.simulate``) at the scenario's costs and acceptance, every phase at the
    point's batch."""

    def __init__(self, c: Campaign) -> None:
        assert c.sim is not None
        path = Path(c.sim.scenario)
        self.scenario = load_scenario(path if path.is_absolute() else ROOT / path)
        self.seconds = min(c.sim.seconds, self.scenario.duration)
        self.device = f"simulated: {self.scenario.name}"

    def measure(self, s: Spec) -> dict[str, float | None]:
        phases = [p.model_copy(update={"batch_size": s.batch}) for p in self.scenario.phases]
        e = SimEngine(self.scenario.model_copy(update={"phases": phases}), seed=self.scenario.seed + s.round)
        e.set_step_table([(1, s.steps or 0)])
        e.advance(self.seconds)
        cycles = max(e.cycles_total, 1)
        return {
            "tok_s": round(e.throughput(), 1),
            "cycle_ms": round(1000.0 * e.now / cycles, 3),
            "accept_len": round(e.tokens_total / (cycles * s.batch), 3),
            "mean_batch": float(s.batch),
            "cycles": e.cycles_total,
            "wall_s": round(e.now, 3),
        }

    def close(self) -> None:
        pass


class GpuBackend:
    """The servers ``live_tune.py`` starts (stock SGLang without speculation; the patched runtime's Live pod), each
    started on first use and kept for the campaign; every point measured as ``live_tune.py --replay`` measures."""

    def __init__(self, c: Campaign) -> None:
        assert c.gpu is not None
        g, r = c.gpu, c.requests
        self.c = c
        self.work = Path(tempfile.mkdtemp(prefix="campaign-"))
        self.args = SimpleNamespace(
            target=g.target,
            draft=g.draft,
            dtype=g.dtype,
            mem_fraction=g.mem_fraction,
            max_batch=g.max_batch,
            prefill_graph_tokens=0,
            initial_steps=(c.steps or [3])[0],
            served_calibration="",
            served_tokens=64,
            tp=c.tp,
            interval=g.interval,
            live_seconds=g.live_seconds,
            window=6.0,
        )
        self.prompts = live_tune.prompts_from(Path(g.heldout), 256, r.prompt_chars)
        self.servers: dict[str, tuple[Any, str, dict]] = {}
        self.device = gpu_name(c.tp)

    def server(self, kind: str) -> tuple[str, dict]:
        if kind not in self.servers:
            proc, url, control = live_tune.start_server(self.args, self.work, kind)
            self.servers[kind] = (proc, url, control)
            live_tune.wait_ready(url, proc, 600)
        _, url, control = self.servers[kind]
        return url, control

    def _replay(self, url: str, batch: int) -> dict[str, float | None]:
        r = self.c.requests
        tps, det = live_tune.Observer(url, None)(
            lambda: live_tune.replay(url, self.prompts, batch, r.replay, r.max_new_tokens)
        )
        out: dict[str, float | None] = {"tok_s": round(tps, 1), "wall_s": det["wall_s"], "requests": r.replay * batch}
        out.update(point_metrics(det["pod_counters"]))
        return out

    def measure(self, s: Spec) -> dict[str, float | None]:
        if s.mode == "nospec":
            url, _ = self.server("nospec")
            return self._replay(url, s.batch)
        url, control = self.server("live")
        if s.mode == "live":
            load = live_tune.Load(url, self.prompts, s.batch, self.c.requests.max_new_tokens).start()
            try:
                live = live_tune.run_live(self.args, url, control, load, s.batch)
            finally:
                load.close()
            live_tune.put_table(control, {"table": [{"minBatch": lo, "steps": k} for lo, k in live["final_table"]]})
        else:
            live_tune.put_table(control, live_tune.single(s.steps or 0))
        return self._replay(url, s.batch)

    def close(self) -> None:
        for proc, _, _ in self.servers.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


def gpu_name(tp: int) -> str:
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        names = []
    name = next((n.strip() for n in names if n.strip()), "unknown GPU")
    return f"{tp}x {name}"


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30
        )
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    head = out.stdout.strip() or "unknown (no git)"
    return head + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


BACKENDS = {"sim": SimBackend, "gpu": GpuBackend}


def run(c: Campaign, out: Path, command: str, backend: Any = None) -> list[pts.Point]:
    """Measure every point of the plan in order, appending each to ``out/points.jsonl`` as it is taken."""
    backend = backend or BACKENDS[c.backend](c)
    path = out / "points.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    prov = {
        "commit": commit(),
        "device": backend.device,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
    }
    got = []
    try:
        for s in plan(c):
            metrics = backend.measure(s)
            p = pts.Point(
                campaign=c.name,
                shape=c.shape,
                tp=c.tp,
                mode=s.mode,
                steps=s.steps,
                batch=s.batch,
                round=s.round,
                metrics=metrics,
                **prov,
            )
            pts.append(path, p)
            got.append(p)
            print(f"round {s.round} b{s.batch} {renderer.config_label(s.mode, s.steps)}: {metrics.get('tok_s')} tok/s")
    finally:
        backend.close()
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="campaign.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_plan = sub.add_parser("plan", help="the points a campaign measures")
    p_plan.add_argument("campaign", type=Path)
    p_run = sub.add_parser("run", help="measure them")
    p_run.add_argument("campaign", type=Path)
    p_run.add_argument("--out", required=True, type=Path, help="folder of points.jsonl and its summary")
    a = ap.parse_args(argv)
    try:
        c = load(a.campaign)
    except CampaignError as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
    if a.cmd == "plan":
        for s in plan(c):
            print(f"round {s.round} batch {s.batch} {renderer.config_label(s.mode, s.steps)}")
        return 0
    argv_used = sys.argv[1:] if argv is None else list(argv)
    got = run(c, a.out, shlex.join(["python", "bench/campaign.py", *argv_used]))
    s = renderer.summarize_points(got)
    renderer.write(a.out, "points_summary", s, renderer.points_markdown(s))
    print(f"{len(got)} points -> {a.out / 'points.jsonl'}; tables -> {a.out / 'points_summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
