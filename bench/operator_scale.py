"""Operator at scale on the API emulator: N SpecDecodeDeployments created at once.

Measures time until every object has its workload child and a status for generation 1, per-reconcile latency,
operator API calls per reconcile, writes per CR (initial) and in steady state (goal: zero), and the RSS of the
operator's process. Three processes: the emulator (``testbed.serve``), the operator (kopf + our handlers in a
``spawn``ed process that only answers counter requests over a pipe) and this one (creates the objects, polls).

    python bench/operator_scale.py --count 500 --json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

import kubernetes

from specdecode_operator.reconcile.apply import resource_path


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB of a process, from /proc/PID/status."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def operator_process(url: str, resync: float, conn) -> None:
    """The operator alone in a process (as deployed: kopf, our handlers, the kubernetes client), answering the
    bench's requests for its counters over a pipe; nothing of the bench's client or polling runs here."""
    from specdecode_operator.opconfig import OperatorConfig
    from specdecode_operator.testbed.runner import OperatorThread

    config = OperatorConfig(server=url, standalone=True, metrics_port=0, liveness_endpoint=None,
                            resync_seconds=resync, request_timeout=10)
    with OperatorThread(config) as op:
        rec = op.registry.reconciler
        conn.send("ready")
        while (cmd := conn.recv()) != "stop":
            client = rec.client
            conn.send({"writes": client.writes, "calls": client.calls, "write_counts": dict(client.write_counts),
                       "reconciles": len(rec.durations),
                       "durations": list(rec.durations) if cmd == "durations" else None})


def body(i: int) -> dict:
    return {"apiVersion": "specdecode.io/v1alpha1", "kind": "SpecDecodeDeployment",
            "metadata": {"name": f"sdd-{i:04d}", "namespace": "default"},
            "spec": {"replicas": 1, "target": {"model": "meta-llama/Llama-3.1-70B-Instruct", "tensorParallelSize": 8},
                     "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "tensorParallelSize": 1 + (i % 2)}}}


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--resync", type=float, default=10.0, help="operator resync period (s)")
    parser.add_argument("--steady-seconds", type=float, default=12.0, help="window for steady-state writes")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds after 'all ready' before the steady-state window starts")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    emulator = subprocess.Popen([sys.executable, "-m", "specdecode_operator.testbed.serve"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    url = emulator.stdout.readline().strip()
    cfg = kubernetes.client.Configuration()
    cfg.host = url
    cfg.connection_pool_maxsize = 16
    api = kubernetes.client.ApiClient(cfg)

    def call(method, path, body=None, query=None):
        m, u, h, b, _ = api.param_serialize(method, path, query_params=query or [],
                                            header_params={"Accept": "application/json"}, body=body)
        r = api.call_api(m, u, h, b, _request_timeout=30)
        r.read()
        return json.loads(r.data)

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=operator_process, args=(url, args.resync, child), daemon=True)
    load_before = os.getloadavg()[0]
    try:
        proc.start()
        if not parent.poll(60) or parent.recv() != "ready":
            raise SystemExit("the operator did not start")
        rss_before = rss_mb(proc.pid)[0]
        cpu_before, emu_cpu_before = cpu_seconds(proc.pid), cpu_seconds(emulator.pid)

        def stats(cmd: str = "stats") -> dict:
            parent.send(cmd)
            return parent.recv()

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: call("POST", resource_path("specdecode.io/v1alpha1", "specdecodedeployments",
                                                                "default"), body(i)), range(args.count)))
        created = time.monotonic() - started
        # Polling loads the emulator (at N=500 one LIST of the objects is ~2 MB of JSON): every 0.5 s, and the
        # Deployments are listed only once every object has its status (written after the children).
        deps: list = []
        while True:
            sdds = call("GET", resource_path("specdecode.io/v1alpha1", "specdecodedeployments", "default"))["items"]
            with_status = sum(1 for s in sdds if (s.get("status") or {}).get("observedGeneration") == 1
                              and s["status"].get("conditions"))
            if with_status == args.count:
                deps = call("GET", resource_path("apps/v1", "deployments", "default"))["items"]
                if len(deps) == args.count:
                    break
            if time.monotonic() - started > args.timeout:
                raise SystemExit(f"timeout: {with_status}/{args.count} with status, {len(deps)} deployments")
            time.sleep(0.5)
        ready_s = time.monotonic() - started
        cpu_ready = cpu_seconds(proc.pid) - cpu_before
        emu_cpu_ready = cpu_seconds(emulator.pid) - emu_cpu_before
        rss_ready = rss_mb(proc.pid)[0]
        at_ready = stats("durations")
        durations_ms = [d * 1000 for d in at_ready["durations"]]
        # Writes after "ready" are the wave's tail (e.g. the tuner's first interval); steady state is measured
        # once that has settled: a window of --steady-seconds (longer than the resync period) after --settle.
        time.sleep(args.settle)
        mark = stats()
        time.sleep(args.steady_seconds)
        end = stats()
        rss, hwm = rss_mb(proc.pid)
        load_after = os.getloadavg()[0]
        parent.send("stop")
        proc.join(20)
    finally:
        if proc.is_alive():
            proc.kill()
        emulator.kill()  # its shutdown of hundreds of open watches is not part of the measurement
        emulator.wait(10)

    def delta(a: dict, b: dict) -> dict:
        return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0)}

    result = {
        "count": args.count,
        "seconds_to_create": round(created, 2),
        "seconds_to_all_ready": round(ready_s, 2),
        "reconciles_initial": at_ready["reconciles"],
        "reconcile_p50_ms": round(percentile(durations_ms, 0.5), 2),
        "reconcile_p99_ms": round(percentile(durations_ms, 0.99), 2),
        "reconcile_mean_ms": round(statistics.fmean(durations_ms), 2) if durations_ms else 0,
        "api_calls_per_reconcile_initial": round(at_ready["calls"] / max(1, at_ready["reconciles"]), 2),
        "writes_per_cr_initial": round(at_ready["writes"] / args.count, 2),
        "writes_initial_by_resource": at_ready["write_counts"],
        "writes_after_ready_before_steady": mark["writes"] - at_ready["writes"],
        "writes_after_ready_by_resource": delta(at_ready["write_counts"], mark["write_counts"]),
        "settle_seconds": args.settle,
        "steady_window_seconds": args.steady_seconds,
        "steady_reconciles": end["reconciles"] - mark["reconciles"],
        "writes_steady_state": end["writes"] - mark["writes"],
        "writes_steady_by_resource": delta(mark["write_counts"], end["write_counts"]),
        "api_calls_steady_state": end["calls"] - mark["calls"],
        "rss_mb_operator_process_at_ready": round(rss_ready, 1),
        "rss_mb_operator_process": round(rss, 1),
        "rss_peak_mb_operator_process": round(hwm, 1),
        "rss_mb_operator_process_idle_before": round(rss_before, 1),
        "cpu_s_operator_process_to_ready": round(cpu_ready, 1),
        "cpu_s_emulator_to_ready": round(emu_cpu_ready, 1),
        "resync_seconds": args.resync,
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(load_after, 2),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
