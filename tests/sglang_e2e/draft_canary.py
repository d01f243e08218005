"""The operator's draft canary against one real runtime pod: what tests/sglang_e2e/test_draft_canary_cpu.py asserts
and bench/operator/draft_canary_cpu.py records.

The pieces, each the real one where it can run on a CPU:

* **the pod**: ``specdecode-runtime launch`` of the real, pinned SGLang on the CPU (tiny target, its agreeing EAGLE
  draft, 3 steps, Live so that steps 0 can be put for the reference), with its control port and bearer token;
* **the operator**: ``DraftRollouts`` / ``Canary`` / ``CanaryGate`` stepped the way tuning/loop.py steps them, once
  per tuner interval after the pod was scraped (``read_counters``, the loop's own scrape), with the real ``PodsApi``
  HTTP client; the interval is ``intervalSeconds`` x ``tune_interval_scale``, the operator's own test clock;
* **the API server**: a real kube-apiserver + etcd (tests/k8s/envtest.py) with the committed CRD and the chart's
  RBAC; the SpecDecodeDeployment and its control-token Secret live there, the control token is read from that
  Secret and ``status.draft`` is applied there, both with the operator's ServiceAccount token;
* **the load**: a few client threads sending greedy requests without pause; every answer is compared with the
  tokens the same pod gave for the same prompt at steps 0 (no speculation), taken once through the step endpoint.

One replica: the canary alternates the pod between the two drafts, one interval each, so a verdict after
``rollout.intervals`` counted intervals of each draft takes twice as many tuner intervals.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

POD = "canary-0"
NAMESPACE = "draft-canary"
TOKEN = "t0ken"  # the pod's control token (write_runtime's), also the control-token Secret's
STEPS = 3
INTERVAL_SECONDS = 5  # spec.speculative.autotune.intervalSeconds (the CRD's minimum)
INTERVAL_SCALE = 0.6  # OperatorConfig.tune_interval_scale: one tuner interval is 3 s of wall time
ROLLOUT_INTERVALS = 1  # spec.draft.rollout.intervals: counted intervals of each draft before the verdict
MIN_ACCEPT_RATIO = 0.9  # spec.draft.rollout.minAcceptRatio
# Slack on top of the intervals a verdict needs: the verdict's own step (a LIST, the scrape, the draft GET, the swap
# POST that puts a draft back, the status apply) and ticks late on 2 shared cores. A swap of these tiny drafts takes
# about 0.04 s on the pod (its log: "draft swapped to ... in 0.04 s") and a whole step about 0.1 s; 3 s is 30 steps.
SLACK_S = 3.0
NOISE_SCALE = 3.0  # noisy_copy: Gaussian noise of 3x each tensor's RMS; the draft stops agreeing with the target
CLIENTS = 3
PROMPT_COUNT = 6
MAX_NEW_TOKENS = 24
REQUEST_TIMEOUT_S = 60.0


def interval_s() -> float:
    """Wall seconds of one tuner interval (tuning/loop.py: intervalSeconds x tune_interval_scale)."""
    return INTERVAL_SECONDS * INTERVAL_SCALE


def verdict_intervals() -> int:
    """Tuner intervals a verdict takes with one replica: ``rollout.intervals`` of each draft."""
    return 2 * ROLLOUT_INTERVALS


def verdict_limit_s() -> float:
    """The wall-time bound from the canary's start to its verdict: the intervals it needs plus the slack."""
    return verdict_intervals() * interval_s() + SLACK_S


def prompts() -> list[list[int]]:
    rng = random.Random(7)
    return [[1, *(rng.randrange(3, 256) for _ in range(rng.randrange(8, 13)))] for _ in range(PROMPT_COUNT)]


# ---------------------------------------------------------------------------------------------------- the pod
@dataclasses.dataclass
class Pod:
    base: str  # http://127.0.0.1:PORT (/generate, /metrics)
    control: str  # http://127.0.0.1:CONTROL (steps and draft endpoints)
    target: str  # the target model's path
    agree: str  # the draft the pod started with
    noisy: str  # its noisy copy

    def _call(self, url: str, method: str = "GET", body: dict | None = None, token: str | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:  # noqa: S310 - loopback
                return r.status, json.loads(r.read(1 << 20))
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read(1 << 20) or b"{}")

    def generate(self, ids: list[int]) -> list[int]:
        params = {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True}
        status, out = self._call(self.base + "/generate", "POST", {"input_ids": ids, "sampling_params": params})
        if status != 200:
            raise RuntimeError(f"/generate answered {status}: {out}")
        return out["output_ids"]

    def served(self) -> str | None:
        from specdecode_runtime.contract.draft_swap import DRAFT_PATH

        status, out = self._call(self.control + DRAFT_PATH, token=TOKEN)
        return (out.get("draft") or {}).get("source") if status == 200 else None

    def load_draft(self, source: str) -> None:
        """Put ``source`` on the pod directly (a scenario's starting state), unless it serves it already."""
        from specdecode_runtime.contract.draft_swap import DRAFT_PATH

        if self.served() != source:
            status, out = self._call(self.control + DRAFT_PATH, "POST", {"source": source}, token=TOKEN)
            if status != 200:
                raise RuntimeError(f"POST {source}: {status} {out}")

    def put_steps(self, steps: int) -> None:
        from specdecode_runtime.contract.step_table import STEPS_PATH

        body = {"table": [{"minBatch": 1, "steps": steps}]}
        status, out = self._call(self.control + STEPS_PATH, "PUT", body, token=TOKEN)
        if status != 200:
            raise RuntimeError(f"PUT steps {steps}: {status} {out}")

    def reference(self, ids: list[list[int]]) -> list[list[int]]:
        """Greedy tokens of each prompt without speculation: the pod at steps 0 (its step endpoint), one request at
        a time, then back at ``STEPS``."""
        self.put_steps(0)
        try:
            return [self.generate(p) for p in ids]
        finally:
            self.put_steps(STEPS)


def runtime_speculative() -> str:
    """runtime.yaml's speculative mapping: Live with tiers 0 and 3 (steps 0 is the reference's)."""
    return (
        f"{{numSteps: {STEPS}, eagleTopK: 1, candidateSteps: [0, {STEPS}], "
        f"autotune: {{mode: Live, minSteps: 1, maxSteps: {STEPS}}}}}"
    )


RUNTIME_EXTRA = "costProbe: {enabled: false}\n"  # no start-up cost probe: nothing here reads it


# ---------------------------------------------------------------------------------------------------- the load
@dataclasses.dataclass
class Request:
    prompt: int
    start: float
    end: float
    tokens: list[int] | None
    error: str | None = None


class Load:
    """``CLIENTS`` threads sending greedy requests back to back until ``stop``."""

    def __init__(self, pod: Pod, ids: list[list[int]]):
        self.pod, self.ids = pod, ids
        self.done: list[Request] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(CLIENTS)]

    def _client(self, i: int) -> None:
        n = 0
        while not self._stop.is_set():
            p = (i + n * CLIENTS) % len(self.ids)
            n += 1
            t0 = time.monotonic()
            try:
                r = Request(p, t0, 0.0, self.pod.generate(self.ids[p]))
            except Exception as e:  # noqa: BLE001 - every failure is counted, none ends the client
                r = Request(p, t0, 0.0, None, f"{type(e).__name__}: {e}")
            r.end = time.monotonic()
            with self._lock:
                self.done.append(r)

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=REQUEST_TIMEOUT_S + 5)

    def summary(self, reference: list[list[int]], windows: list[tuple[float, float]]) -> dict:
        """Failed requests (errors, and answers whose tokens differ from the reference), and how many requests ran
        (were in flight) during each window."""
        failed, mismatch = [], []
        for r in self.done:
            if r.error is not None:
                failed.append(f"prompt {r.prompt}: {r.error}")
            elif r.tokens != reference[r.prompt]:
                i = next((j for j, (a, b) in enumerate(zip(r.tokens, reference[r.prompt])) if a != b), None)
                mismatch.append(f"prompt {r.prompt}: token {i} differs ({len(r.tokens)} tokens)")
        return {
            "requests": len(self.done),
            "failed": len(failed) + len(mismatch),
            "errors": failed[:5],
            "mismatches": mismatch[:5],
            "tokens": sum(len(r.tokens or ()) for r in self.done),
            "in_flight_per_interval": [sum(1 for r in self.done if r.start < b and r.end > a) for a, b in windows],
        }


# ---------------------------------------------------------------------------------------------------- the API server
class Cluster:
    """A real kube-apiserver with the committed CRD and the chart's RBAC for an operator watching ``namespace``
    (created here): a server of its own in ``workdir``, or ``shared``, a prepared ``ApiServerBed`` (the session's,
    tests/k8s/fixtures.py), left running by ``stop``."""

    def __init__(self, workdir: Path | None = None, *, shared: Any = None, namespace: str = NAMESPACE):
        from tests.k8s.apiserver import ApiServerBed
        from tests.k8s.envtest import Environment

        self.namespace = namespace
        self.owned = shared is None
        if shared is None:
            assert workdir is not None, "a server of its own needs a workdir"
            self.env = Environment(workdir=workdir, build=False).start()
        else:
            self.env = shared.env
        try:
            self.bed = ApiServerBed(self.env).prepare() if shared is None else shared
            status, out = self.env.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
            assert status == 201, out
            self.bed.grant(namespace)
        except BaseException:
            self.stop()
            raise
        self.mark = self.env.audit_offset()

    def stop(self) -> None:
        if self.owned:
            self.env.stop()

    def operator_configuration(self):
        """The operator's ServiceAccount token (the chart's RBAC, namespaced mode), as a kubernetes Configuration."""
        import kubernetes

        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(self.bed.operator_kubeconfig), client_configuration=cfg)
        return cfg

    def create(self, name: str, target: str, draft: str) -> dict:
        """A SpecDecodeDeployment serving ``draft`` and its control-token Secret holding the pod's token (as the
        operator would have created it; the pod mounts that Secret)."""
        from specdecode_operator.api.models import API_VERSION, PLURAL
        from specdecode_operator.control_token import control_secret
        from specdecode_operator.kube_client import resource_path

        secret = control_secret(name, self.namespace, {"data": {"token": base64.b64encode(TOKEN.encode()).decode()}})
        status, out = self.env.request("POST", f"/api/v1/namespaces/{self.namespace}/secrets", secret)
        assert status == 201, out
        status, out = self.env.request(
            "POST", resource_path(API_VERSION, PLURAL, self.namespace, None), sdd(name, target, draft, self.namespace)
        )
        assert status == 201, out
        return out

    def set_draft(self, name: str, draft: str) -> None:
        """The user's change: spec.draft.model alone."""
        from specdecode_operator.api.models import API_VERSION, PLURAL
        from specdecode_operator.kube_client import resource_path

        status, out = self.env.request(
            "PATCH",
            resource_path(API_VERSION, PLURAL, self.namespace, name),
            {"spec": {"draft": {"model": draft}}},
            content_type="application/merge-patch+json",
        )
        assert status == 200, out

    def forbidden(self) -> list[str]:
        return self.bed.forbidden(self.mark)


def sdd(name: str, target: str, draft: str, namespace: str = NAMESPACE) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "target": {"model": target, "tensorParallelSize": 1},
            "draft": {
                "model": draft,
                "algorithm": "EAGLE",
                "tensorParallelSize": 1,
                "rollout": {"intervals": ROLLOUT_INTERVALS, "minAcceptRatio": MIN_ACCEPT_RATIO},
            },
            "speculative": {
                "numSteps": STEPS,
                "eagleTopK": 1,
                "autotune": {"mode": "Live", "minSteps": 1, "maxSteps": STEPS, "intervalSeconds": INTERVAL_SECONDS},
            },
            "placement": {"gpusPerNode": 1},
        },
    }


# ---------------------------------------------------------------------------------------------------- one rollout
@dataclasses.dataclass
class Run:
    """One draft change, step by step."""

    name: str
    old: str
    new: str
    interval_s: float
    t0: float = 0.0  # monotonic time of the step that started the canary (``steps[k]`` times are relative to it)
    steps: list[dict] = dataclasses.field(default_factory=list)  # one per tuner interval from the canary's start
    events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    api_status: dict = dataclasses.field(default_factory=dict)  # status.draft as the API server holds it at the end
    forbidden: list[str] = dataclasses.field(default_factory=list)
    served_after: str | None = None
    load: dict = dataclasses.field(default_factory=dict)

    @property
    def outcome(self) -> str:
        return self.steps[-1]["phase"] if self.steps else "none"

    @property
    def verdict_interval(self) -> int | None:
        """The tuner interval (1 = the first after the canary started) whose step left the canary."""
        return next((s["k"] for s in self.steps if s["k"] > 0 and s["phase"] != "Canary"), None)

    @property
    def verdict_s(self) -> float | None:
        return next((s["end"] for s in self.steps if s["k"] > 0 and s["phase"] != "Canary"), None)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "old": self.old,
            "new": self.new,
            "interval_s": self.interval_s,
            "outcome": self.outcome,
            "verdict_interval": self.verdict_interval,
            "verdict_s": self.verdict_s,
            "steps": self.steps,
            "events": [list(e) for e in self.events],
            "api_status": self.api_status,
            "forbidden": self.forbidden,
            "served_after": self.served_after,
            "load": self.load,
        }


async def newest_body(client, namespace: str, name: str) -> dict:
    """The object as the operator's watch delivers it (its RBAC grants list and watch, no get)."""
    from specdecode_operator.api.models import API_VERSION, KIND, PLURAL
    from specdecode_operator.kube_client import resource_path

    items = (
        await client.request(
            "GET",
            resource_path(API_VERSION, PLURAL, namespace, None),
            query=[("fieldSelector", f"metadata.name={name}")],
            verb="list",
        )
    )["items"]
    return {"apiVersion": API_VERSION, "kind": KIND, **items[0]}


async def _rollout(cluster: Cluster, pod: Pod, run: Run, max_intervals: int) -> None:
    import aiohttp

    from specdecode_operator.api.validate import parse
    from specdecode_operator.config import OperatorConfig
    from specdecode_operator.control_token import token_of
    from specdecode_operator.kube_client import KubeClient
    from specdecode_operator.object_state import ObjectState
    from specdecode_operator.render import names
    from specdecode_operator.tuning import draft_rollout
    from specdecode_operator.tuning.pod_client import read_counters
    from specdecode_operator.tuning.pods import Target

    config = OperatorConfig(tune_interval_scale=INTERVAL_SCALE)
    client = KubeClient(cluster.operator_configuration(), timeout=config.request_timeout)
    target = Target(POD, "127.0.0.1", pod.base + "/metrics", pod.control)
    state = ObjectState()

    async def token() -> str | None:  # the loop's Secret mode (TablePusher.token_for)
        return token_of(await client.get("v1", "secrets", cluster.namespace, names.control_secret(run.name)))

    async def write(draft: dict) -> None:
        await draft_rollout.write(client, run.name, cluster.namespace, draft)

    async def changed() -> None:
        pass  # the reconciler would re-render: the served draft is in status.draft, checked at the end

    def event(kind: str, reason: str, message: str) -> None:
        run.events.append((kind, reason, message))

    async def tick(session: aiohttp.ClientSession, drafts: draft_rollout.DraftRollouts, k: int, t0: float) -> dict:
        """One tuner interval as tuning/loop.py runs it: the newest body, the pods' counters, the rollout's step."""
        start = time.monotonic()
        body = await newest_body(client, cluster.namespace, run.name)
        snaps, _ = await read_counters(session, config, cluster.namespace, [target], time.time(), None)
        await drafts.step(parse(body), body, [target], snaps)
        st = state.draft_status or {}
        return {
            "k": k,
            "start": round(start - t0, 3),
            "end": round(time.monotonic() - t0, 3),
            "phase": st.get("phase"),
            "message": st.get("message"),
            "served": (await drafts.api.get(pod.control)).source,
        }

    try:
        async with aiohttp.ClientSession() as session:
            drafts = draft_rollout.DraftRollouts(
                state, draft_rollout.PodsApi(session, token, config.scrape_timeout), write, event, changed
            )
            await tick(session, drafts, -1, time.monotonic())  # status.draft.serving recorded
            cluster.set_draft(run.name, run.new)
            t0 = run.t0 = time.monotonic()
            for k in range(max_intervals + 1):
                await asyncio.sleep(max(0.0, t0 + k * run.interval_s - time.monotonic()))
                s = await tick(session, drafts, k, t0)
                run.steps.append(s)
                if k > 0 and s["phase"] != "Canary":
                    break
        run.api_status = ((await newest_body(client, cluster.namespace, run.name)).get("status") or {}).get(
            "draft"
        ) or {}
    finally:
        await client.close()


def rollout(cluster: Cluster, pod: Pod, name: str, old: str, new: str, reference: list[list[int]]) -> Run:
    """``old`` served (put on the pod directly, recorded in status.draft), then spec.draft.model changed to ``new``:
    the rollout stepped once per tuner interval under load until it leaves the canary (at most twice the intervals
    a verdict needs)."""
    pod.load_draft(old)
    cluster.create(name, pod.target, old)
    run = Run(name, old, new, interval_s())
    with Load(pod, prompts()) as load:
        time.sleep(1.0)  # requests in flight before the first step
        asyncio.run(_rollout(cluster, pod, run, max_intervals=2 * verdict_intervals()))
        time.sleep(1.0)  # and after the last
    ends = [run.t0 + s["end"] for s in run.steps]
    run.load = load.summary(reference, list(zip(ends, ends[1:])))  # each interval after the canary's start
    run.served_after = pod.served()
    run.forbidden = cluster.forbidden()
    return run


# ---------------------------------------------------------------------------------------------------- the checks
RATIO = re.compile(r"ratio ([0-9.]+|inf)")


def ratio_of(run: Run) -> float | None:
    m = RATIO.search(next((s["message"] or "" for s in run.steps if s["k"] > 0 and s["phase"] != "Canary"), ""))
    return float(m.group(1)) if m else None


def common_problems(run: Run) -> list[str]:
    out = []
    if run.load["failed"]:
        out.append(f"{run.load['failed']} failed requests: {run.load['errors'] + run.load['mismatches']}")
    if not run.load["requests"] or not all(run.load["in_flight_per_interval"]):
        out.append(f"no steady load: requests in flight per interval {run.load['in_flight_per_interval']}")
    if run.forbidden:
        out.append(f"the API server refused the operator: {run.forbidden}")
    if not run.steps or run.steps[0]["phase"] != "Canary" or run.steps[0]["served"] != run.new:
        out.append(f"no canary of {run.new} started: {run.steps[:1]}")
    v = run.verdict_interval
    if v is None:
        out.append(f"no verdict within {len(run.steps) - 1} tuner intervals; last: {run.steps[-1:]}")
    elif v > verdict_intervals():
        out.append(f"verdict after {v} tuner intervals, more than the {verdict_intervals()} it needs")
    elif run.verdict_s is not None and run.verdict_s > verdict_limit_s():
        out.append(f"verdict after {run.verdict_s:.1f} s, more than {verdict_limit_s():.1f} s")
    return out


def rolled_back_problems(run: Run) -> list[str]:
    """Empty when the rollout rolled ``new`` back in time, the old draft serves on (on the pod and in status.draft
    at the API server), with no failed request and every answer equal to the reference."""
    out = common_problems(run)
    if run.outcome != "RolledBack":
        out.append(
            f"{run.new} was not rolled back: phase {run.outcome}: {run.steps[-1]['message'] if run.steps else ''}"
        )
    if run.served_after != run.old:
        out.append(f"the pod serves {run.served_after}, not the old draft {run.old}")
    if (run.api_status.get("serving") or {}).get("source") != run.old or run.api_status.get("phase") != "RolledBack":
        out.append(f"status.draft at the API server: {run.api_status}")
    if "DraftRolledBack" not in [r for _, r, _ in run.events]:
        out.append(f"no DraftRolledBack event: {run.events}")
    return out


def promoted_problems(run: Run) -> list[str]:
    """Empty when ``new`` was promoted in time and serves (pod and status.draft), with no failed request."""
    out = common_problems(run)
    if run.outcome != "Serving":
        out.append(f"{run.new} was not promoted: phase {run.outcome}: {run.steps[-1]['message'] if run.steps else ''}")
    if run.served_after != run.new:
        out.append(f"the pod serves {run.served_after}, not the new draft {run.new}")
    if (run.api_status.get("serving") or {}).get("source") != run.new or run.api_status.get("phase") != "Serving":
        out.append(f"status.draft at the API server: {run.api_status}")
    if "DraftPromoted" not in [r for _, r, _ in run.events]:
        out.append(f"no DraftPromoted event: {run.events}")
    return out


# ---------------------------------------------------------------------------------------------------- the bed
@dataclasses.dataclass
class Bed:
    pod: Pod
    cluster: Cluster
    reference: list[list[int]]
    startup_s: float


@contextlib.contextmanager
def bed(models, work: Path, shared: Any = None, namespace: str = NAMESPACE):
    """The API server, the pod (launched as tests/sglang_e2e/test_stock_launch.py launches one) and the reference
    tokens; ``models``: make_tiny_models' result. The API server is ``shared`` (a prepared ``ApiServerBed``) with the
    objects in ``namespace``, or one of its own; that raises ``EnvtestUnavailable`` without kube-apiserver
    binaries."""
    from test_stock_launch import launched, write_runtime

    from specdecode_runtime.cpu.tiny_models import noisy_copy

    t0 = time.monotonic()
    noisy = noisy_copy(models.eagle_agree, work / "draft-noisy", scale=NOISE_SCALE)
    cluster = Cluster(work / "envtest", shared=shared, namespace=namespace)
    try:
        pod_dir = work / "pod"
        pod_dir.mkdir()
        port, control = write_runtime(pod_dir, POD, models, runtime_speculative(), RUNTIME_EXTRA)
        assert (pod_dir / "token").read_text().strip() == TOKEN
        with launched(pod_dir, port, ["--skip-server-warmup"], poll_s=1.0) as base:
            pod = Pod(base, f"http://127.0.0.1:{control}", models.target, models.eagle_agree, noisy)
            assert pod.served() == models.eagle_agree
            reference = pod.reference(prompts())
            yield Bed(pod, cluster, reference, time.monotonic() - t0)
    finally:
        cluster.stop()
