"""One self-test run: start real SGLang with one layout, generate greedily, collect what every rank saw.

The speculative layouts go through the same path as ``specdecode-runtime launch``: a runtime.yaml, the launcher's
plan (SGLang arguments, NCCL environment, the Live adaptive-config file), SGLang's own argument parser, and the
runtime's scheduler entry point (patches, step control, metrics) in every spawned scheduler. The only difference
is the front end: SGLang's offline ``Engine`` instead of its HTTP server, so the tokens come back in-process.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import cost_probe, cpu
from ..contract.metric_names import COST_SECONDS, DRAFT_INFO, DRAFT_SWAP_SECONDS, DRAFT_SWAPS
from ..cpu.scheduler import run_scheduler_process as cpu_run_scheduler_process
from ..launch import METRICS_DIR_ENV, STATE_DIR_ENV, plan_launch, write_launch_files
from ..scheduler_process import run_scheduler_process
from .children import ChildWatch
from .hang import diagnose
from .options import Options
from .rank_probe import CORRUPT_ENV, DIR_ENV, events, read_records
from .served import draft_request, measure
from .served import put_steps as _put_steps

LAYOUT_TITLES = {
    "nospec": "no speculation",
    "stock": "stock SGLang, no runtime patch (the sharded layout's arguments)",
    "sharded": "stock EAGLE (draft sharded over all ranks)",
    "split": "split draft (draft on its own ranks, proposals broadcast)",
}


@dataclass
class RunResult:
    layout: str
    tokens: list[list[int]] | None = None
    error: str | None = None
    hang: dict | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    acceptance: dict[str, Any] = field(default_factory=dict)
    ranks: dict[int, list[dict]] = field(default_factory=dict)
    puts: list[dict] = field(default_factory=list)
    draft_ranks: list[int] | None = None
    cost_profile: dict[str, dict[str, float]] = field(default_factory=dict)  # bucket -> fitted CycleCost (ms)
    cost_mode: str | None = None  # how the probe launched its stages: graph (CUDA graph replays) or eager
    served: list[dict] = field(default_factory=list)  # served cycle vs the probe's prediction (--measure-cycles)
    graphs: dict[str, dict[str, float]] = field(default_factory=dict)  # per tier: capture seconds and GiB
    memory_gb: dict[int, float] = field(default_factory=dict)  # per TP rank: device memory in use once serving
    warmup_records: dict[int, int] = field(default_factory=dict)  # per rank: records written before the timed run
    draft_swaps: list[dict] = field(default_factory=list)  # --draft-swaps: each POST and its answer
    draft_status: dict | None = None  # GET on the draft endpoint once the generation ended
    draft_metrics: dict[str, Any] = field(default_factory=dict)  # the specdecode_draft_* series, with their labels
    repeat_tokens: list[list[int]] | None = None  # --draft-swaps: the warm-up's generation again, after the swaps
    repeat_records: dict[int, int] = field(default_factory=dict)  # per rank: records written before that repeat


@dataclass
class Models:
    target: str
    draft: str
    vocab: int
    prompt_pool: list[list[int]] = field(default_factory=list)  # token ids of real text (--prompt-file)
    noisy: str | None = None  # the served draft with noisy weights (--draft-swaps noisy)


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LISTEN_PORTS = (20000, 32768)  # below Linux's default ephemeral range (32768-60999)


def free_port() -> int:
    """A port free to listen on, on every address, from below the kernel's ephemeral range: the servers bind it
    later (0.0.0.0), and a port the kernel handed out as 0 can meanwhile become some outgoing connection's local
    port (an HTTP client, a gloo store), which failed a launch with "address already in use" on a busy machine."""
    lo, hi = LISTEN_PORTS
    try:
        ephemeral_lo = int(Path(EPHEMERAL_RANGE_FILE).read_text().split()[0])
        hi = min(hi, ephemeral_lo)
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    for _ in range(64):
        port = rng.randrange(lo, hi) if hi > lo else 0
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket() as s:  # everything tried is taken: whatever the kernel gives
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def prompts(opts: Options, vocab: int, pool: list[list[int]] | None = None) -> list[list[int]]:
    """Deterministic prompts of word tokens (ids from 3: the tiny tokenizer's specials come first), or the first
    ``opts.prompts`` of a pool of real text."""
    if pool:
        return [pool[i % len(pool)] for i in range(opts.prompts)]
    span = max(vocab - 3, 1)
    return [[3 + (11 * i + 7 * j * (i + 1)) % span for j in range(6 + 2 * i)] for i in range(opts.prompts)]


def max_new_tokens(opts: Options) -> int:
    """Long enough for every live step table and draft swap to be applied while the prompts still decode."""
    changes = len(opts.live_steps) + len(opts.draft_swaps)
    if not changes:
        return opts.max_new_tokens
    return max(opts.max_new_tokens, 6 * (changes + 1) * (max(opts.candidate_steps) + 1))


def device_args(opts: Options) -> list[str]:
    """SGLang arguments for the device. CPU: the torch paths (torch_native attention, pytorch sampling, no CUDA
    graphs, no overlap scheduler) that the runtime's CPU stand-ins complete, float32 weights (float16 rounding would
    make greedy argmax depend on the TP reduction order), and a small fixed KV pool."""
    load = ["--load-format", opts.load_format] if opts.load_format else []
    if opts.device == "cuda":
        # The tiny models' logits must not tie: float32, as on CPU (verify and decode run different attention
        # kernels, and bfloat16 rounding can flip a greedy argmax between them). Real and dummy models keep theirs.
        dtype = ["--dtype", "float32"] if not (opts.model_path or opts.load_format == "dummy") else []
        return ["--mem-fraction-static", "0.6", "--random-seed", "0", *dtype, *load, *opts.sglang_args]
    return [
        "--device",
        "cpu",
        "--attention-backend",
        "torch_native",
        "--sampling-backend",
        "pytorch",
        "--disable-cuda-graph",
        "--disable-overlap-schedule",
        "--dtype",
        "float32",
        "--max-total-tokens",
        "4096",
        "--max-running-requests",
        "8",
        "--chunked-prefill-size",
        "-1",
        "--random-seed",
        "0",
        *load,
        *opts.sglang_args,
    ]


def device_env(opts: Options) -> dict[str, str]:
    if opts.device != "cpu":
        return {}
    cores = max(os.cpu_count() or 1, 1)
    return {"SGLANG_CPU_OMP_THREADS_BIND": "|".join(str(r % cores) for r in range(opts.tp)), "OMP_NUM_THREADS": "1"}


def runtime_yaml(opts: Options, layout: str, models: Models, control_port: int, token_file: str) -> str:
    draft_tp = opts.tp if layout in ("sharded", "stock") else opts.draft_tp
    draft: dict[str, Any] = {"model": models.draft, "algorithm": opts.algorithm, "tensorParallelSize": draft_tp}
    if layout == "split" and opts.draft_ranks:
        draft["ranks"] = list(opts.draft_ranks)
    spec: dict[str, Any] = {"numSteps": opts.steps, "eagleTopK": opts.topk, "candidateSteps": opts.candidate_steps}
    if opts.topk > 1:
        spec["numDraftTokens"] = opts.draft_tokens
    if opts.live_steps:
        spec["autotune"] = {
            "mode": "Live",
            "minSteps": min(opts.candidate_steps),
            "maxSteps": max(opts.candidate_steps),
        }
    doc = {
        "apiVersion": "specdecode.io/runtime/v1",
        "name": f"selftest-{layout}",
        "target": {"model": models.target, "tensorParallelSize": opts.tp},
        "draft": draft,
        "speculative": spec,
        "nccl": {"profile": "None", "preflight": opts.device == "cuda"},
        "server": {"port": free_port(), "controlPort": control_port, "tokenFile": token_file},
        "topology": {"nodes": 1, "gpusPerNode": opts.tp},
    }
    return yaml.safe_dump(doc, sort_keys=True)


def _engine_class(opts: Options):
    from sglang.srt.entrypoints.engine import Engine

    entry = cpu_run_scheduler_process if opts.device == "cpu" else run_scheduler_process

    class SelftestEngine(Engine):
        run_scheduler_process_func = staticmethod(entry)

    return SelftestEngine


def _server_args(
    opts: Options, layout: str, models: Models, work: Path, result: RunResult, control: dict[str, Any]
) -> Any:
    from sglang.srt.server_args import prepare_server_args

    metrics_dir = work / "metrics"
    env = {METRICS_DIR_ENV: str(metrics_dir), STATE_DIR_ENV: str(work / "state"), **device_env(opts)}
    if layout == "nospec":
        os.environ.pop("SPECDECODE_RUNTIME_CONFIG", None)
        metrics_dir.mkdir(parents=True, exist_ok=True)
        os.environ.update(env)
        return prepare_server_args(["--model-path", models.target, "--tp-size", str(opts.tp), *device_args(opts)])
    token = secrets.token_hex(16)
    token_file = work / "token"
    token_file.write_text(token)
    port = free_port()
    control.update(port=port, token=token)
    cfg = work / "runtime.yaml"
    cfg.write_text(runtime_yaml(opts, layout, models, port, str(token_file)))
    plan = plan_launch(str(cfg), device_args(opts), environ={**os.environ, **env})
    if plan.reasons:
        raise RuntimeError("the launcher refuses this layout: " + "; ".join(plan.reasons))
    result.draft_ranks = list(plan.draft_ranks) if plan.draft_ranks else None
    write_launch_files(plan)
    os.environ.update(env)
    os.environ.update(plan.env)
    if layout == "stock":  # the same SGLang arguments, none of the runtime: no config, so no patch is installed
        os.environ.pop("SPECDECODE_RUNTIME_CONFIG", None)
        control.clear()
    # SGLang's --enable-metrics registers its tokenizer-side series in this process's global registry, once per
    # Engine, and the self-test starts several engines in one process; the specdecode_* series it checks are
    # written by the scheduler processes into the multiprocess directory either way.
    args = [a for a in plan.args if a != "--enable-metrics"]
    return prepare_server_args(args)


_events = events  # rank records of one event kind, as the live-step driver reads them


def _drive_live_steps(
    opts: Options, rank_dir: Path, control: dict[str, Any], done: threading.Event, result: RunResult
) -> None:
    """PUT each live step table once rank 0 has decoded two batches since the previous change (``verify`` records,
    target-only cycles included), then wait until rank 0 runs the new tier (or the generation has ended)."""
    current = opts.steps
    for steps in opts.live_steps:
        seen = len(_events(rank_dir, 0, "verify"))
        while not done.is_set() and len(_events(rank_dir, 0, "verify")) < seen + 2:
            time.sleep(0.02)
        if done.is_set():
            result.puts.append({"steps": steps, "status": None, "note": "generation ended before this PUT"})
            return
        try:
            result.puts.append(_put_steps(control, steps))
        except OSError as e:
            result.puts.append({"steps": steps, "status": None, "error": str(e)})
            return
        while steps != current and not done.is_set():
            switches = _events(rank_dir, 0, "switch")
            if switches and switches[-1]["to"] == steps:
                break
            time.sleep(0.02)
        current = steps


SWAP_ROUNDS = 3  # decode rounds on rank 0 between two draft swaps (each stretch's acceptance shows in its records)


def _drive_draft_swaps(
    opts: Options, rank_dir: Path, control: dict[str, Any], done: threading.Event, result: RunResult, models: Models
) -> None:
    """POST each draft of ``--draft-swaps`` once rank 0 has decoded ``SWAP_ROUNDS`` rounds since the previous one;
    the POST returns once every rank has settled the swap (loaded, or refused with the old draft serving)."""
    for item in opts.draft_swaps:
        source = {"noisy": models.noisy, "served": models.draft}.get(item, item) or item
        seen = len(_events(rank_dir, 0, "verify"))
        while not done.is_set() and len(_events(rank_dir, 0, "verify")) < seen + SWAP_ROUNDS:
            time.sleep(0.02)
        if done.is_set():
            result.draft_swaps.append({"item": item, "source": source, "status": None, "note": "generation ended"})
            return
        try:
            answer = draft_request(control, source)
        except OSError as e:
            result.draft_swaps.append({"item": item, "source": source, "status": None, "error": str(e)})
            return
        result.draft_swaps.append({"item": item, "source": source, **answer, "t": time.time()})


def _draft_metrics(metrics_dir: Path) -> dict[str, Any]:
    """The specdecode_draft_* series as the scheduler processes exported them, with their labels."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=str(metrics_dir))
    out: dict[str, Any] = {"info": [], "swaps": {}, "seconds": {}}
    for metric in reg.collect():
        for smp in metric.samples:
            if smp.name == DRAFT_INFO:
                out["info"].append({**smp.labels, "value": smp.value})
            elif smp.name == DRAFT_SWAPS + "_total":
                out["swaps"][smp.labels["result"]] = smp.value
            elif smp.name in (DRAFT_SWAP_SECONDS + "_sum", DRAFT_SWAP_SECONDS + "_count"):
                part = smp.name.rsplit("_", 1)[1]
                out["seconds"].setdefault(smp.labels["result"], {})[part] = smp.value
    return out


def _read_metrics(metrics_dir: Path) -> dict[str, float]:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=str(metrics_dir))
    out: dict[str, float] = {}
    for metric in reg.collect():
        for s in metric.samples:
            if not s.name.startswith("specdecode_"):
                continue
            key = s.name + "".join(f"|{k}={v}" for k, v in sorted(s.labels.items()) if k in ("phase", "position"))
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


def _cost_profile(metrics_dir: Path) -> tuple[dict[str, dict[str, float]], str | None]:
    """The start-up cost probe as the operator's tuner fits it (``cost_probe.fit_profile``), per bucket in ms; empty
    when the probe measured too little for a cycle profile (the tuner then uses per-cycle phase averages)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=str(metrics_dir))
    samples = {
        (s.labels["stage"], int(s.labels["steps"]), s.labels["bucket"], int(s.labels["batch"])): s.value
        for m in reg.collect()
        for s in m.samples
        if s.name == COST_SECONDS
    }
    fitted = cost_probe.fit_profile(cost_probe.points_from_samples(samples))
    mode = None
    if samples:  # the graph probe times each tier's whole draft phase ("draft"), the eager one a single step
        mode = cost_probe.GRAPH if any(k[0] == "draft" for k in samples) else cost_probe.EAGER
    return {label: {k: round(v, 4) for k, v in asdict(c).items()} for label, c in fitted.items()}, mode


def graph_costs(ranks: dict[int, list[dict]]) -> dict[str, dict[str, float]]:
    """Per tier, on TP rank 0: seconds and GiB of device memory its CUDA graphs took at start-up (target verify,
    draft, draft extend), from the ``graph_capture`` records."""
    out: dict[str, dict[str, float]] = {}
    for e in ranks.get(0, []):
        if e.get("event") != "graph_capture":
            continue
        tier = out.setdefault(str(e.get("steps")), {"capture_s": 0.0, "mem_gb": 0.0})
        tier["capture_s"] = round(tier["capture_s"] + float(e.get("seconds") or 0.0), 3)
        tier["mem_gb"] = round(tier["mem_gb"] + float(e.get("bytes") or 0) / 2**30, 3)
        tier[f"{e.get('kind')}_s"] = round(tier.get(f"{e.get('kind')}_s", 0.0) + float(e.get("seconds") or 0.0), 3)
    return out


def _acceptance(outputs: list[dict], metrics: dict[str, float]) -> dict[str, Any]:
    engine: dict[str, Any] = {"verify_ct": 0, "correct_drafts": 0, "completion_tokens": 0, "requests": len(outputs)}
    for o in outputs:
        mi = o.get("meta_info", {})
        engine["verify_ct"] += int(mi.get("spec_verify_ct", 0) or 0)
        engine["correct_drafts"] += int(mi.get("spec_num_correct_drafts", 0) or 0)
        engine["completion_tokens"] += int(mi.get("completion_tokens", 0) or 0)
    engine["accept_length"] = (
        round(engine["completion_tokens"] / engine["verify_ct"], 3) if engine["verify_ct"] else None
    )
    exported = {
        "requests_verified": metrics.get("specdecode_requests_verified_total", 0.0),
        "accepted_drafts": sum(v for k, v in metrics.items() if k.startswith("specdecode_position_accepted_total")),
        "verify_cycles": metrics.get("specdecode_verify_cycles_total", 0.0),
        "draft_steps": metrics.get("specdecode_draft_steps_total", 0.0),
    }
    return {"engine": engine, "exported": exported}


class ChildFailed(RuntimeError):
    """A scheduler (or detokenizer) process failed; its error is in the rank records."""


def _child_failed(signum, frame) -> None:
    raise ChildFailed("an SGLang child process failed (SIGQUIT from the child)")


def _rank_errors(ranks: dict[int, list[dict]]) -> str:
    errs = [f"rank {rk}: {e['message']}" for rk, evs in sorted(ranks.items()) for e in evs if e["event"] == "error"]
    return "; ".join(errs)


def run_layout(opts: Options, layout: str, models: Models, work: Path, on_hang) -> RunResult:
    """Start, generate, shut down. ``on_hang(result)`` is called from a watchdog thread when the run outlives
    ``opts.timeout`` (it reports and ends the process: a hung collective cannot be cancelled)."""
    result = RunResult(layout=layout)
    rank_dir = work / "ranks"
    rank_dir.mkdir(parents=True, exist_ok=True)
    for f in rank_dir.glob("rank*.*"):  # a kept directory from an earlier run
        f.unlink()
    os.environ[DIR_ENV] = str(rank_dir)
    if opts.corrupt_draft and layout == "split":
        os.environ[CORRUPT_ENV] = "1"
    else:
        os.environ.pop(CORRUPT_ENV, None)
    control: dict[str, Any] = {}
    finished = threading.Event()

    def watchdog() -> None:
        if finished.wait(opts.timeout):
            return

        result.hang = diagnose(rank_dir)
        result.ranks = read_records(rank_dir)
        on_hang(result)

    threading.Thread(target=watchdog, name="selftest-watchdog", daemon=True).start()

    def child_died(description: str) -> None:
        if finished.is_set():
            return
        result.error = description
        result.ranks = read_records(rank_dir)
        on_hang(result)

    children = ChildWatch(rank_dir, child_died).start()
    engine = None
    t0 = time.perf_counter()
    try:
        if opts.device == "cpu":
            cpu.install()
        server_args = _server_args(opts, layout, models, work, result, control)
        # SGLang's own handler for a failed child kills this whole process tree, report included: raise instead.
        import msgspec

        msgspec.Struct.__setattr__(server_args, "custom_sigquit_handler", _child_failed)
        engine = _engine_class(opts)(server_args=server_args)
        t1 = time.perf_counter()
        result.timings["start_s"] = round(t1 - t0, 2)
        params: dict[str, Any] = {"temperature": 0.0, "max_new_tokens": max_new_tokens(opts), "ignore_eos": True}

        def generate_n(ids: list[list[int]], n: int) -> list[dict]:
            return list(engine.generate(input_ids=ids, sampling_params={**params, "max_new_tokens": n}))

        warm_outputs: list[dict] = []
        if opts.warmup:
            tw = time.perf_counter()
            for _ in range(opts.warmup):  # graphs warmed, kernels compiled: the timed run measures serving
                warm_outputs += generate_n(
                    prompts(opts, models.vocab, models.prompt_pool), min(8, params["max_new_tokens"])
                )
            result.timings["warmup_s"] = round(time.perf_counter() - tw, 2)
            result.warmup_records = {rk: len(evs) for rk, evs in read_records(rank_dir).items()}
            t1 = time.perf_counter()
        outputs: list[dict] = []
        done = threading.Event()
        errors: list[BaseException] = []

        def generate() -> None:
            try:
                outputs.extend(
                    engine.generate(input_ids=prompts(opts, models.vocab, models.prompt_pool), sampling_params=params)
                )
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                done.set()

        gen = threading.Thread(target=generate, name="selftest-generate", daemon=True)
        gen.start()
        swapping = bool(opts.draft_swaps) and layout in ("sharded", "split")
        if opts.live_steps and layout != "nospec":
            _drive_live_steps(opts, rank_dir, control, done, result)
        if swapping:
            _drive_draft_swaps(opts, rank_dir, control, done, result, models)
        gen.join()
        if errors:
            raise errors[0]
        t2 = time.perf_counter()
        result.tokens = [list(map(int, o.get("output_ids") or [])) for o in outputs]
        n = sum(len(t) for t in result.tokens)
        result.timings.update(
            generate_s=round(t2 - t1, 2), tokens=n, tokens_per_s=round(n / (t2 - t1), 2) if t2 > t1 else None
        )
        if swapping:  # the warm-up's generation again, with the draft the swaps left: its proposals tell which
            result.draft_status = draft_request(control)
            result.repeat_records = {rk: len(evs) for rk, evs in read_records(rank_dir).items()}
            repeat = generate_n(prompts(opts, models.vocab, models.prompt_pool), min(8, params["max_new_tokens"]))
            result.repeat_tokens = [list(map(int, o.get("output_ids") or [])) for o in repeat]
            outputs = outputs + repeat
            result.draft_metrics = _draft_metrics(work / "metrics")
        if layout not in ("nospec", "stock"):
            metrics = _read_metrics(work / "metrics")
            # the exporter counted the warm-up's cycles too: compare it with the engine's counts of every request
            result.acceptance = _acceptance(warm_outputs + outputs, metrics)
            result.timings["phases_s"] = {
                p: round(metrics.get(f"specdecode_cycle_seconds_sum|phase={p}", 0.0), 4)
                for p in ("draft", "verify", "draft_extend", "other")
            }
            result.cost_profile, result.cost_mode = _cost_profile(work / "metrics")
        records = read_records(rank_dir)
        result.graphs = graph_costs(records)
        result.memory_gb = {
            rk: round(e["used_bytes"] / 2**30, 3)
            for rk, evs in records.items()
            for e in evs
            if e.get("event") == "memory"
        }
        if opts.measure_batches:
            speculative = layout != "nospec"
            tiers = (opts.candidate_steps if opts.live_steps else [opts.steps]) if speculative else [0]
            result.served = measure(
                generate_n,
                tiers=tiers,
                batches=opts.measure_batches,
                measure_tokens=opts.measure_tokens,
                repeats=opts.measure_repeats,
                vocab=models.vocab,
                speculative=speculative,
                initial_steps=opts.steps,
                control=control if opts.live_steps else None,
                rank_dir=rank_dir,
                profile=result.cost_profile,
                pool=models.prompt_pool,
            )
    except Exception as e:  # noqa: BLE001 - every failure is reported, never a traceback
        tb = traceback.extract_tb(e.__traceback__)
        where = f" (at {tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name})" if tb else ""
        result.error = f"{type(e).__name__}: {e}{where}"
    finally:
        children.stop()
        finished.set()
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:  # noqa: BLE001
                pass
        finished.set()
        result.ranks = read_records(rank_dir)
        os.environ.pop(DIR_ENV, None)
        os.environ.pop(CORRUPT_ENV, None)
        if result.error and _rank_errors(result.ranks):
            result.error += " -- " + _rank_errors(result.ranks)
    return result
