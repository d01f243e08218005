"""The chaos suite's harness: the API emulator in this process, operator replicas as real processes started with
the chart's rendered arguments and environment (so SIGKILL, RSS and exit codes are those of the product), and the
measurements each scenario reports (converged time, lost / duplicated children, crashes, peak RSS).

Every wait is bounded; a scenario that does not converge fails with what it was waiting for.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import kubernetes
import yaml

from specdecode_operator.testbed.runner import EmulatorServer, standard_emulator
from tests.k8s.cluster import Cluster, minimal_sdd, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "specdecode.io_specdecodedeployments.yaml"
RESULTS = ROOT / "bench" / "results" / "chaos.jsonl"  # one line per scenario run; chaos.md is written from it
CHILDREN = [
    ("apps/v1", "deployments"),
    ("v1", "configmaps"),
    ("v1", "services"),
    ("policy/v1", "poddisruptionbudgets"),
    ("networking.k8s.io/v1", "networkpolicies"),
    ("v1", "secrets"),
]
EXPECTED = {
    "deployments": 1,
    "configmaps": 1,
    "services": 2,
    "poddisruptionbudgets": 1,
    "networkpolicies": 1,
    "secrets": 1,
}  # what minimal_sdd(tp=8) renders: client + headless Service
LEASE_NAMESPACE = "specdecode-system"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chart_operator_command(values: dict | None = None) -> tuple[list[str], dict[str, str], int]:
    """(args, SPECDECODE_* env, replicas) of the operator Deployment as the chart renders it with ``values``, in
    Secret step-control mode unless ``values`` say otherwise: the emulator serves no ServiceAccount issuer (the
    chart's default mode reads it before rendering), and what these scenarios fault is the API, not the credentials
    (tests/e2e/test_control_sa_auth.py and test_default_install_live_control.py run the default mode on the real
    API server)."""
    from tests.chart.chartlib import one, render

    values = {"controlAuth": {"mode": "Secret"}, **(values or {})}
    dep = one(render(values), "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return list(container["args"]), env, dep["spec"]["replicas"]


class Bed:
    """The emulator behind a real port, a kubeconfig for it, and a ``Cluster`` client in namespace ``default``."""

    def __init__(self, tmp_path: pathlib.Path):
        self.server = EmulatorServer(standard_emulator(yaml.safe_load(CRD_FILE.read_text()))).__enter__()
        self.emulator = self.server.emulator
        self.url = self.server.url
        self.kubeconfig = tmp_path / "kubeconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "bed",
                    "clusters": [{"name": "bed", "cluster": {"server": self.url}}],
                    "users": [{"name": "bed", "user": {"token": "chaos"}}],
                    "contexts": [{"name": "bed", "context": {"cluster": "bed", "user": "bed"}}],
                }
            )
        )
        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        self.cluster = Cluster(cfg, "default", emulator=self.emulator)
        self.tmp = tmp_path

    def close(self) -> None:
        self.cluster.close()
        self.server.__exit__(None, None, None)

    # ------------------------------------------------------------------ faults (on the emulator's loop)
    def inject(self, **fault) -> Any:
        return self.server.call(lambda: self.emulator.inject(**fault))

    def clear_faults(self) -> None:
        self.server.call(lambda: self.emulator.faults.clear())

    # ------------------------------------------------------------------ observations
    def children(self, name: str) -> dict[str, int]:
        """How many objects of each child kind carry this SDD's instance label (1 each when converged)."""
        out = {}
        for api_version, plural in CHILDREN:
            items = self.cluster.list(api_version, plural, selector=f"app.kubernetes.io/instance={name}")
            out[plural] = len(items)
        return out

    def converged(self, names: list[str]) -> bool:
        """Every SDD has each child (``EXPECTED``) exactly once and a status for its current generation."""
        for name in names:
            sdd = self.cluster.get_sdd(name)
            if sdd is None:
                self.waiting_on = f"{name}: no such SDD"
                return False
            status = sdd.get("status") or {}
            if status.get("observedGeneration") != sdd["metadata"]["generation"]:
                self.waiting_on = f"{name}: status for generation {status.get('observedGeneration')}"
                return False
            children = self.children(name)
            if children != EXPECTED:
                self.waiting_on = f"{name}: children {children}"
                return False
        return True

    def lost_and_duplicated(self, names: list[str]) -> tuple[int, int]:
        lost = dup = 0
        for name in names:
            for plural, n in self.children(name).items():
                lost += max(0, EXPECTED[plural] - n)
                dup += max(0, n - EXPECTED[plural])
        return lost, dup

    def lease_holder(self, name: str) -> str | None:
        try:
            lease = self.cluster.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}")
        except Exception:
            return None
        return (lease.get("spec") or {}).get("holderIdentity")


class Replica:
    """One operator process started like the chart's container (``specdecode operator run <chart args>`` with the
    chart's SPECDECODE_* environment), against the bed's kubeconfig, on free local ports."""

    def __init__(
        self,
        bed: Bed,
        identity: str,
        args: list[str],
        env: dict[str, str],
        extra_args: tuple[str, ...] = (),
        extra_env: dict[str, str] | None = None,
    ):
        self.identity = identity
        self.metrics_port, self.health_port = free_port(), free_port()
        args = [a for a in args if not a.startswith(("--liveness-port", "--identity"))]
        argv = [
            sys.executable,
            "-m",
            "specdecode_operator.cli",
            "operator",
            "run",
            *args,
            f"--liveness-port={self.health_port}",
            f"--identity={identity}",
            *extra_args,
        ]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SPECDECODE_")}
        environ.update(env)
        # the bed reads the reconcile counts over plain HTTP (the emulator reviews no tokens; the secure endpoint
        # is tested on the real API server, tests/e2e/test_metrics_auth.py)
        environ.update({"SPECDECODE_METRICS_SECURE": "false"})
        environ.update(
            {
                "SPECDECODE_METRICS_PORT": str(self.metrics_port),
                "KUBECONFIG": str(bed.kubeconfig),
                "POD_NAME": identity,
                "PYTHONUNBUFFERED": "1",
            }
        )
        environ.update(extra_env or {})
        self.log_path = bed.tmp / f"{identity}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, env=environ, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.peak_rss_kb = 0
        self.killed = False
        self._sampling = True
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while self._sampling and self.proc.poll() is None:
            try:
                for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_rss_kb = max(self.peak_rss_kb, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.1)

    def health(self) -> dict | None:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
                return json.loads(r.read())
        except Exception:
            return None

    def metric(self, name: str) -> float:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except Exception:
            return 0.0
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and not line.startswith("#")
        )

    def wait_serving(self, timeout: float = 30.0) -> None:
        wait_for(
            lambda: self.health() is not None or self.exited(),
            timeout=timeout,
            interval=0.1,
            what=f"{self.identity} serves /healthz",
        )
        assert not self.exited(), self.tail()

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def kill(self) -> None:
        self.killed = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def close(self) -> None:
        self.terminate()
        self._sampling = False
        self._log.close()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def crashed(self) -> bool:
        """An exception from our code in the log (kopf logs the API errors it retries with a traceback of its own
        frames: that is handling, not a crash), or an exit other than SIGKILL by the scenario, a clean stop, or
        status 1 after losing the Lease."""
        text = self.log_path.read_text(errors="replace")
        ours = any(
            "specdecode_operator/" in block or "specdecode_runtime/" in block
            for block in text.split("Traceback (most recent call last)")[1:]
        )
        code = self.proc.poll()
        lost = "lost the Lease" in text
        return ours or (code is not None and not self.killed and code not in (0, -15) and not (code == 1 and lost))


class Pool:
    """Operator replicas kept at ``count`` the way a Deployment and its kubelet keep them: a replica that exits
    (SIGKILL by a scenario, or status 1 after losing the Lease) is replaced by a new process at once."""

    def __init__(self, bed: Bed, count: int, values: dict | None = None, prefix: str = "op", **kw):
        self.bed, self.count, self.prefix, self.kw = bed, count, prefix, kw
        self.args, self.env, _ = chart_operator_command(values)
        self.live: list[Replica] = []
        self.all: list[Replica] = []
        self.restarts = 0
        for _ in range(count):
            self._start()

    def _start(self) -> Replica:
        r = Replica(self.bed, f"{self.prefix}-{len(self.all)}", self.args, self.env, **self.kw)
        self.live.append(r)
        self.all.append(r)
        return r

    def tick(self) -> None:
        for r in list(self.live):
            if r.exited():
                self.live.remove(r)
                self.restarts += 1
                self._start()

    def by_identity(self, identity: str | None) -> Replica | None:
        return next((r for r in self.live if r.identity == identity), None)

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Like wait_for, replacing exited replicas meanwhile."""

        def check():
            self.tick()
            return predicate()

        try:
            return wait_for(check, timeout=timeout, interval=0.5, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}; waiting on {getattr(self.bed, 'waiting_on', '?')}") from None

    def wait_time(self, predicate: Callable[[], Any], timeout: float, what: str) -> float:
        started = time.monotonic()
        self.wait(predicate, timeout, what)
        return time.monotonic() - started

    def peak_rss_mb(self) -> float:
        return round(max(r.peak_rss_kb for r in self.all) / 1024, 1)

    def crashed(self) -> int:
        return sum(r.crashed() for r in self.all)

    def crash_reasons(self) -> list[str]:
        return [f"{r.identity}: exit {r.proc.poll()}, killed {r.killed}" for r in self.all if r.crashed()]

    def crash_report(self) -> str:
        """What an assertion on ``crashed()`` prints: each crashed replica's exit and the end of its log."""
        return "\n\n".join(
            f"{r.identity}: exit {r.proc.poll()}, killed {r.killed}\n{r.tail(60)}" for r in self.all if r.crashed()
        )

    def close(self) -> None:
        for r in self.all:
            r.close()


def sdds(bed: Bed, count: int, prefix: str = "c", tp: int = 8) -> list[str]:
    names = [f"{prefix}{i}" for i in range(count)]
    for name in names:
        bed.cluster.create_sdd(minimal_sdd(name, tp=tp))
    return names


def time_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25, bed: Bed | None = None
) -> float:
    started = time.monotonic()
    try:
        wait_for(predicate, timeout=timeout, interval=interval, what=what)
    except AssertionError as e:
        raise AssertionError(f"{e}; waiting on {getattr(bed, 'waiting_on', '?')}") from None
    return time.monotonic() - started


@dataclass
class Outcome:
    scenario: str
    fault: str
    converged_s: float | None
    lost: int
    duplicated: int
    crashed: int
    peak_rss_mb: float
    backend: str = "emulator"
    notes: dict = field(default_factory=dict)

    def record(self) -> None:
        """Append to bench/results/chaos.jsonl (tests/chaos/report.py turns it into chaos.md)."""
        if os.environ.get("SPECDECODE_CHAOS_RECORD"):
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            with RESULTS.open("a") as f:
                f.write(
                    json.dumps({**self.__dict__, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n"
                )


class Proxy:
    """A TCP proxy between operator replicas and the emulator, to break the network the way networks break:
    ``drop()`` resets every open connection (dropped watches), ``freeze()`` stops forwarding on open connections
    while new ones pass (half-open, stalled watches), ``partition()`` freezes everything, new connections included,
    and ``heal()`` forwards again."""

    def __init__(self, target_port: int):
        import asyncio

        self.target_port = target_port
        self.port = free_port()
        self.mode = "pass"
        self._conns: set = set()
        self._frozen: set = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)

        async def pipe(reader, writer, conn):
            try:
                while True:
                    data = await reader.read(65536)
                    if not data:
                        break
                    if conn in self._frozen:  # the bytes vanish: the peer sees a silent connection, while the
                        continue  # sender's writes never block (a real kernel buffers them)
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        async def handle(client_r, client_w):
            conn = object()
            if self.mode == "partition":
                self._frozen.add(conn)
            try:
                server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                client_w.close()
                return
            tasks = [
                asyncio.ensure_future(pipe(client_r, server_w, conn)),
                asyncio.ensure_future(pipe(server_r, client_w, conn)),
            ]
            self._conns.add((conn, client_w, server_w, tuple(tasks)))
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                t.cancel()
            client_w.close()
            server_w.close()
            self._conns = {c for c in self._conns if c[0] is not conn}
            self._frozen.discard(conn)

        async def main():
            self._server = await asyncio.start_server(handle, "127.0.0.1", self.port)
            self._ready.set()
            await self._server.serve_forever()

        try:
            self._loop.run_until_complete(main())
        except Exception:
            pass

    def _call(self, fn) -> None:
        done = threading.Event()

        def run():
            fn()
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(5)

    def drop(self) -> None:
        def run():
            for _conn, cw, sw, tasks in list(self._conns):
                for t in tasks:
                    t.cancel()
                cw.transport.abort()
                sw.transport.abort()

        self._call(run)

    def freeze(self) -> None:
        self._call(lambda: self._frozen.update(c[0] for c in self._conns))

    def partition(self) -> None:
        def run():
            self.mode = "partition"
            self._frozen.update(c[0] for c in self._conns)

        self._call(run)

    def heal(self) -> None:
        def run():
            self.mode = "pass"
            self._frozen.clear()

        self._call(run)

    def kubeconfig(self, bed: Bed, name: str) -> pathlib.Path:
        path = bed.tmp / f"kubeconfig-{name}"
        cfg = yaml.safe_load(bed.kubeconfig.read_text())
        cfg["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{self.port}"
        path.write_text(yaml.safe_dump(cfg))
        return path


class RealBed(Bed):
    """The same observations on the real kube-apiserver (tests/k8s/envtest.py), in one namespace of its own; the
    operator replicas use the ServiceAccount kubeconfig that holds only the chart's RBAC."""

    def __init__(self, tmp_path: pathlib.Path, env, namespace: str, operator_kubeconfig: pathlib.Path):
        self.server = self.emulator = None
        self.env = env
        self.kubeconfig = operator_kubeconfig
        self.cluster = Cluster(env.configuration(), namespace)
        self.tmp = tmp_path

    def close(self) -> None:
        self.cluster.close()
