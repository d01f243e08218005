#!/usr/bin/env python3
"""Served throughput of one server under a steady load, per batch: static step counts side by side with the
operator's own tuner driving the server in Live mode, and what the tuner's goodput model predicts.

Why this exists: a speedup claimed for autotuning is only worth the tuner that produced it. Here the pure
``Tuner`` of the operator (the same class the operator's tuning loop steps) gets exactly what it gets in a cluster —
the pod's ``/metrics`` text, parsed by the operator's ``parse_metrics``, every ``--interval`` seconds — and its step
tables go to the pod's control API with a bearer token, as the operator's pusher sends them. Nothing here tells it
the measured tok/s of a step count.

Servers (``--server``):
  nospec   stock ``sglang.launch_server`` without speculation (the baseline);
  stock:K  stock SGLang EAGLE-3, K steps, top-k 1 (one server per K: stock SGLang cannot change K while running);
  live     ``specdecode-runtime launch`` with Live tiers 1..7 (steps 0 served as well): static tiers are set by PUTs
           of one-tier tables, then the tuner runs from ``--initial-steps``.

Load: ``B`` client threads, each sending greedy requests back to back (``ignore_eos``, fixed output length) with
prompts cut from held-out text; tok/s in a window counts each request's output tokens pro rata over the part of its
lifetime inside the window (prefill of new requests included: this is served throughput, not decode alone).

Usage (GPU machine, kit installed; see trained_live.sh):
  python3 bench/gpu/campaigns/live_tune.py --server live --target T --draft D --heldout H --out live.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import host_probe  # noqa: E402

SGLANG_ARGS = [
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--max-running-requests",
    "32",
    "--max-total-tokens",
    "131072",
    "--cuda-graph-max-bs-decode",
    "32",
    "--cuda-graph-bs-decode",
    "1",
    "4",
    "8",
    "16",
    "32",
    "--enable-metrics",
    "--log-level",
    "warning",
]
LIVE_TIERS = [1, 2, 3, 4, 5, 6, 7]


def graph_args(max_batch: int) -> list[str]:
    """Running requests and decode graphs up to ``max_batch`` (SGLang takes the last value of a repeated flag)."""
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_batch]
    return ["--max-running-requests", str(max_batch), "--cuda-graph-max-bs-decode", str(max_batch)] + [
        "--cuda-graph-bs-decode",
        *map(str, sizes),
    ]


def prefill_graph_args(tokens: int) -> list[str]:
    """SGLang's prefill CUDA graphs (its breakable backend on CUDA) for extends of up to ``tokens`` tokens, or none.

    Small and frequent extends are what speculation adds at load (requests finish at different cycles, so they are
    replaced a few at a time, mostly from the prefix cache); run eagerly, each pays the target's whole launch cost.
    """
    return ["--cuda-graph-max-bs-prefill", str(tokens)] if tokens > 0 else ["--disable-prefill-cuda-graph"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, token: str | None = None, timeout: float = 120.0):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback server
        raw = r.read(8 << 20)
    return r.status, raw


def prompts_from(heldout: Path, n: int, chars: int) -> list[str]:
    """``n`` prompts of about ``chars`` characters, cut at line starts from held-out text (never trained on)."""
    text = heldout.read_text(errors="replace")
    out, pos = [], 0
    while len(out) < n and pos < len(text):
        start = text.find("\n", pos)
        if start < 0:
            break
        chunk = text[start + 1 : start + 1 + chars]
        if len(chunk.strip()) > chars // 2:
            out.append(chunk)
        pos = start + 1 + 4 * chars
    if not out:
        raise SystemExit(f"{heldout}: no prompts of {chars} characters")
    return out


class Load:
    """``batch`` threads sending requests back to back; records (start, end, output tokens) per request."""

    def __init__(self, url: str, prompts: list[str], batch: int, max_new_tokens: int):
        self.url, self.prompts, self.batch, self.n = url, prompts, batch, max_new_tokens
        self.records: list[tuple[float, float, int]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(batch)]

    def _run(self, i: int) -> None:
        j = i
        while not self.stop.is_set():
            body = {
                "text": self.prompts[j % len(self.prompts)],
                "sampling_params": {"max_new_tokens": self.n, "temperature": 0.0, "ignore_eos": True},
            }
            j += self.batch
            t0 = time.perf_counter()
            try:
                _, raw = http("POST", self.url + "/generate", body, timeout=300)
                out = json.loads(raw)
                toks = int((out.get("meta_info") or {}).get("completion_tokens") or len(out.get("output_ids") or []))
            except Exception as exc:  # a failed request is reported, not counted
                with self.lock:
                    self.errors.append(repr(exc)[:300])
                time.sleep(0.5)
                continue
            with self.lock:
                self.records.append((t0, time.perf_counter(), toks))

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            if t.ident is not None:  # started
                t.join(timeout=120)

    def tokens_per_s(self, t0: float, t1: float) -> float:
        with self.lock:
            recs = list(self.records)
        tok = 0.0
        for a, b, n in recs:
            if b <= a:
                continue
            overlap = min(b, t1) - max(a, t0)
            if overlap > 0:
                tok += n * overlap / (b - a)
        return tok / (t1 - t0)


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready")
        try:
            st, _ = http("GET", url + "/get_model_info", timeout=5)
            if st == 200:
                http(
                    "POST",
                    url + "/generate",
                    {"text": "def f(x):", "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}},
                )
                return time.time() - t0
        except Exception:
            pass
        time.sleep(1.0)
    raise SystemExit(f"server not ready after {timeout_s} s")


def start_server(a, work: Path, server: str | None = None) -> tuple[subprocess.Popen, str, dict]:
    server = server or a.server
    port = free_port()
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    control: dict = {}
    mem = ["--mem-fraction-static", str(a.mem_fraction)] if a.mem_fraction else []
    mem += graph_args(a.max_batch) if a.max_batch != 32 else []
    tp = getattr(a, "tp", 1)  # the campaign runner's; live_tune.py's own runs are TP 1
    common = (
        ["--host", "127.0.0.1", "--port", str(port)]
        + SGLANG_ARGS
        + prefill_graph_args(a.prefill_graph_tokens)
        + (["--dtype", a.dtype] if a.dtype else [])
        + (["--tp-size", str(tp)] if tp != 1 else [])
        + mem
    )
    if server == "nospec":
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", a.target] + common
    elif server.startswith("stock:"):
        k = int(server.split(":", 1)[1])
        cmd = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            a.target,
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            a.draft,
            "--speculative-num-steps",
            str(k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(k + 1),
        ] + common
    elif server == "live":
        import yaml

        from specdecode_runtime.contract.capabilities import autotune_steps

        token = secrets.token_urlsafe(24)
        token_file = work / "control-token"
        token_file.write_text(token)
        control = {"port": free_port(), "token": token}
        doc = {
            "apiVersion": "specdecode.io/runtime/v1",
            "name": "trained-live",
            "target": {"model": a.target, "tensorParallelSize": tp},
            "draft": {"model": a.draft, "algorithm": "EAGLE3", "tensorParallelSize": 1},
            "speculative": {
                "numSteps": a.initial_steps,
                "eagleTopK": 1,
                # the tiers the operator renders for Live 1..7 (steps 0 included), not a hand-made list
                "candidateSteps": autotune_steps("Live", 1, 7, a.initial_steps)[1],
                "autotune": {"mode": "Live", "minSteps": 1, "maxSteps": 7},
            },
            "nccl": {"profile": "None", "preflight": False},
            "server": {"port": port, "controlPort": control["port"], "tokenFile": str(token_file)},
            "topology": {"nodes": 1, "gpusPerNode": tp},
        }
        if a.served_calibration:  # the pod times what it serves per tier before it reports healthy (served_probe)
            doc["costProbe"] = {
                "served": {"batches": [int(x) for x in a.served_calibration.split(",")], "tokens": a.served_tokens}
            }
        cfg = work / "runtime.yaml"
        cfg.write_text(yaml.safe_dump(doc, sort_keys=True))
        extra = [x for x in SGLANG_ARGS if x != "--enable-metrics"]  # launch sets it (our series share /metrics)
        extra += (["--dtype", a.dtype] if a.dtype else []) + mem
        cmd = [sys.executable, "-m", "specdecode_runtime", "launch", "--config", str(cfg), "--"] + extra
    else:
        raise SystemExit(f"--server {server!r}: allowed nospec, stock:K, live")
    log = open(work / f"server-{server.replace(':', '_')}.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}", control


def put_table(control: dict, body: dict) -> int:
    from specdecode_runtime.contract.step_table import STEPS_PATH

    st, _ = http("PUT", f"http://127.0.0.1:{control['port']}{STEPS_PATH}", body, token=control["token"], timeout=10)
    return st


def single(steps: int) -> dict:
    from specdecode_runtime.contract.step_table import StepTable

    return StepTable.single(steps).to_json()


def replay(url: str, prompts: list[str], batch: int, per_thread: int, max_new_tokens: int) -> float:
    """tok/s of one fixed set of requests (``batch`` threads, ``per_thread`` prompts each, the same prompts for every
    configuration) from the first send to the last answer: every configuration generates the same content, so the
    window noise of a steady load (what is in flight changes acceptance) is not in the comparison."""
    load = Load(url, prompts, batch, max_new_tokens)
    done = threading.Barrier(batch + 1)

    def worker(i: int) -> None:
        try:
            for j in range(per_thread):
                body = {
                    "text": prompts[(i + j * batch) % len(prompts)],
                    "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True},
                }
                t0 = time.perf_counter()
                _, raw = http("POST", url + "/generate", body, timeout=300)
                out = json.loads(raw)
                toks = int((out.get("meta_info") or {}).get("completion_tokens") or len(out.get("output_ids") or []))
                with load.lock:
                    load.records.append((t0, time.perf_counter(), toks))
        except Exception as exc:
            with load.lock:
                load.errors.append(repr(exc)[:300])
        finally:
            done.wait()

    t0 = time.perf_counter()
    for i in range(batch):
        threading.Thread(target=worker, args=(i,), daemon=True).start()
    done.wait(timeout=900)
    if load.errors:
        raise RuntimeError(f"replay: {len(load.errors)} requests failed, first: {load.errors[0]}")
    return sum(n for _, _, n in load.records) / (time.perf_counter() - t0)


def gpu_clocks() -> dict:
    """SM clock, power and temperature now (``nvidia-smi``; empty where there is none): a server measured twice
    minutes apart can differ by far more than the effect under test, and this says whether the GPU moved."""
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split("\n")[0]
        sm, mem, power, temp = (float(x) for x in out.split(","))
        return {"sm_mhz": sm, "mem_mhz": mem, "power_w": power, "temp_c": temp}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def paired(measure, set_a, set_b, pairs: int, measure_b=None) -> dict:
    """A against B in alternating rounds (A B, B A, A B, ...) on the same fixed request set, and the median of the
    per-round ratios: a drift of the server over minutes (measured: the same configuration 1.5x faster later in one
    run) moves both sides of a round alike, so it cancels in the ratio, which one pass in a fixed order cannot do."""
    rounds = []
    for i in range(pairs):
        got = {}
        for name, setter in (("a", set_a), ("b", set_b)) if i % 2 == 0 else (("b", set_b), ("a", set_a)):
            setter()
            got[name] = (measure_b or measure)() if name == "b" else measure()
        rounds.append({"a": round(got["a"], 1), "b": round(got["b"], 1), "ratio": round(got["a"] / got["b"], 4)})
    ratios = sorted(r["ratio"] for r in rounds)
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    return {
        "rounds": rounds,
        "median_ratio": round(median, 4),
        "spread": round(ratios[-1] - ratios[0], 4),
    }


class Observer:
    """One measurement with what the pod counted during it, the GPU's clocks, the host's load and CPU speed (the
    sampler process), and the scheduler process's CPU time and involuntary switches: enough to say afterwards
    whether a slow point was the server, the GPU or the host."""

    def __init__(self, url: str, sampler: host_probe.HostSampler | None):
        self.url, self.sampler = url, sampler

    def __call__(self, measure) -> tuple[float, dict]:
        before, gpu, load1 = pod_samples(self.url), gpu_clocks(), os.getloadavg()[0]
        sched0, w0 = host_probe.scheduler_stats(), time.time()
        tps = measure()
        w1 = time.time()
        detail = {
            "tokens_per_s": round(tps, 1),
            "gpu": gpu,
            "host_load1": round(load1, 2),
            "pod_counters": counters_delta(before, pod_samples(self.url)),
            "wall_s": round(w1 - w0, 3),
            "scheduler": host_probe.stats_delta(sched0, host_probe.scheduler_stats()),
            "host_cpu": self.sampler.window(w0, w1) if self.sampler else {},
        }
        return tps, detail


def measure_static(load: Load, settle_s: float, window_s: float) -> float:
    time.sleep(settle_s)
    t0 = time.perf_counter()
    time.sleep(window_s)
    return load.tokens_per_s(t0, time.perf_counter())


def greedy_outputs(url: str, prompts: list[str], n: int) -> list[list[int]]:
    """Output ids of greedy requests sent one at a time (no batching effects), to compare servers token by token."""
    outs = []
    for text in prompts:
        _, raw = http(
            "POST",
            url + "/generate",
            {"text": text, "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}},
        )
        outs.append(list(json.loads(raw).get("output_ids") or []))
    return outs


def scrape(url: str) -> str:
    _, raw = http("GET", url + "/metrics", timeout=10)
    return raw.decode(errors="replace")


# SGLang's own request timings (both servers export them): where a request's time goes before and around decoding
SGLANG_TIMINGS = (
    "sglang:queue_time_seconds",
    "sglang:time_to_first_token_seconds",
    "sglang:e2e_request_latency_seconds",
)


def pod_samples(url: str) -> dict[str, float]:
    """The pod's own ``specdecode_*`` samples (``name{label=value,...}`` -> value), the probe's costs included, and
    the sums and counts of SGLang's request timings."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(scrape(url)):
        for s in family.samples:
            if s.name.startswith("specdecode_") or s.name in {
                t + x for t in SGLANG_TIMINGS for x in ("_sum", "_count")
            }:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
    return out


def counters_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the pod counted during one measurement (counters and summaries; gauges and the probe's costs left
    out): the decode-only side of a point, next to the served tok/s the clients saw."""
    return {
        k: round(v - before.get(k, 0.0), 6)
        for k, v in after.items()
        if k.split("{", 1)[0].endswith(("_total", "_sum", "_count")) and v != before.get(k, 0.0)
    }


def run_live(a, url: str, control: dict, load: Load, batch: int) -> dict:
    """The operator's tuner on this pod: scrape, step, push when the table changes; tok/s per interval."""
    from specdecode_operator.tuner.snapshot import parse_metrics
    from specdecode_operator.tuner.tuner import Tuner, TunerConfig
    from specdecode_runtime.contract.goodput import goodput
    from specdecode_runtime.contract.metric_names import bucket_label

    autotune = SimpleNamespace(
        mode="Live",
        minSteps=1,
        maxSteps=7,
        intervalSeconds=a.interval,
        objective="Throughput",
        maxInterTokenLatencyMs=None,
    )
    tuner = Tuner(TunerConfig.from_autotune(autotune, a.initial_steps))
    put_table(control, single(a.initial_steps))
    trace, t_start = [], time.perf_counter()
    prev = t_start
    while time.perf_counter() - t_start < a.live_seconds:
        time.sleep(max(0.0, prev + a.interval - time.perf_counter()))
        now = time.perf_counter()
        snap = parse_metrics(scrape(url), "pod-0", now)
        d = tuner.step(now, [snap])
        pushed = put_table(control, d.step_table_body()) if d.changed else None
        trace.append(
            {
                "t": round(now - t_start, 2),
                "tokens_per_s": round(load.tokens_per_s(prev, now), 1),
                "table": d.table,
                "pushed": pushed,
                "reasons": {k: f"{r.choice.kind}: {r.choice.reason}" for k, r in d.buckets.items()},
            }
        )
        prev = now
    t_end = time.perf_counter()
    label = bucket_label(batch)
    cost, source = tuner.cost(label)
    alphas = tuner._acceptance(label, t_end, 8).alphas if label in tuner.estimator.windows else None
    predicted = {}
    if cost is not None and alphas:
        predicted = {str(k): round(goodput(alphas, cost, k, batch), 1) for k in [0] + LIVE_TIERS}
    return {
        "trace": trace,
        "final_table": tuner.table(),
        "tokens_per_s_last": round(load.tokens_per_s(t_end - a.window, t_end), 1),
        "tokens_per_s_whole": round(load.tokens_per_s(t_start, t_end), 1),
        "cost_source": source,
        "alphas": [round(x, 4) for x in (alphas or [])],
        "refined_cost_ms": {str(k): round(cost.cycle_ms(k, batch), 4) for k in [0] + LIVE_TIERS} if cost else None,
        "predicted_tokens_per_s": predicted,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True, help="nospec | stock:K | live")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", default="")
    p.add_argument("--heldout", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--statics", default="0,1,2,3,4,5,6,7", help="live server: step counts measured statically")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--prompt-chars", type=int, default=240)
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--window", type=float, default=6.0)
    p.add_argument("--interval", type=float, default=5.0, help="tuner interval (the CRD's minimum is 5 s)")
    p.add_argument("--live-seconds", type=float, default=50.0)
    p.add_argument("--initial-steps", type=int, default=3)
    p.add_argument(
        "--replay",
        type=int,
        default=0,
        help="N > 0: measure every static point (and the tuner's final table) on one fixed set of N "
        "requests per client thread instead of a window of the steady load",
    )
    p.add_argument(
        "--pairs",
        type=int,
        default=4,
        help="with --replay: rounds of the tuner's final table against the best static, alternating their order",
    )
    p.add_argument("--check-prompts", type=int, default=8, help="greedy outputs kept to compare servers")
    p.add_argument("--check-tokens", type=int, default=64)
    p.add_argument(
        "--check-steps",
        default="",
        help="live server: greedy outputs at each of these step counts (comma-separated) besides the initial one",
    )
    p.add_argument("--dtype", default="", help="the servers' --dtype (float32 for a greedy check without bf16 ties)")
    p.add_argument("--greedy-only", action="store_true", help="only the greedy outputs: no load, no measurements")
    p.add_argument(
        "--pair-replay",
        type=int,
        default=0,
        help="requests per client thread in each paired round (default: --replay): short rounds alternate faster "
        "than the host drifts",
    )
    p.add_argument(
        "--repeat",
        default="",
        help="live server, STEPS:N: the static step count STEPS measured N times in a row before the tuner runs "
        "(and N more with the scheduler pinned when --pin-core is given): the server's own spread",
    )
    p.add_argument(
        "--pin-core",
        type=int,
        default=-1,
        help="bind the scheduler's main thread to this core (the rest of the server off it) after --repeat's "
        "unpinned half; every later measurement runs pinned",
    )
    p.add_argument(
        "--served-calibration",
        default="",
        help="live server, BATCHES (e.g. 1,8,32): costProbe.served in runtime.yaml, so the pod's start-up profile "
        "carries every tier's served cycle at these batch sizes (stage cycle) next to its stage replays",
    )
    p.add_argument("--served-tokens", type=int, default=64, help="decode tokens per request of the served calibration")
    p.add_argument(
        "--nospec-alongside",
        action="store_true",
        help="live server: a server without speculation runs beside it (same GPU, same arguments); each batch "
        "measures it on the same request set, and the tuner's table is paired against the better of it and the best "
        "static tier",
    )
    p.add_argument("--mem-fraction", type=float, default=0.0, help="--mem-fraction-static of each server (0: SGLang's)")
    p.add_argument("--max-batch", type=int, default=32, help="running requests and decode graphs up to this batch")
    p.add_argument(
        "--prefill-graph-tokens",
        type=int,
        default=0,
        help="both servers capture SGLang's prefill CUDA graphs for extends up to this many tokens (0: eager prefill)",
    )
    p.add_argument(
        "--tier0-pairs",
        type=int,
        default=0,
        help="with --nospec-alongside: rounds of the Live pod at steps 0 against the server without speculation",
    )
    a = p.parse_args()
    if a.served_calibration and a.server != "live":
        p.error("--served-calibration: only the live server runs the runtime's start-up calibration")
    if a.server != "nospec" and not a.draft:
        p.error("--draft is required for stock:K and live")
    work = Path(tempfile.mkdtemp(prefix="live-tune-"))
    prompts = prompts_from(a.heldout, 256, a.prompt_chars)
    if a.nospec_alongside and (a.server != "live" or not a.replay):
        p.error("--nospec-alongside needs --server live and --replay")
    proc, url, control = start_server(a, work)
    base_proc = base_url = None
    if a.nospec_alongside:
        base_proc, base_url, _ = start_server(a, work, "nospec")
    result: dict = {"server": a.server, "args": {k: str(v) for k, v in vars(a).items()}, "batches": {}}
    if a.server == "live":
        result["tier0"] = "plain"  # this runtime's tier 0 is plain decoding (the summaries price it so)
    # No speculation and tier 0 are measured with nothing else running on the GPU (the summaries trust only such runs)
    result["baselines_alone"] = True
    try:
        result["ready_s"] = round(wait_ready(url, proc, 600), 1)
        if base_proc is not None:
            result["nospec_ready_s"] = round(wait_ready(base_url, base_proc, 600), 1)
            result["nospec_greedy"] = greedy_outputs(base_url, prompts[: a.check_prompts], a.check_tokens)
        if a.server == "live":
            put_table(control, single(a.initial_steps))
            samples = pod_samples(url)
            result["probe_costs"] = {k: v for k, v in samples.items() if k.startswith("specdecode_cost_")}
            result["plain_graphs"] = {k: v for k, v in samples.items() if k.startswith("specdecode_plain_decode_")}
        result["greedy"] = greedy_outputs(url, prompts[: a.check_prompts], a.check_tokens)
        if a.server == "live" and a.check_steps:
            result["greedy_by_steps"] = {}
            for k in [int(x) for x in a.check_steps.split(",")]:
                put_table(control, single(k))
                result["greedy_by_steps"][str(k)] = greedy_outputs(url, prompts[: a.check_prompts], a.check_tokens)
            put_table(control, single(a.initial_steps))
        sampler = host_probe.HostSampler(work / "host-samples.txt").start()
        observe = Observer(url, sampler)
        observe_base = Observer(base_url, sampler) if base_url is not None else None
        if a.greedy_only:
            a.batches = ""
        for b in [int(x) for x in a.batches.split(",") if x]:
            load = Load(url, prompts, b, a.max_new_tokens)
            if not a.replay or a.server == "live":
                load.start()
            row: dict = {}
            measure = (
                (lambda: replay(url, prompts, b, a.replay, a.max_new_tokens))
                if a.replay
                else (lambda: measure_static(load, a.settle, a.window))
            )
            try:
                if a.server == "live":
                    row["static"] = {}
                    if a.replay:
                        load.close()  # statics replay the fixed set alone; the load comes back for the tuner
                    for k in [int(x) for x in a.statics.split(",")]:
                        try:
                            put_table(control, single(k))
                        except urllib.error.HTTPError as exc:  # a tier the pod does not serve: say so, go on
                            row.setdefault("refused", {})[str(k)] = (
                                f"{exc.code}: {exc.read(2000).decode(errors='replace')}"
                            )
                            print(f"b{b} static k={k}: refused {row['refused'][str(k)]}", flush=True)
                            continue
                        tps, det = observe(measure)
                        row.setdefault("gpu", {})[str(k)] = {**det["gpu"], "host_load1": det["host_load1"]}
                        row["static"][str(k)] = round(tps, 1)
                        row.setdefault("pod_counters", {})[str(k)] = det["pod_counters"]
                        row.setdefault("host", {})[str(k)] = {
                            "scheduler": det["scheduler"],
                            "host_cpu": det["host_cpu"],
                        }
                        print(f"b{b} static k={k}: {row['static'][str(k)]} tok/s", flush=True)
                    if a.repeat:
                        rk, rn = (int(x) for x in a.repeat.split(":"))
                        put_table(control, single(rk))
                        row["repeat"] = {"steps": rk}
                        if "pinned" not in result:
                            row["repeat"]["unpinned"] = [observe(measure)[1] for _ in range(rn)]
                        if a.pin_core >= 0 and "pinned" not in result:
                            result["pinned"] = host_probe.pin(
                                a.pin_core, os.getpgid(proc.pid), also=(sampler.proc.pid,) if sampler.proc else ()
                            )
                        if a.pin_core >= 0:
                            row["repeat"]["pinned"] = [observe(measure)[1] for _ in range(rn)]
                        print(
                            f"b{b} repeat k={rk}: unpinned {[m['tokens_per_s'] for m in row['repeat'].get('unpinned', [])]}"
                            f" pinned {[m['tokens_per_s'] for m in row['repeat'].get('pinned', [])]}",
                            flush=True,
                        )
                    if base_url is not None:  # the server without speculation, on the same request set
                        tps, det = observe_base(lambda: replay(base_url, prompts, b, a.replay, a.max_new_tokens))
                        row["nospec"] = round(tps, 1)
                        row.setdefault("pod_counters", {})["nospec"] = det["pod_counters"]
                        row.setdefault("gpu", {})["nospec"] = {**det["gpu"], "host_load1": det["host_load1"]}
                        print(f"b{b} nospec (alongside): {row['nospec']} tok/s", flush=True)
                        if a.tier0_pairs:  # tier 0 against no speculation, alternating, on the same request set
                            per0 = a.pair_replay or a.replay
                            row["tier0_vs_nospec"] = paired(
                                lambda: replay(url, prompts, b, per0, a.max_new_tokens),
                                lambda: put_table(control, single(0)),
                                lambda: None,
                                a.tier0_pairs,
                                measure_b=lambda: replay(base_url, prompts, b, per0, a.max_new_tokens),
                            )
                            print(f"b{b} tier 0 / nospec: {row['tier0_vs_nospec']['median_ratio']}", flush=True)
                    # The tuner's steady load comes back only now: the points above each measure their own request
                    # set alone on the GPU (with the load running, the pod served two sets at once and the server
                    # without speculation shared the GPU with it: tier 0 read 0.45x of it at batch 64).
                    if a.replay:
                        load = Load(url, prompts, b, a.max_new_tokens).start()
                    row["live"] = run_live(a, url, control, load, b)
                    best_k = max(row["static"], key=lambda k: row["static"][k])
                    row["best_static"] = {"steps": int(best_k), "tokens_per_s": row["static"][best_k]}
                    baseline_is_nospec = base_url is not None and row["nospec"] > row["static"][best_k]
                    row["baseline"] = "nospec" if baseline_is_nospec else f"static:{best_k}"
                    if a.replay:  # the tuner's final table on the same fixed set as the statics
                        load.close()
                        final = {"table": [{"minBatch": lo, "steps": k} for lo, k in row["live"]["final_table"]]}
                        put_table(control, final)
                        tps, det = observe(measure)
                        row["live"]["tokens_per_s_replay"] = round(tps, 1)
                        row["live"]["pod_counters_replay"] = det["pod_counters"]
                        detail: list[dict] = []  # per measurement, in order: what the pod counted, GPU, host
                        per = a.pair_replay or a.replay

                        def observed(at: str = url) -> float:
                            tps, det = observe(lambda: replay(at, prompts, b, per, a.max_new_tokens))
                            detail.append(det)
                            return tps

                        row["paired"] = paired(
                            observed,
                            lambda: put_table(control, final),
                            (lambda: None) if baseline_is_nospec else (lambda: put_table(control, single(int(best_k)))),
                            a.pairs,
                            measure_b=(lambda: observed(base_url)) if baseline_is_nospec else None,
                        )
                        row["paired"]["measurements"] = detail
                    live_tps = row["live"].get("tokens_per_s_replay") or row["live"]["tokens_per_s_last"]
                    row["live_over_best_static"] = (
                        row["paired"]["median_ratio"]
                        if row.get("paired")
                        else round(live_tps / row["static"][best_k], 4)
                    )
                    print(
                        f"b{b} live: {row['live']['tokens_per_s_last']} tok/s (table {row['live']['final_table']}),"
                        f" best static k={best_k} {row['static'][best_k]}",
                        flush=True,
                    )
                else:
                    row["tokens_per_s"] = round(
                        measure() if a.replay else measure_static(load, a.settle, 2 * a.window), 1
                    )
                    print(f"b{b} {a.server}: {row['tokens_per_s']} tok/s", flush=True)
            finally:
                load.close()
            row["requests"] = len(load.records)
            row["errors"] = load.errors[:5]
            result["batches"][str(b)] = row
            a.out.write_text(json.dumps(result, indent=1))
    finally:
        with contextlib.suppress(NameError):
            sampler.stop()
            result["host_samples"] = sampler.samples()
        if base_proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(base_proc.pid, signal.SIGTERM)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass  # the server already exited (e.g. before it was ready): its log below says why
        except Exception:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        log = next(work.glob("server-*.log"), None)
        if log:
            result["server_log_tail"] = log.read_text(errors="replace")[-4000:]
        a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
