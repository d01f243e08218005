"""The demo's main loop: emulator + operator + simulated kubelet, watched and reported until the scenario ends."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console, Group
from rich.live import Live

from specdecode_runtime.contract.input_files import load_documents
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.simulate.engine import SimEngine

from ..api.models import GROUP, PLURAL, VERSION
from ..config import OperatorConfig
from ..render import CHILD_KINDS
from . import report


class DemoFailed(RuntimeError):
    """The demo could not show the loop (the operator stopped, no pod ran, no status was written): the reason, for
    a non-zero exit. A demo that prints zeros and exits 0 would hide exactly the failure it exists to reveal."""


@dataclass
class DemoOptions:
    out_dir: Path
    speed: float = 10.0  # simulated seconds per wall second
    sdd_file: Path | None = None
    scenario_file: Path | None = None
    kubeconfig: str | None = None
    max_wall_seconds: float = 110.0


def _data(name: str) -> Path:
    return Path(str(resources.files("specdecode_operator.demo.data") / name))


REFERENCES = (
    ("no speculation", 8, 0),
    ("draft on all 8 ranks, steps=5 (the seed)", 8, 5),
    ("draft on rank 0, steps=3 fixed (untuned)", 1, 3),
)


def reference_runs(scenario, seconds: float, window: float = 10.0) -> tuple[dict[str, float], dict[str, list]]:
    """What the same simulated workload gives without speculation and with the seed's setup (draft on all 8
    ranks, 5 steps), in-process with the same engine the pods use: overall tok/s and a per-window series."""
    rates, series = {}, {}
    for label, tp, k in REFERENCES:
        eng = SimEngine(scenario, draft_tp=tp)
        eng.set_step_table([(1, k)])
        points, last_tokens, last_t = [], 0.0, 0.0
        while eng.now < seconds - 1e-6:
            eng.advance(min(window, seconds - eng.now))
            if eng.now - last_t >= 1.0:  # a sliver of a window at the end says nothing
                points.append((eng.now, (eng.tokens_total - last_tokens) / (eng.now - last_t)))
                last_tokens, last_t = eng.tokens_total, eng.now
        rates[label] = eng.tokens_total / max(eng.now, 1e-9)
        series[label] = points
    return rates, series


class _Api:
    def __init__(self, url: str | None, kubeconfig: str | None):
        from kubernetes import client, config

        if kubeconfig:
            self.client = config.new_client_from_config(config_file=kubeconfig)
        else:
            cfg = client.Configuration()
            cfg.host = url or cfg.host
            self.client = client.ApiClient(cfg)
        self.custom = client.CustomObjectsApi(self.client)

    def get_sdd(self, ns: str, name: str) -> dict[str, Any]:
        found: Any = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        return found

    def children(self, ns: str, name: str) -> list[dict[str, Any]]:
        from kubernetes import client

        core = client.CoreV1Api(self.client)
        core_lists = {
            "configmaps": core.list_namespaced_config_map,
            "services": core.list_namespaced_service,
            "serviceaccounts": core.list_namespaced_service_account,
        }
        selector = f"app.kubernetes.io/instance={name}"
        out: list[dict[str, Any]] = []
        for api_version, kind, plural, _ in CHILD_KINDS:
            group, _, version = api_version.rpartition("/")
            with contextlib.suppress(client.ApiException):  # a kind this cluster does not serve
                if group:
                    listed: Any = self.custom.list_namespaced_custom_object(
                        group, version, ns, plural, label_selector=selector
                    )
                    items = listed["items"]
                else:
                    raw: Any = core_lists[plural](ns, label_selector=selector, _preload_content=False)
                    items = json.loads(raw.data)["items"]
                out.extend({**i, "kind": kind} for i in items)
        return out


def _console() -> Console:
    """Rich's console; when the output is a file or a pipe (CI logs, ``| tee``) rich would cut tables at 80 columns,
    so it gets a width that fits them unless COLUMNS says otherwise."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=140)
    return console


def _check_it_ran(engines: list, tokens: float, conditions: dict[str, str], kubelet_errors: list[str]) -> None:
    """Raise DemoFailed with the reason when the loop did not run: no pod, no tokens, or no status."""
    detail = f"; last kubelet errors: {kubelet_errors[-3:]}" if kubelet_errors else ""
    if not engines:
        raise DemoFailed(
            "no simulated runtime pod started (the operator created no Deployment the kubelet could run)" + detail
        )
    if tokens <= 0:
        raise DemoFailed("the simulated pods produced no tokens" + detail)
    if not conditions:
        raise DemoFailed("the operator wrote no status conditions on the SpecDecodeDeployment")


@dataclass
class _Progress:
    """What the watch has seen so far: the simulated pods' clock and tokens, the status, the tuner's decisions."""

    timeline: report.Timeline = field(default_factory=report.Timeline)
    engines: list = field(default_factory=list)
    sim: float = 0.0  # simulated seconds the furthest pod has run
    tokens: float = 0.0
    phase: str = "-"
    decisions: int = 0  # status.history entries already printed
    objects_printed: bool = False
    final: dict[str, Any] = field(default_factory=dict)  # the SpecDecodeDeployment when the watch ended
    _sampled_tokens: float = 0.0
    _sampled_sim: float = 0.0

    @property
    def conditions(self) -> dict[str, str]:
        return {c["type"]: c["status"] for c in (self.final.get("status") or {}).get("conditions", [])}


def run_demo(options: DemoOptions, console: Console | None = None) -> dict[str, Any]:
    """Start the API (emulator + operator + simulated kubelet, or a real cluster), apply the SpecDecodeDeployment,
    watch it until the scenario ends, then report: on the emulator against in-process reference runs, on a
    cluster what its tuner measured."""
    # kopf warns that it cannot install OS signal handlers outside the main thread: expected here, not news.
    logging.getLogger("kopf").setLevel(logging.ERROR)
    console = console or _console()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    scenario = load_scenario(options.scenario_file or _data("pcie8-seed-shift.yaml"))
    sdd = load_documents(str(options.sdd_file or _data("sdd.yaml")))[0]
    _announce(console, options, scenario)
    with contextlib.ExitStack() as stack:
        api, kubelet, operator = _start_cluster(stack, console, options, scenario, sdd)
        _apply(api, console, sdd, options)
        progress = _watch(stack, console, api, kubelet, operator, sdd, options)
        if kubelet is not None:
            _check_it_ran(progress.engines, progress.tokens, progress.conditions, kubelet.errors)
    if kubelet is None:
        result = _cluster_result(console, progress)
    else:
        result = _simulated_result(console, scenario, progress, kubelet, options.out_dir)
    (options.out_dir / "summary.yaml").write_text(yaml.safe_dump(result, sort_keys=False))
    return result


def _announce(console: Console, options: DemoOptions, scenario) -> None:
    """Say up front what runs and what is simulated."""
    if options.kubeconfig:
        console.rule(
            f"[bold]specdecode demo[/] on the cluster of {options.kubeconfig}: the operator running there "
            "reconciles, its pods serve, and figures are what its tuner measured (nothing simulated)"
        )
        return
    sim_total = sum(p.seconds for p in scenario.phases)
    console.rule("[bold]specdecode demo[/] - everything below runs on a SIMULATED runtime, no GPU, no cluster")
    console.print(
        f"scenario [bold]{scenario.name}[/] ({scenario.description}); {sim_total:.0f} simulated "
        f"seconds at {options.speed:g}x -> about {sim_total / options.speed:.0f} s of wall time"
    )


def _start_cluster(stack: contextlib.ExitStack, console: Console, options: DemoOptions, scenario, sdd: dict):
    """(api, kubelet, operator): the cluster of ``--kubeconfig`` (no kubelet, no operator of ours), or the API
    emulator with the operator in a thread and a kubelet that runs simulated runtime pods; stopped with ``stack``."""
    if options.kubeconfig:
        return _Api(None, options.kubeconfig), None, None
    from ..testbed.runner import EmulatorServer, OperatorThread
    from .kubelet import SimulatedKubelet

    server = stack.enter_context(EmulatorServer())
    console.print(f"API emulator (kmock KubernetesEmulator + CRD schema/CEL admission) at {server.url}")
    # The pods simulate `speed` seconds per wall second, so the tuner's clock runs at the same pace
    # (intervalSeconds stays what the spec says, in simulated time).
    config = OperatorConfig.from_env(
        {},
        server=server.url,
        standalone=True,
        metrics_port=0,
        liveness_endpoint=None,
        resync_seconds=1.0,
        tune_interval_scale=1.0 / options.speed,
    )
    operator = stack.enter_context(OperatorThread(config))
    console.print("operator started (kopf, server-side apply, field manager specdecode-operator)")
    api = _Api(server.url, None)
    token_dir = options.out_dir / "tokens"
    token_dir.mkdir(exist_ok=True)
    namespace = sdd["metadata"].get("namespace", "default")
    kubelet = stack.enter_context(SimulatedKubelet(api.client, namespace, scenario, options.speed, token_dir))
    return api, kubelet, operator


def _apply(api: _Api, console: Console, sdd: dict, options: DemoOptions) -> None:
    """Create the SpecDecodeDeployment; one that already exists is watched as it is."""
    from kubernetes.client import ApiException

    ns, name = sdd["metadata"].get("namespace", "default"), sdd["metadata"]["name"]
    try:
        api.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sdd)
    except ApiException as e:
        if e.status != 409:
            raise
        console.print(f"sdd/{name} already exists in {ns}: watching it as it is")
    console.print(
        f"applied sdd/{name} from {options.sdd_file}"
        if options.sdd_file
        else f"applied sdd/{name} (the seed's PCIe box: target TP8, EAGLE-3 draft TP1 on rank 0, autotune Live)"
    )


def _watch(
    stack: contextlib.ExitStack, console: Console, api: _Api, kubelet, operator, sdd: dict, options: DemoOptions
) -> _Progress:
    """Poll the object, its children and the simulated pods twice a second, printing the status and each tuner
    decision, until every pod has run its scenario, the wall-clock limit passes, or no pod started in 30 s."""
    ns, name = sdd["metadata"].get("namespace", "default"), sdd["metadata"]["name"]
    progress = _Progress()
    live = Live(console=console, refresh_per_second=4, transient=False) if console.is_terminal else None
    if live:
        stack.enter_context(live)
    start, last_plain = time.monotonic(), -10.0
    while True:
        time.sleep(0.5)
        wall = time.monotonic() - start
        obj = api.get_sdd(ns, name)
        _sample_pods(progress, kubelet, wall)
        _print_news(console, progress, obj, api.children(ns, name), on_emulator=kubelet is not None)
        table = report.status_table(
            obj, progress.sim, progress.phase, len(progress.engines), simulated=kubelet is not None
        )
        if live:
            live.update(Group(table))
        elif wall - last_plain >= 10:
            console.print(table)
            last_plain = wall
        if operator is not None and operator.error is not None:
            raise DemoFailed(f"the operator stopped: {operator.error!r}")
        done = progress.engines and all(e.finished for e in progress.engines)
        stuck = kubelet is not None and not progress.engines and wall > 30
        if done or wall > options.max_wall_seconds or stuck:
            break
    progress.final = api.get_sdd(ns, name)
    console.print(
        report.status_table(
            progress.final, progress.sim, progress.phase, len(progress.engines), simulated=kubelet is not None
        )
    )
    return progress


def _sample_pods(progress: _Progress, kubelet, wall: float) -> None:
    """Read the simulated pods' clocks and token counts; a new point on the timeline when simulated time moved."""
    engines = kubelet.engines() if kubelet else []
    progress.engines = engines
    progress.sim = max((e.now for e in engines), default=0.0)
    progress.tokens = sum(e.tokens_total for e in engines)
    progress.phase = engines[0].phase.name if engines else "-"
    if engines and progress.sim > progress._sampled_sim:
        rate = (
            (progress.tokens - progress._sampled_tokens) / (progress.sim - progress._sampled_sim) / max(len(engines), 1)
        )
        steps = engines[0].table.lookup(1)
        progress.timeline.samples.append(report.Sample(wall, progress.sim, progress.phase, rate, steps))
        progress._sampled_tokens, progress._sampled_sim = progress.tokens, progress.sim


def _print_news(console: Console, progress: _Progress, obj: dict, children: list[dict], on_emulator: bool) -> None:
    """The children once the operator's first pass has written status, and every tuner decision not yet shown."""
    status = obj.get("status") or {}
    observed = status.get("observedGeneration") == obj["metadata"].get("generation")
    if not progress.objects_printed and children and observed:  # status is written after the pass's children
        console.print(report.objects_table(children, "API emulator" if on_emulator else "cluster"))
        progress.objects_printed = True
    history = status.get("history") or []
    for entry in history[progress.decisions :]:
        console.print(
            f"[cyan]tuner[/] {entry.get('time', '')}: bucket {entry.get('bucket', '')} "
            f"{entry.get('fromSteps')} -> {entry.get('toSteps')}: {entry.get('reason', '')}"
        )
    progress.decisions = len(history)


def _cluster_result(console: Console, progress: _Progress) -> dict[str, Any]:
    """On a real cluster: what the tuner measured there (status.speculative.tokensPerSecond), nothing simulated."""
    status = progress.final.get("status") or {}
    measured = (status.get("speculative") or {}).get("tokensPerSecond")
    console.print(f"measured on the cluster by the tuner: {measured} tok/s (status.speculative.tokensPerSecond)")
    if measured is None:
        ready: dict[str, Any] = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        console.print(
            f"nothing measured yet: Ready={ready.get('status', 'Unknown')} "
            f"({ready.get('reason', 'no status')}: {ready.get('message', '')})"
        )
    return {"simulated": False, "tokens_per_s": {"measured": measured}, "conditions": progress.conditions}


def _simulated_result(console: Console, scenario, progress: _Progress, kubelet, out: Path) -> dict[str, Any]:
    """On the emulator: the tuned pods' tokens/s against in-process reference runs of the same scenario (the seed's
    layout, no speculation, an untuned split draft), as a table and a plot; every figure simulated."""
    sim_total = sum(p.seconds for p in scenario.phases)
    engines = progress.engines
    tuned = progress.tokens / max(progress.sim, 1e-9) / max(len(engines), 1) if engines else 0.0
    reference, reference_series = reference_runs(scenario, progress.sim or sim_total)
    rows = [(k, v, "in-process simulator, same scenario") for k, v in reference.items()]
    rows.append(("tuned, draft on rank 0 (this run)", tuned, "operator + tuner on simulated pods"))
    console.print(report.summary_table(rows, report.seed_caption(reference_series, REFERENCES[1][0], REFERENCES[0][0])))
    png = report.plot(progress.timeline, reference_series, out / "tokens_and_steps.png")
    if png:
        console.print(f"plot (simulated): {png}")
    return {
        "simulated": True,
        "scenario": scenario.name,
        "simulated_seconds": progress.sim,
        "tokens_per_s": {k: v for k, v, _ in rows},
        "tuner_decisions": progress.decisions,
        "restarts": kubelet.state.restarts,
        "conditions": progress.conditions,
        "kubelet_errors": kubelet.errors[-5:],
    }
