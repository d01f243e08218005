"""Operator at scale on the API emulator: N SpecDecodeDeployments created at once.

Measures time until every object has its workload child and a status for generation 1, per-reconcile latency,
operator API calls per reconcile, writes per CR (initial) and in steady state (goal: zero), and the RSS of the
process that runs the operator (the emulator runs in a separate process so its memory is not counted).

    python bench/operator_scale.py --count 500 --json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import kubernetes

from specdecode_operator.opconfig import OperatorConfig
from specdecode_operator.reconcile.apply import resource_path
from specdecode_operator.testbed.runner import OperatorThread


def rss_mb() -> tuple[float, float]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (pid None) or of another one (the emulator)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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

    config = OperatorConfig(server=url, standalone=True, metrics_port=0, liveness_endpoint=None,
                            resync_seconds=args.resync, request_timeout=10)
    rss_before = rss_mb()[0]
    cpu_before, emu_cpu_before = cpu_seconds(), cpu_seconds(emulator.pid)
    load_before = os.getloadavg()[0]
    try:
        with OperatorThread(config) as op:
            rec = op.registry.reconciler
            started = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i: call("POST", resource_path("specdecode.io/v1alpha1", "specdecodedeployments",
                                                                    "default"), body(i)), range(args.count)))
            created = time.monotonic() - started
            while True:
                sdds = call("GET", resource_path("specdecode.io/v1alpha1", "specdecodedeployments", "default"))["items"]
                deps = call("GET", resource_path("apps/v1", "deployments", "default"))["items"]
                with_status = sum(1 for s in sdds if (s.get("status") or {}).get("observedGeneration") == 1
                                  and s["status"].get("conditions"))
                if with_status == args.count and len(deps) == args.count:
                    break
                if time.monotonic() - started > args.timeout:
                    raise SystemExit(f"timeout: {with_status}/{args.count} with status, {len(deps)} deployments")
                time.sleep(0.25)
            ready_s = time.monotonic() - started
            cpu_ready, emu_cpu_ready = cpu_seconds() - cpu_before, cpu_seconds(emulator.pid) - emu_cpu_before
            initial_writes, initial_calls = rec.client.writes, rec.client.calls
            initial_write_counts = dict(rec.client.write_counts)
            initial_reconciles = len(rec.durations)
            durations_ms = [d * 1000 for d in rec.durations]
            time.sleep(1.0)  # let the last events of the creation wave drain
            mark_writes, mark_calls, mark_n = rec.client.writes, rec.client.calls, len(rec.durations)
            mark_write_counts = dict(rec.client.write_counts)
            time.sleep(args.steady_seconds)
            steady_writes = rec.client.writes - mark_writes
            steady_write_counts = {k: v - mark_write_counts.get(k, 0) for k, v in rec.client.write_counts.items()
                                   if v - mark_write_counts.get(k, 0)}
            steady_reconciles = len(rec.durations) - mark_n
            steady_calls = rec.client.calls - mark_calls
            rss, hwm = rss_mb()
    finally:
        emulator.kill()  # its shutdown of hundreds of open watches is not part of the measurement
        emulator.wait(10)
    result = {
        "count": args.count,
        "seconds_to_create": round(created, 2),
        "seconds_to_all_ready": round(ready_s, 2),
        "reconciles_initial": initial_reconciles,
        "reconcile_p50_ms": round(percentile(durations_ms, 0.5), 2),
        "reconcile_p99_ms": round(percentile(durations_ms, 0.99), 2),
        "reconcile_mean_ms": round(statistics.fmean(durations_ms), 2) if durations_ms else 0,
        "api_calls_per_reconcile_initial": round(initial_calls / max(1, initial_reconciles), 2),
        "writes_per_cr_initial": round(initial_writes / args.count, 2),
        "steady_window_seconds": args.steady_seconds,
        "steady_reconciles": steady_reconciles,
        "writes_initial_by_resource": initial_write_counts,
        "writes_steady_state": steady_writes,
        "writes_steady_by_resource": steady_write_counts,
        "api_calls_steady_state": steady_calls,
        "rss_mb": round(rss, 1),
        "rss_peak_mb": round(hwm, 1),
        "rss_before_operator_mb": round(rss_before, 1),
        "resync_seconds": args.resync,
        "cpu_s_operator_process_to_ready": round(cpu_ready, 1),
        "cpu_s_emulator_to_ready": round(emu_cpu_ready, 1),
        "loadavg_1m_before": round(load_before, 2),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
