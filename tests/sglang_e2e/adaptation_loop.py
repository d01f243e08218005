"""The whole loop of a draft that learns from its own traffic, against one real runtime pod: what
tests/sglang_e2e/test_adaptation_loop_cpu.py asserts. Built on tests/sglang_e2e/draft_canary.py (its pod client,
load and API server).

The pieces, each the real one where it can run on a CPU:

* **the pod**: ``specdecode-runtime launch`` of real SGLang on the CPU: the tiny target with the random EAGLE-3 head
  (it rarely agrees with the target: room to learn), 3 steps, Live with tiers 0 and 3, capture on into a local
  directory that stands for the claim;
* **the traffic**: greedy requests whose prompts come from a small sub-vocabulary (an application's structure a head
  can learn in a few hundred CPU steps), captured by the pod;
* **the operator**: ``DraftRollouts`` and ``Adaptations`` stepped once per tuner interval as tuning/loop.py steps
  them (after the loop's own scrape), with the real pod client, on a real kube-apiserver with the operator's
  ServiceAccount under the chart's RBAC; the adaptation's clock is the test's, so an attempt is due when the test
  says so;
* **the Job**: the API server runs no Job controller and no kubelet, so the test plays them: it reads the Job the
  operator applied, runs its rendered commands itself (the train container's, then the gate's; the claim's mount
  path mapped to the local directory, the termination message to a local file), creates the Job's pod from the
  Job's template and sets its status to the gate's exit code and termination message.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench/gpu/campaigns"))
from draft_canary import INTERVAL_SCALE, POD, RUNTIME_EXTRA, STEPS, TOKEN, Cluster, Load, Pod, interval_s, newest_body
from local_job import local_command  # the Job's commands as the GPU campaign runs them

from specdecode_runtime.contract import adaptation as contract

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"
MIN_RATIO = 1.02  # spec.draft.adaptation.training.minRatio
MAX_STEPS = 500  # spec.draft.adaptation.training.maxSteps
INTERVAL_SECONDS = 600  # spec.draft.adaptation.training.intervalSeconds (the test's clock jumps it)
RECORDS = 400
BATCH = 50
PROMPT_LEN = 12
NEW_TOKENS = 40
SUBVOCAB = 8
# The CPU test's training schedule, appended to the train container's rendered command (argparse: the later flag
# wins): a head this small learns from a random start in a few hundred steps only at a high learning rate, and one
# torch thread keeps a loaded 2-core machine from oversubscribing (tests/runtime/test_adapt_train.py's schedule).
SCHEDULE = ["--lr", "1e-2", "--warmup", "10", "--batch", "8", "--seq", "64", "--ttt", "3", "--threads", "1"]
CANARY_INTERVALS = 6  # tuner intervals the canary may take (it needs 2 with one replica)


def structured_prompts(count: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(5)
    sub = rng.sample(range(3, 256), SUBVOCAB)
    rng = random.Random(seed)
    return [[rng.choice(sub) for _ in range(PROMPT_LEN)] for _ in range(count)]


def sdd(name: str, target: str, draft: str, namespace: str) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "target": {"model": target, "tensorParallelSize": 1},
            "draft": {
                "model": draft,
                "algorithm": "EAGLE3",
                "tensorParallelSize": 1,
                "rollout": {"intervals": 1, "minAcceptRatio": 0.9},
                "adaptation": {
                    "enabled": True,
                    "capture": {"claimName": "traffic", "maxBytes": 1 << 22, "sampleRatio": 1.0},
                    "training": {
                        "intervalSeconds": INTERVAL_SECONDS,
                        "maxSeconds": 600,
                        "maxSteps": MAX_STEPS,
                        "gpus": 0,
                        "minRatio": MIN_RATIO,
                    },
                },
            },
            "speculative": {
                "numSteps": STEPS,
                "eagleTopK": 1,
                "autotune": {"mode": "Live", "minSteps": 1, "maxSteps": STEPS, "intervalSeconds": 5},
            },
            "placement": {"gpusPerNode": 1},
        },
    }


def create(cluster: Cluster, name: str, target: str, draft: str) -> None:
    """The object and its control-token Secret (as the operator would have created it; the pod mounts it)."""
    import base64

    from specdecode_operator.api.models import API_VERSION, PLURAL
    from specdecode_operator.control_token import control_secret
    from specdecode_operator.kube_client import resource_path

    secret = control_secret(name, cluster.namespace, {"data": {"token": base64.b64encode(TOKEN.encode()).decode()}})
    status, out = cluster.env.request("POST", f"/api/v1/namespaces/{cluster.namespace}/secrets", secret)
    assert status == 201, out
    status, out = cluster.env.request(
        "POST", resource_path(API_VERSION, PLURAL, cluster.namespace, None), sdd(name, target, draft, cluster.namespace)
    )
    assert status == 201, out


# ---------------------------------------------------------------------------------------------------- the Job


def run(command: list[str], log: Path) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(RUNTIME), os.environ.get("PYTHONPATH", "")]))
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(command) + "\n").encode())
        f.flush()
        return subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=600).returncode


@dataclasses.dataclass
class JobRun:
    job: dict
    train_exit: int | None
    gate_exit: int
    message: str


def play_job(cluster: Cluster, job: dict, claim: Path, work: Path, broken_from: str | None = None) -> JobRun:
    """Run the Job's rendered commands here, then create its pod with the gate's result as its status. With
    ``broken_from``, the training is replaced by a broken one: the candidate is a noisy copy of that draft."""
    from specdecode_runtime.cpu.tiny_models import noisy_copy

    spec = job["spec"]["template"]["spec"]
    (train,), (gate,) = spec["initContainers"], spec["containers"]
    name = job["metadata"]["name"]
    message = work / f"{name}.termination-log"
    log = work / f"{name}.log"
    train_exit = None
    if broken_from is None:
        train_exit = run([*local_command(train["command"], claim, message), *SCHEDULE], log)
        assert train_exit == 0, log.read_text()[-3000:]
    else:
        out = local_command(train["command"], claim, message)
        noisy_copy(broken_from, out[out.index("--out") + 1], scale=3.0)
    gate_exit = run([*local_command(gate["command"], claim, message), "--threads", "1"], log)
    text = message.read_text() if message.exists() else log.read_text()[-2048:]
    template = copy.deepcopy(job["spec"]["template"])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-x1",
            "labels": {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": name},
        },
        "spec": template["spec"],
    }
    status, out = cluster.env.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", pod)
    assert status == 201, out
    terminated = {"exitCode": gate_exit, "reason": "Completed" if gate_exit == 0 else "Error", "message": text}
    patch = {
        "status": {
            "phase": "Succeeded" if gate_exit == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": gate["name"],
                    "image": gate["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
    }
    status, out = cluster.env.request(
        "PATCH",
        f"/api/v1/namespaces/{cluster.namespace}/pods/{name}-x1/status",
        patch,
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 200, out
    return JobRun(job, train_exit, gate_exit, text)


# ---------------------------------------------------------------------------------------------------- the loop
@dataclasses.dataclass
class Attempt:
    """One attempt, tick by tick."""

    broken: bool
    job: JobRun | None = None
    ticks: list[dict] = dataclasses.field(default_factory=list)
    events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)

    @property
    def outcome(self) -> str | None:
        return self.ticks[-1]["adaptation"].get("phase") if self.ticks else None

    def phases(self) -> list[str]:
        return [t["adaptation"].get("phase") for t in self.ticks]


@dataclasses.dataclass
class Loop:
    name: str
    claim: Path
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    api_status: dict = dataclasses.field(default_factory=dict)
    served_after: str | None = None
    load: dict = dataclasses.field(default_factory=dict)
    forbidden: list[str] = dataclasses.field(default_factory=list)
    records: int = 0


async def _drive(cluster: Cluster, pod: Pod, loop: Loop, claim: Path, work: Path, plan: list[bool]) -> None:
    import aiohttp

    from specdecode_operator.api.validate import parse
    from specdecode_operator.config import OperatorConfig
    from specdecode_operator.control_token import token_of
    from specdecode_operator.kube_client import KubeClient
    from specdecode_operator.object_state import ObjectState
    from specdecode_operator.render import names
    from specdecode_operator.tuning import adaptation, draft_rollout
    from specdecode_operator.tuning.pod_client import read_counters
    from specdecode_operator.tuning.pods import Target

    config = OperatorConfig(tune_interval_scale=INTERVAL_SCALE)
    client = KubeClient(cluster.operator_configuration(), timeout=config.request_timeout)
    target = Target(POD, "127.0.0.1", pod.base + "/metrics", pod.control)
    state = ObjectState()
    clock = [time.time()]
    attempt: list[Attempt] = []

    async def token() -> str | None:
        return token_of(await client.get("v1", "secrets", cluster.namespace, names.control_secret(loop.name)))

    async def write_draft(draft: dict) -> None:
        await draft_rollout.write(client, loop.name, cluster.namespace, draft)

    async def write_adaptation(status: dict) -> None:
        await adaptation.write(client, loop.name, cluster.namespace, status)

    async def changed() -> None:
        pass  # the reconciler would re-render: the served draft is in status.draft, checked at the end

    def event(kind: str, reason: str, message: str) -> None:
        if attempt:
            attempt[-1].events.append((kind, reason, message))

    try:
        async with aiohttp.ClientSession() as session:
            drafts = draft_rollout.DraftRollouts(
                state, draft_rollout.PodsApi(session, token, config.scrape_timeout), write_draft, event, changed
            )
            adapts = adaptation.Adaptations(
                state, client, write_adaptation, event, changed, "runtime:test", lambda: clock[0], str(claim)
            )

            async def tick() -> dict:
                """One tuner interval as tuning/loop.py runs it."""
                body = await newest_body(client, cluster.namespace, loop.name)
                snaps, _ = await read_counters(session, config, cluster.namespace, [target], time.time(), None)
                await drafts.step(parse(body), body, [target], snaps)
                await adapts.step(parse(body), body)
                st = state.draft_status or {}
                out = {
                    "t": round(time.monotonic(), 2),
                    "draft_phase": st.get("phase"),
                    "draft_message": st.get("message"),
                    "adaptation": dict(state.adaptation_status or {}),
                    "served": (await drafts.api.get(pod.control)).source,
                }
                if attempt:
                    attempt[-1].ticks.append(out)
                return out

            first = await tick()
            assert first["adaptation"].get("phase") == "Capturing", first
            for broken in plan:
                attempt.append(Attempt(broken))
                loop.attempts.append(attempt[-1])
                clock[0] += INTERVAL_SECONDS
                t = await tick()
                if t["adaptation"].get("phase") != "Training":
                    return
                job = cluster.bed.env.request(
                    "GET", f"/apis/batch/v1/namespaces/{cluster.namespace}/jobs/{t['adaptation']['job']}"
                )[1]
                assert isinstance(job, dict), job
                served = t["served"]
                attempt[-1].job = await asyncio.to_thread(
                    play_job, cluster, job, claim, work, served if broken else None
                )
                for _ in range(CANARY_INTERVALS + 1):
                    t0 = time.monotonic()
                    t = await tick()
                    if t["adaptation"].get("phase") in ("Promoted", "Refused", "Failed"):
                        break
                    await asyncio.sleep(max(0.0, interval_s() - (time.monotonic() - t0)))
        loop.api_status = ((await newest_body(client, cluster.namespace, loop.name)).get("status") or {}).get(
            "draft"
        ) or {}
    finally:
        await client.close()


def send_traffic(pod: Pod, prompts: list[list[int]]) -> None:
    """Greedy requests in batches (one /generate call per batch), each captured by the pod."""
    params = {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}
    for i in range(0, len(prompts), BATCH):
        status, out = pod._call(
            pod.base + "/generate", "POST", {"input_ids": prompts[i : i + BATCH], "sampling_params": params}
        )
        assert status == 200, out


def captured(claim: Path) -> int:
    return sum(len(f.read_text().splitlines()) for f in claim.glob("*.jsonl"))


def run_loop(
    cluster: Cluster,
    pod: Pod,
    name: str,
    claim: Path,
    work: Path,
    plan: list[bool],
    load_prompts: list[list[int]],
    reference: list[list[int]],
) -> Loop:
    """The object created serving the pod's draft, then one attempt per entry of ``plan`` (True: a broken
    candidate), under load from the first attempt to the end."""
    loop = Loop(name, claim)
    work.mkdir(parents=True, exist_ok=True)
    create(cluster, name, pod.target, pod.served() or "")
    mark = cluster.env.audit_offset()
    with Load(pod, load_prompts) as load:
        time.sleep(1.0)
        asyncio.run(_drive(cluster, pod, loop, claim, work, plan))
        time.sleep(1.0)
    loop.load = load.summary(reference, [])
    loop.served_after = pod.served()
    loop.forbidden = cluster.bed.forbidden(mark)
    loop.records = captured(claim)
    return loop


# ---------------------------------------------------------------------------------------------------- the checks
def load_problems(loop: Loop) -> list[str]:
    out = []
    if loop.load["failed"]:
        out.append(f"{loop.load['failed']} failed requests: {loop.load['errors'] + loop.load['mismatches']}")
    if not loop.load["requests"]:
        out.append("no load ran")
    if loop.forbidden:
        out.append(f"the API server refused the operator: {loop.forbidden}")
    return out


def promoted_problems(loop: Loop, a: Attempt, old: str) -> list[str]:
    """Empty when the attempt trained a candidate that passed the gate, was canaried and promoted, and serves."""
    out = []
    cand = contract.attempt_dir(loop.name, loop.attempts.index(a) + 1, str(loop.claim))
    if a.job is None or a.job.gate_exit != contract.EXIT_BETTER:
        out.append(f"the gate did not pass the trained candidate: {a.job and a.job.message}")
    if "Canary" not in a.phases():
        out.append(f"no canary of the candidate: phases {a.phases()}")
    if a.outcome != "Promoted":
        out.append(f"not promoted: {a.ticks[-1] if a.ticks else None}")
    if not any(t["served"] == cand for t in a.ticks):
        out.append(f"the pod never served {cand}: {[t['served'] for t in a.ticks]}")
    if "DraftAdapted" not in [r for _, r, _ in a.events]:
        out.append(f"no DraftAdapted event: {a.events}")
    if old == cand:
        out.append("the candidate is the old draft")
    return out


def refused_at_gate_problems(loop: Loop, a: Attempt, serving: str) -> list[str]:
    """Empty when the broken candidate was refused by the offline gate, never canaried, and the serving draft
    serves on (the pod and status.draft)."""
    out = []
    if a.job is None or a.job.gate_exit != contract.EXIT_NOT_BETTER:
        out.append(f"the gate did not refuse the broken candidate: exit {a.job and a.job.gate_exit}")
    if a.outcome != "Refused" or "Canary" in a.phases():
        out.append(f"the broken candidate was not refused at the gate: phases {a.phases()}")
    if any(t["served"] != serving for t in a.ticks):
        out.append(f"the pod served another draft than {serving}: {[t['served'] for t in a.ticks]}")
    if (loop.api_status.get("serving") or {}).get("source") != serving:
        out.append(f"status.draft.serving at the API server: {loop.api_status.get('serving')}")
    if ("Warning", "DraftCandidateRefused") not in [(k, r) for k, r, _ in a.events]:
        out.append(f"no DraftCandidateRefused warning: {a.events}")
    return out


def write_runtime(work: Path, models, claim: Path) -> tuple[int, int]:
    """runtime.yaml of the pod: the random EAGLE-3 head, Live tiers 0 and 3, capture into ``claim``."""
    from test_stock_launch import _free_port

    port, control = _free_port(), _free_port()
    (work / "token").write_text(TOKEN + "\n")
    (work / "runtime.yaml").write_text(f"""\
apiVersion: specdecode.io/runtime/v1
name: {POD}
device: cpu
target: {{model: {models.target}, tensorParallelSize: 1}}
draft: {{model: {models.eagle3}, algorithm: EAGLE3, tensorParallelSize: 1}}
speculative: {{numSteps: {STEPS}, eagleTopK: 1, candidateSteps: [0, {STEPS}], autotune: {{mode: Live, minSteps: 1, maxSteps: {STEPS}}}}}
nccl: {{profile: None, preflight: false}}
server: {{port: {port}, controlPort: {control}, tokenFile: {work / "token"}}}
topology: {{nodes: 1, gpusPerNode: 1}}
capture: {{dir: {claim}, maxBytes: {1 << 22}, retentionSeconds: 86400, sampleRatio: 1.0}}
{RUNTIME_EXTRA}""")
    return port, control
