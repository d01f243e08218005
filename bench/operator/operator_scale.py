"""Operator at scale: N SpecDecodeDeployments created at once, on the API emulator or a real kube-apiserver.

Measures time until every object has its workload child and a status for generation 1, reconciles, writes and
operator CPU per CR until then, per-reconcile latency, operator API calls per reconcile, writes in steady state
(goal: zero) and the RSS of the operator's process. The steady window starts after a settle derived from the
operator's resync period (one full period after "all ready", so every object's resync pass that the wave's tail
still owed has run) and lasts longer than one period (so a whole sweep falls into it). Three processes: the API server, the operator (kopf + our handlers in a ``spawn``ed process
that only answers counter requests over a pipe) and this one (creates the objects, polls).

    python bench/operator/operator_scale.py --count 500 --json                 # the API emulator (testbed.serve)
    python bench/operator/operator_scale.py --count 500 --envtest --json       # a fresh kube-apiserver + etcd (envtest/)
    python bench/operator/operator_scale.py --count 500 --kubeconfig K --json  # any API server (admin credentials)

On a real API server the committed CRD is applied (server-side) and the objects go to a fresh namespace that the
operator watches. With ``--envtest`` the bench also knows the API server's and etcd's processes (their CPU) and
reads the API server's audit log, which counts every request of the operator's identity, kopf's own included.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import kubernetes
import kubernetes.watch
import yaml

from specdecode_operator.kube_client import resource_path


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


ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "specdecode.io_specdecodedeployments.yaml"
OPERATOR_USER = "specdecode-operator-bench"


def operator_process(
    url: str | None, resync: float, conn, namespace: str | None = None, api_workers: int | None = None
) -> None:
    """The operator alone in a process (as deployed: kopf, our handlers, the API client), answering the
    bench's requests for its counters over a pipe; nothing of the bench's client or polling runs here.
    ``url``: the emulator; else the API server of $KUBECONFIG (kopf and the client read it), watching
    ``namespace``."""
    from specdecode_operator.config import OperatorConfig
    from specdecode_operator.operator_process import freeze_gc
    from specdecode_operator.testbed.runner import OperatorThread

    config = OperatorConfig(
        server=url,
        standalone=True,
        metrics_port=0,
        liveness_endpoint=None,
        resync_seconds=resync,
        request_timeout=10,
        namespaces=(namespace,) if namespace else (),
        **({"api_workers": api_workers} if api_workers else {}),
    )
    with OperatorThread(config) as op:
        context = op.context
        freeze_gc()  # as the deployed process does once kopf is ready
        conn.send("ready")
        while (cmd := conn.recv()) != "stop":
            if cmd == "census":
                conn.send(census(context))
                continue
            client, rec = context.client, context.reconciler
            controller = context.controller
            conn.send(
                {
                    "writes": client.writes,
                    "calls": client.calls,
                    "write_counts": dict(client.write_counts),
                    "reconciles": len(rec.durations),
                    "queue_adds": controller.queue.adds,
                    "tuner_ticks": controller.tuner.ticks if controller.tuner else 0,
                    "durations": list(rec.durations) if cmd == "durations" else None,
                }
            )


def census(context, top: int = 12) -> dict:
    """Where the operator's memory is, at "all ready": KB per object held by the controller's bodies, validations,
    other per-object state, the child indexes and the tuner (deep sizes); pymalloc's live and free bytes; pending
    tasks; and the live objects by type (count, shallow MB; objects frozen at start-up are not counted)."""
    import asyncio
    import gc
    import tempfile

    def deep(obj, seen) -> int:
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        size = sys.getsizeof(obj)
        if isinstance(obj, dict):
            size += sum(deep(k, seen) + deep(v, seen) for k, v in obj.items())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            size += sum(deep(v, seen) for v in obj)
        elif hasattr(obj, "__dict__"):
            size += deep(vars(obj), seen)
        return size

    ctl = context.controller
    n = max(1, len(ctl.objects))
    seen: set = set()
    kb = {
        "body": sum(deep(e.body, seen) for e in ctl.objects.values()),
        "validation": sum(deep(e.state.validation, seen) for e in ctl.objects.values()),
        "state_rest": sum(deep(e.state, seen) for e in ctl.objects.values()),
        "indexes": sum(deep(i, seen) for i in ctl.indexes.values()),
        "tuner": deep(ctl.tuner, seen),
    }
    del seen
    counts: collections.Counter = collections.Counter()
    sizes: collections.Counter = collections.Counter()
    tasks = 0
    for obj in gc.get_objects():
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
        tasks += isinstance(obj, asyncio.Task) and not obj.done()
    with tempfile.TemporaryFile(mode="w+") as tmp:  # sys._debugmallocstats writes to the C stderr
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        pymalloc = [
            " ".join(line.split())
            for line in tmp.read().splitlines()
            if line.startswith(("# bytes in allocated blocks", "# bytes in available blocks"))
        ]
    return {
        "kb_per_object": {k: round(v / n / 1024, 1) for k, v in kb.items()},
        "pymalloc": pymalloc,
        "tasks_pending": tasks,
        "by_type": [(k, counts[k], round(v / 2**20, 1)) for k, v in sizes.most_common(top)],
    }


def body(i: int, namespace: str = "default") -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": f"sdd-{i:04d}", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "target": {"model": "/models/Llama-3.1-70B-Instruct", "tensorParallelSize": 8},
            "draft": {"model": "/models/EAGLE3-LLaMA3.1-Instruct-70B", "tensorParallelSize": 1 + (i % 2)},
        },
    }


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


class Emulator:
    """The API emulator in its own process (history off, as a real API server keeps none)."""

    name = "emulator"

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specdecode_operator.testbed.serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()
        self.namespace = "default"
        self.operator_kubeconfig = None
        self.pids = {"emulator": self.proc.pid}
        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        cfg.connection_pool_maxsize = 16
        self.api = kubernetes.client.ApiClient(cfg)

    def close(self) -> None:
        self.proc.kill()  # its shutdown of hundreds of open watches is not part of the measurement
        self.proc.wait(10)


class RealApiServer:
    """A real kube-apiserver: from a kubeconfig (admin), or a fresh envtest Environment this bench starts and
    stops (then the operator gets an identity of its own, so the audit log separates its requests)."""

    name = "kube-apiserver"

    def __init__(self, kubeconfig: str | None, envtest: bool):
        self.url = None
        self.env = None
        self.pids: dict[str, int] = {}
        if envtest:
            sys.path.insert(0, str(ROOT))
            from tests.k8s.envtest import Environment

            # room for a ClusterIP Service per object (the test bed's default range is a /24)
            self.env = Environment(extra_apiserver_args=["--service-cluster-ip-range=10.96.0.0/16"]).start()
            self.pids = self.env.pids
            kubeconfig = str(self.env.kubeconfig)
            self.operator_kubeconfig = str(self.env.kubeconfig_for(OPERATOR_USER, ["system:masters"]))
        else:
            self.operator_kubeconfig = kubeconfig
        self.api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        self.api.configuration.connection_pool_maxsize = 16
        self.namespace = f"scale-{uuid.uuid4().hex[:6]}"
        crd = yaml.safe_load(CRD_FILE.read_text())
        self.call(
            "PATCH",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}",
            crd,
            [("fieldManager", "operator-scale-bench"), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        deadline = time.monotonic() + 60
        while not any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (
                self.call(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
                ).get("status")
                or {}
            ).get("conditions")
            or []
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the CRD did not become Established")
            time.sleep(0.1)
        self.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
        )

    def call(self, method, path, body=None, query=None, content_type=None):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        m, u, h, b, _ = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        r = self.api.call_api(m, u, h, b, _request_timeout=60)
        r.read()
        if not 200 <= r.status < 300:
            raise SystemExit(f"{method} {path}: {r.status} {r.data[:500]!r}")
        return json.loads(r.data)

    def requests_by_operator(self, since: int = 0) -> tuple[int, dict]:
        """(requests, {verb resource: n}) of the operator's identity in the audit log after offset ``since``."""
        counts: collections.Counter = collections.Counter()
        if self.env is None:
            return 0, {}
        for e in self.env.audit_events(since, user=OPERATOR_USER):
            ref = e.get("objectRef") or {}
            counts[
                f"{e.get('verb')} {ref.get('resource', e.get('requestURI', '?'))}"
                + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            ] += 1
        return sum(counts.values()), dict(counts.most_common())

    def audit_offset(self) -> int:
        return self.env.audit_offset() if self.env else 0

    def close(self) -> None:
        self.api.close()
        if self.env is not None:
            self.env.stop()


def ready(sdd: dict) -> bool:
    status = sdd.get("status") or {}
    return status.get("observedGeneration") == 1 and bool(status.get("conditions"))


def poll_until_ready(call, ns: str, count: int, started: float, timeout: float) -> None:
    """The emulator: poll every 0.5 s (at N=500 one LIST of the objects is ~2 MB of JSON); Deployments are listed
    only once every object has its status (written after the children)."""
    deps: list = []
    while True:
        sdds = call("GET", resource_path("specdecode.io/v1alpha1", "specdecodedeployments", ns))["items"]
        with_status = sum(1 for s in sdds if ready(s))
        if with_status == count:
            deps = call("GET", resource_path("apps/v1", "deployments", ns))["items"]
            if len(deps) == count:
                return
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timeout: {with_status}/{count} with status, {len(deps)} deployments")
        time.sleep(0.5)


class Tracker:
    """A real API server: one watch on the objects and one on their Deployments, started before the objects are
    created, so the bench adds two streams to the API server's load instead of a multi-MB LIST per poll."""

    def __init__(self, api: kubernetes.client.ApiClient, ns: str, count: int):
        import threading

        self.count, self.ready, self.deployments = count, set(), set()
        self.lock, self.complete = threading.Lock(), threading.Event()
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.watches = []
        for group, version, plural, on in (
            ("specdecode.io", "v1alpha1", "specdecodedeployments", self._sdd),
            ("apps", "v1", "deployments", self._deployment),
        ):
            rv = self.custom.list_namespaced_custom_object(group, version, ns, plural)["metadata"]["resourceVersion"]
            w = kubernetes.watch.Watch()
            self.watches.append(w)
            threading.Thread(target=self._follow, args=(w, group, version, ns, plural, rv, on), daemon=True).start()

    def _follow(self, w, group, version, ns, plural, rv, on) -> None:
        try:
            for event in w.stream(
                self.custom.list_namespaced_custom_object,
                group,
                version,
                ns,
                plural,
                resource_version=rv,
                timeout_seconds=3600,
            ):
                with self.lock:
                    on(event["object"])
                    if len(self.ready) == self.count and len(self.deployments) == self.count:
                        self.complete.set()
        except Exception:  # the stream closed by stop() once complete; else wait() reports the timeout
            if not self.complete.is_set():
                raise

    def _sdd(self, obj: dict) -> None:
        if ready(obj):
            self.ready.add(obj["metadata"]["name"])

    def _deployment(self, obj: dict) -> None:
        self.deployments.add(obj["metadata"]["name"])

    def wait(self, started: float, timeout: float) -> None:
        if not self.complete.wait(max(0.0, timeout - (time.monotonic() - started))):
            raise SystemExit(
                f"timeout: {len(self.ready)}/{self.count} with status, {len(self.deployments)} deployments"
            )
        for w in self.watches:
            w.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--resync", type=float, default=30.0, help="operator resync period (s; the operator's default)")
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=None,
        help="window for steady-state writes (default: 1.2 resync periods, so a whole sweep)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds after 'all ready' before the steady-state window starts (default: one resync "
        "period + 5 s, so the resync passes the wave's tail still owed have run)",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--api-workers",
        type=int,
        default=None,
        help="the operator's concurrent API requests (default: the operator's own default)",
    )
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--kubeconfig", help="a real API server (admin credentials) instead of the emulator")
    server.add_argument(
        "--envtest", action="store_true", help="start a fresh kube-apiserver + etcd (tests/k8s/envtest.py) for this run"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--census",
        action="store_true",
        help="also report where the operator's memory is at ready (after the RSS is read)",
    )
    args = parser.parse_args()
    if args.settle is None:
        args.settle = args.resync + 5.0
    if args.steady_seconds is None:
        args.steady_seconds = 1.2 * args.resync

    backend = RealApiServer(args.kubeconfig, args.envtest) if args.kubeconfig or args.envtest else Emulator()
    ns = backend.namespace

    def call(method, path, body=None, query=None):
        m, u, h, b, _ = backend.api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params={"Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        r = backend.api.call_api(m, u, h, b, _request_timeout=60)
        r.read()
        return json.loads(r.data)

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(
        target=operator_process,
        args=(backend.url, args.resync, child, None if backend.url else ns, args.api_workers),
        daemon=True,
    )
    load_before = os.getloadavg()
    audit: dict = {}
    if backend.operator_kubeconfig:  # read when the kubernetes package is imported, so set before the spawn
        os.environ["KUBECONFIG"] = backend.operator_kubeconfig
    try:
        proc.start()
        if not parent.poll(60) or parent.recv() != "ready":
            raise SystemExit("the operator did not start")
        rss_before = rss_mb(proc.pid)[0]
        cpu_before = cpu_seconds(proc.pid)
        server_cpu_before = {k: cpu_seconds(pid) for k, pid in backend.pids.items()}
        audit_start = backend.audit_offset() if isinstance(backend, RealApiServer) else 0

        def stats(cmd: str = "stats") -> dict:
            parent.send(cmd)
            return parent.recv()

        if isinstance(backend, RealApiServer):
            tracker = Tracker(backend.api, ns, args.count)
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: call(
                        "POST", resource_path("specdecode.io/v1alpha1", "specdecodedeployments", ns), body(i, ns)
                    ),
                    range(args.count),
                )
            )
        created = time.monotonic() - started
        if isinstance(backend, RealApiServer):
            tracker.wait(started, args.timeout)
        else:
            poll_until_ready(call, ns, args.count, started, args.timeout)
        ready_s = time.monotonic() - started
        cpu_ready = cpu_seconds(proc.pid) - cpu_before
        server_cpu_ready = {k: round(cpu_seconds(pid) - server_cpu_before[k], 1) for k, pid in backend.pids.items()}
        rss_ready = rss_mb(proc.pid)[0]
        memory = stats("census") if args.census else None
        at_ready = stats("durations")
        durations_ms = [d * 1000 for d in at_ready["durations"]]
        if isinstance(backend, RealApiServer):
            audit["requests_to_ready"], audit["requests_to_ready_by_verb"] = backend.requests_by_operator(audit_start)
        # Writes after "ready" are the wave's tail (e.g. the tuner's first interval); steady state is measured
        # once that has settled: a window of --steady-seconds (longer than the resync period) after --settle.
        time.sleep(args.settle)
        mark = stats()
        audit_mark = backend.audit_offset() if isinstance(backend, RealApiServer) else 0
        time.sleep(args.steady_seconds)
        end = stats()
        if isinstance(backend, RealApiServer):
            audit["requests_steady"], audit["requests_steady_by_verb"] = backend.requests_by_operator(audit_mark)
        rss, hwm = rss_mb(proc.pid)
        load_after = os.getloadavg()
        parent.send("stop")
        proc.join(20)
    finally:
        if proc.is_alive():
            proc.kill()
        backend.close()

    def delta(a: dict, b: dict) -> dict:
        return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0)}

    result = {
        "api_server": backend.name + (" (envtest)" if args.envtest else ""),
        "count": args.count,
        "seconds_to_create": round(created, 2),
        "seconds_to_all_ready": round(ready_s, 2),
        "reconciles_initial": at_ready["reconciles"],
        "reconcile_p50_ms": round(percentile(durations_ms, 0.5), 2),
        "reconcile_p99_ms": round(percentile(durations_ms, 0.99), 2),
        "reconcile_mean_ms": round(statistics.fmean(durations_ms), 2) if durations_ms else 0,
        "reconciles_per_cr_initial": round(at_ready["reconciles"] / args.count, 2),
        "queue_adds_per_cr_initial": round(at_ready["queue_adds"] / args.count, 2),
        "operator_cpu_ms_per_cr": round(cpu_ready * 1000 / args.count, 1),
        "reconciles_per_second_initial": round(at_ready["reconciles"] / ready_s, 1),
        "api_calls_per_reconcile_initial": round(at_ready["calls"] / max(1, at_ready["reconciles"]), 2),
        "api_calls_per_cr_initial": round(at_ready["calls"] / args.count, 2),
        "writes_per_cr_initial": round(at_ready["writes"] / args.count, 2),
        "writes_initial_by_resource": at_ready["write_counts"],
        "writes_after_ready_before_steady": mark["writes"] - at_ready["writes"],
        "reconciles_after_ready_before_steady": mark["reconciles"] - at_ready["reconciles"],
        "writes_after_ready_by_resource": delta(at_ready["write_counts"], mark["write_counts"]),
        "settle_seconds": args.settle,
        "settle_rule": "resync + 5 s; window 1.2 x resync"
        if (args.settle, args.steady_seconds) == (args.resync + 5.0, 1.2 * args.resync)
        else "given",
        "steady_window_seconds": args.steady_seconds,
        "steady_reconciles": end["reconciles"] - mark["reconciles"],
        "tuner_ticks": end["tuner_ticks"],
        "writes_steady_state": end["writes"] - mark["writes"],
        "writes_steady_by_resource": delta(mark["write_counts"], end["write_counts"]),
        "api_calls_steady_state": end["calls"] - mark["calls"],
        "rss_mb_operator_process_at_ready": round(rss_ready, 1),
        "rss_mb_operator_process": round(rss, 1),
        "rss_peak_mb_operator_process": round(hwm, 1),
        "rss_mb_operator_process_idle_before": round(rss_before, 1),
        "cpu_s_operator_process_to_ready": round(cpu_ready, 1),
        "cpu_s_api_server_to_ready": server_cpu_ready,
        "resync_seconds": args.resync,
        "loadavg_1m_before": round(load_before[0], 2),
        "loadavg_1m_after": round(load_after[0], 2),
        "loadavg_5m_before": round(load_before[1], 2),
        "loadavg_5m_after": round(load_after[1], 2),
        "nice": os.nice(0),
        "cpus": os.cpu_count(),
    }
    if memory is not None:
        result["memory_census_at_ready"] = memory
    if audit:  # every request of the operator's identity, kopf's watches and finalizer patches included
        result["audit_requests_per_cr_initial"] = round(audit["requests_to_ready"] / args.count, 2)
        result.update({f"audit_{k}": v for k, v in audit.items()})
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
