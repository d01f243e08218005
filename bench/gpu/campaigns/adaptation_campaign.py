#!/usr/bin/env python3
"""A draft that learns from its own traffic, end to end on one machine: the campaign of issue 40 part 4
(bench/gpu/campaigns/adaptation.sh runs it; docs/gpu-testbed.md, "The adaptation campaign").

What stands in for the cluster, and what does not:

* **the pod** is real: ONE ``specdecode-runtime launch`` of the patched runtime over the pinned SGLang (capture on, a
  local directory standing for the capture claim, Live tiers 0 and ``--steps``), started once and never restarted;
* **the operator** is its own code: ``tuning.adaptation.Adaptations`` and ``tuning.draft_rollout.DraftRollouts``
  stepped once per tick exactly as ``tuning/loop.py`` steps them after its scrape (``read_counters``), with the real
  pod client over HTTP. Their decisions are the operator's pure ones (``tuner/adaptation.py``: when an attempt is
  due, what a finished Job says; ``tuner/draft_gate.py``: the canary's verdict). There is no API server on the GPU
  machine: an in-memory stand-in (:class:`StandInApi`) holds the object, applies the Job and lists its pod, the way
  the API server answers those calls;
* **the training Job** is the one ``render/training_job.py`` renders, its two containers' commands run as local
  processes (``--device cuda`` when ``training.gpus`` is 1), the claim's mount path mapped to the local directory and
  the termination message to a local file; its pod's status (exit codes, termination message) is what the operator
  reads. ``--candidate-minutes`` is appended to the train command (argparse: the later flag wins), since the CRD's
  smallest ``maxSeconds`` (300) would give training 3.3 minutes;
* **the clock**: ``training.intervalSeconds`` is at least 600 (the CRD's minimum); the operator's clock is moved on
  by it ``--capture-seconds`` after the shift (and again for the broken attempt), so the attempt starts when one of a
  cluster whose interval ended then would. The summary states the bound with a whole interval;
* **the traffic**: ``--clients`` threads send greedy requests without pause, prompts from workload A, then (the
  shift) from workload B, through the whole adaptation; every request that errs or is aborted is a failed request.

After the loop (one attempt promoted, one deliberately broken candidate, a noisy copy of the serving head, refused
at the gate), on the same server: the stale head A, the promoted head and the offline reference head B, each loaded
in place in turn, serve one fixed held-out set of workload-B prompts at batch 1 in rotating rounds (accept length
from the pod's own counters, tok/s per round), then greedy outputs of the promoted head are compared with the pod's
own at steps 0 (no speculation). Everything goes to ``OUT/adaptation_run.json`` (written after every stage, so a
run cut short still leaves what it measured).

Subcommands: ``mix`` (corpora A and B interleaved document by document: the target learns both), ``encode`` (a
corpus's training text as the target's packed token stream, for the heads), ``run`` (the campaign).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for _p in (ROOT / "runtime", ROOT / "operator", HERE.parent / "trained", HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
try:
    import kubernetes  # noqa: F401 - the operator's kube client imports it at its top
except ImportError:
    # The GPU image has no Kubernetes client and there is no API server to reach: the kube client's module is loaded
    # for its ApiError and path helper only (tuning/adaptation.py), never to connect. An empty module answers that
    # import; any use of it would raise AttributeError, not talk to a cluster.
    sys.modules["kubernetes"] = types.ModuleType("kubernetes")

import aiohttp  # noqa: E402
from draft_swap_load import swap  # noqa: E402
from live_tune import SGLANG_ARGS, free_port, graph_args, http, pod_samples, prompts_from, put_table, single  # noqa: E402
from local_job import local_command  # noqa: E402
from packed_data import EOT  # noqa: E402

from specdecode_operator.api.validate import parse  # noqa: E402
from specdecode_operator.config import OperatorConfig  # noqa: E402
from specdecode_operator.object_state import ObjectState  # noqa: E402
from specdecode_operator.render import training_job  # noqa: E402
from specdecode_operator.tuning import adaptation, draft_rollout  # noqa: E402
from specdecode_operator.tuning.pod_client import read_counters  # noqa: E402
from specdecode_operator.tuning.pods import Target  # noqa: E402
from specdecode_runtime.contract import adaptation as contract  # noqa: E402
from specdecode_runtime.contract.draft_swap import DRAFT_PATH  # noqa: E402
from specdecode_runtime.contract.metric_names import POSITION_ACCEPTED, REQUESTS_VERIFIED  # noqa: E402
from specdecode_runtime.cpu.tiny_models import noisy_copy  # noqa: E402

NAME = "adapt"
NAMESPACE = "bench"
POD = "adapt-0"
INTERVAL_SECONDS = 600  # spec.draft.adaptation.training.intervalSeconds: the CRD's minimum
MAX_SECONDS = 300  # spec.draft.adaptation.training.maxSeconds: the CRD's minimum
AUTOTUNE_INTERVAL = 5  # spec.speculative.autotune.intervalSeconds (the CRD's minimum); ticks are --tick-seconds
BROKEN_NOISE = 3.0  # the broken candidate: Gaussian noise of 3x each tensor's RMS on the serving head
REQUEST_TIMEOUT_S = 300.0
STARTUP_TIMEOUT_S = 900.0
MAX_ERRORS_KEPT = 20
JOB_LABEL = adaptation.JOB_LABEL


def _usage(ap: argparse.ArgumentParser, flag: str, why: str) -> None:
    ap.error(f"{flag}: {why}")  # exit 2, naming the argument


# ---------------------------------------------------------------------------------------------------- corpora
def cmd_mix(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    """train.txt / heldout.txt of A and B interleaved document by document (the tokenizer samples the start of the
    training text: both workloads must be in it); mix.json counts them."""
    for flag, d in (("--a", a.a), ("--b", a.b)):
        for split in ("train.txt", "heldout.txt"):
            if not (d / split).is_file():
                _usage(ap, flag, f"{d / split} is missing (corpus.py writes it)")
    a.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "heldout"):
        docs = [_documents(d / f"{split}.txt", a.max_bytes) for d in (a.a, a.b)]
        mixed = [doc for pair in _zip_longest(*docs) for doc in pair if doc]
        (a.out / f"{split}.txt").write_text(EOT.join(mixed), encoding="utf-8")
        counts[split] = {"a_docs": len(docs[0]), "b_docs": len(docs[1]), "bytes": sum(len(d) for d in mixed)}
    (a.out / "mix.json").write_text(json.dumps({"a": str(a.a), "b": str(a.b), **counts}, indent=1) + "\n")
    print(json.dumps(counts))
    return 0


def _documents(path: Path, max_bytes: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        text = f.read(max_bytes)
    return [d for d in text.split(EOT) if d.strip()]


def _zip_longest(a: list[str], b: list[str]) -> list[tuple[str, str]]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else "", b[i] if i < len(b) else "") for i in range(n)]


def cmd_encode(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    """The first --max-bytes of CORPUS/train.txt as the target's packed token stream (CORPUS/train_ids.pt, what
    train_eagle3.py reads), documents joined by the end-of-text token."""
    import torch  # lazy: torch and tokenizers load in seconds; mix and run's argument checks need neither
    from tokenizers import Tokenizer

    tok_file = a.target / "tokenizer.json"
    if not tok_file.is_file():
        _usage(ap, "--target", f"{tok_file} is missing (train_target.py writes it)")
    if not (a.corpus / "train.txt").is_file():
        _usage(ap, "--corpus", f"{a.corpus / 'train.txt'} is missing (corpus.py writes it)")
    tok = Tokenizer.from_file(str(tok_file))
    eot = next((i for i in (tok.token_to_id(t) for t in (EOT, "</s>")) if i is not None), None)
    if eot is None:
        _usage(ap, "--target", f"{tok_file} has neither {EOT} nor </s>: no document separator")
    docs = _documents(a.corpus / "train.txt", a.max_bytes)
    ids: list[int] = []
    for i in range(0, len(docs), 4096):
        for enc in tok.encode_batch(docs[i : i + 4096], add_special_tokens=False):
            ids += enc.ids + [eot]
    torch.save(torch.tensor(ids, dtype=torch.int32), a.corpus / "train_ids.pt")
    print(json.dumps({"corpus": str(a.corpus), "documents": len(docs), "tokens": len(ids)}))
    return 0


# ---------------------------------------------------------------------------------------------------- the pod
def write_runtime(work: Path, a: argparse.Namespace, claim: Path) -> tuple[int, int, str]:
    """runtime.yaml of the pod (head A served, Live tiers 0 and --steps, capture on into ``claim``) and its control
    token: the server port, the control port, the token."""
    port, control = free_port(), free_port()
    token = secrets.token_urlsafe(24)
    (work / "token").write_text(token + "\n")
    device = f"device: {a.device}\n"
    (work / "runtime.yaml").write_text(f"""\
apiVersion: specdecode.io/runtime/v1
name: {POD}
{device}target: {{model: {a.target}, tensorParallelSize: 1}}
draft: {{model: {a.head_a}, algorithm: EAGLE3, tensorParallelSize: 1}}
speculative: {{numSteps: {a.steps}, eagleTopK: 1, candidateSteps: [0, {a.steps}], autotune: {{mode: Live, minSteps: 1, maxSteps: {a.steps}}}}}
nccl: {{profile: None, preflight: false}}
server: {{port: {port}, controlPort: {control}, tokenFile: {work / "token"}}}
topology: {{nodes: 1, gpusPerNode: 1}}
capture: {{dir: {claim}, maxBytes: {1 << 30}, retentionSeconds: 86400, sampleRatio: 1.0}}
costProbe: {{enabled: false}}
""")
    return port, control, token


def sglang_args(a: argparse.Namespace) -> list[str]:
    """SGLang's arguments after ``--``: on CUDA the kit's kernels (triton attention, torch sampling), decode graphs up
    to the load's batch, eager prefill; on the CPU the test bed's."""
    out = ["--dtype", a.dtype] if a.dtype else []
    if a.device == "cpu":
        return ["--skip-server-warmup", *out]
    batch = 1 << max(0, math.ceil(math.log2(a.clients)))
    args = [x for x in SGLANG_ARGS if x != "--enable-metrics"]  # launch sets it (our series share /metrics)
    return [
        *args,
        *graph_args(batch),
        "--disable-prefill-cuda-graph",
        "--mem-fraction-static",
        str(a.mem_fraction),
        *out,
    ]


class Server:
    """The one pod of the run: started once, stopped at the end; ``restarts`` says whether it is still the same
    process."""

    def __init__(self, a: argparse.Namespace, work: Path, claim: Path):
        self.port, self.control_port, self.token = write_runtime(work, a, claim)
        self.url = f"http://127.0.0.1:{self.port}"
        self.control = {"port": self.control_port, "token": self.token}
        env = dict(
            os.environ,
            PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"),
            SPECDECODE_STATE_DIR=str(work / "state"),
            SGLANG_PYSPY_DUMP_BEFORE_CRASH="0",
            SGLANG_CUDA_COREDUMP_BEFORE_CRASH="0",
            NCCL_NVLS_ENABLE="0",
            TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
            NVSHMEM_DISABLE_NVLS="1",
            PYTHONPATH=os.pathsep.join([str(ROOT / "runtime"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        )
        self.log_path = work / "server.log"
        self.cmd = [sys.executable, "-m", "specdecode_runtime", "launch", "--config", str(work / "runtime.yaml")]
        self.cmd += ["--", *sglang_args(a)]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.pid = self.proc.pid

    def wait_healthy(self, timeout_s: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise SystemExit(f"the pod exited with {self.proc.returncode} before it was healthy; {self.log_path}")
            try:
                if http("GET", self.url + "/health", timeout=5)[0] == 200:
                    return time.monotonic() - t0
            except Exception:  # noqa: BLE001 - refused while starting, 503 while warming up
                pass
            time.sleep(1.0)
        raise SystemExit(f"the pod was not healthy after {timeout_s:.0f} s; {self.log_path}")

    @property
    def restarts(self) -> int:
        return 0 if self.proc.poll() is None and self.proc.pid == self.pid else 1

    def served(self) -> str | None:
        try:
            _, raw = http("GET", f"http://127.0.0.1:{self.control_port}{DRAFT_PATH}", token=self.token, timeout=10)
            return (json.loads(raw).get("draft") or {}).get("source")
        except Exception:  # noqa: BLE001 - unreachable: no draft known
            return None

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


# ---------------------------------------------------------------------------------------------------- the traffic
class Traffic:
    """``clients`` threads sending greedy requests back to back, prompts from the current workload (each prompt once
    until the workload's list is used up); every request is recorded, a failed one with its error."""

    def __init__(self, url: str, prompts: dict[str, list[str]], clients: int, new_tokens: int):
        self.url, self.prompts, self.new_tokens = url, prompts, new_tokens
        self.workload = "a"
        self.next = {k: 0 for k in prompts}
        self.records: list[tuple[float, float, str, int]] = []  # start, end, workload, output tokens
        self.errors: list[tuple[float, str, str]] = []  # time, workload, error
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _take(self) -> tuple[str, str]:
        with self.lock:
            w = self.workload
            i = self.next[w]
            self.next[w] = i + 1
        return w, self.prompts[w][i % len(self.prompts[w])]

    def _run(self) -> None:
        while not self.stop_event.is_set():
            w, text = self._take()
            body = {
                "text": text,
                "sampling_params": {"max_new_tokens": self.new_tokens, "temperature": 0.0, "ignore_eos": True},
            }
            t0 = time.monotonic()
            try:
                _, raw = http("POST", self.url + "/generate", body, timeout=REQUEST_TIMEOUT_S)
                meta = json.loads(raw).get("meta_info") or {}
                finish = meta.get("finish_reason") or {}
                if isinstance(finish, dict) and finish.get("type") == "abort":
                    raise RuntimeError(f"aborted: {finish.get('message', '')}"[:200])
                n = int(meta.get("completion_tokens") or 0)
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none ends the client
                with self.lock:
                    self.errors.append((time.monotonic(), w, repr(exc)[:300]))
                time.sleep(0.2)
                continue
            with self.lock:
                self.records.append((t0, time.monotonic(), w, n))

    def start(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def shift(self, workload: str) -> None:
        with self.lock:
            self.workload = workload

    def close(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=REQUEST_TIMEOUT_S + 5)

    def summary(self, t0: float) -> dict:
        with self.lock:
            recs, errs = list(self.records), list(self.errors)
        by = {w: sum(1 for r in recs if r[2] == w) for w in self.prompts}
        return {
            "clients": len(self.threads),
            "requests": len(recs) + len(errs),
            "completed": len(recs),
            "failed": len(errs),
            "errors": [{"t": round(t - t0, 2), "workload": w, "error": e} for t, w, e in errs[:MAX_ERRORS_KEPT]],
            "completed_by_workload": by,
            "output_tokens": sum(r[3] for r in recs),
            "first_s": round(min((r[0] for r in recs), default=t0) - t0, 2),
            "last_s": round(max((r[1] for r in recs), default=t0) - t0, 2),
            "still_running": sum(t.is_alive() for t in self.threads),
        }


# ---------------------------------------------------------------------------------------------------- the cluster
def deployment(a: argparse.Namespace, claim_name: str = "traffic") -> dict:
    """The SpecDecodeDeployment the operator steps: head A as spec.draft.model, adaptation with training on."""
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "00000000-0000-4000-8000-000000000040"},
        "spec": {
            "replicas": 1,
            "target": {"model": str(a.target), "tensorParallelSize": 1},
            "draft": {
                "model": str(a.head_a),
                "algorithm": "EAGLE3",
                "tensorParallelSize": 1,
                "rollout": {"intervals": 1, "minAcceptRatio": a.canary_min_ratio},
                "adaptation": {
                    "enabled": True,
                    "capture": {"claimName": claim_name, "maxBytes": 1 << 30, "sampleRatio": 1.0},
                    "training": {
                        "intervalSeconds": INTERVAL_SECONDS,
                        "maxSeconds": MAX_SECONDS,
                        "gpus": 1 if a.device == "cuda" else 0,
                        "minRatio": a.min_ratio,
                    },
                },
            },
            "speculative": {
                "numSteps": a.steps,
                "eagleTopK": 1,
                "autotune": {
                    "mode": "Live",
                    "minSteps": 1,
                    "maxSteps": a.steps,
                    "intervalSeconds": AUTOTUNE_INTERVAL,
                },
            },
            "placement": {"gpusPerNode": 1},
        },
    }


class StandInApi:
    """What the operator's adaptation step asks of the API server, in memory: apply a Job, get it, list its pods.
    Applying a Job starts it (:meth:`_run_job`, in a thread): the train container's command, then the gate's, as local
    processes; the Job's pod then carries their exit codes and the gate's termination message, and the Job its
    Complete or Failed condition, as the Job controller and the kubelet would set them."""

    def __init__(self, a: argparse.Namespace, claim: Path, work: Path, t0: float):
        self.a, self.claim, self.work, self.t0 = a, claim, work, t0
        self.jobs: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}
        self.runs: list[dict] = []
        self.broken: set[int] = set()
        self.lock = threading.Lock()

    async def apply(self, obj: dict, plural: str) -> dict:
        assert plural == "jobs", plural
        name = obj["metadata"]["name"]
        with self.lock:
            if name in self.jobs:
                return self.jobs[name]
            self.jobs[name] = json.loads(json.dumps(obj))
        threading.Thread(target=self._run_job, args=(self.jobs[name],), daemon=True).start()
        return obj

    async def get(self, api_version: str, plural: str, namespace: str, name: str) -> dict | None:
        assert (api_version, plural) == ("batch/v1", "jobs"), (api_version, plural)
        with self.lock:
            job = self.jobs.get(name)
            return json.loads(json.dumps(job)) if job is not None else None

    async def request(self, method: str, path: str, query=None, verb: str | None = None, **_: Any) -> dict:
        assert method == "GET" and path.endswith("/pods"), (method, path)
        selector = dict(query or []).get("labelSelector", "")
        key, _, value = selector.partition("=")
        with self.lock:
            items = [json.loads(json.dumps(p)) for p in self.pods.values() if p["metadata"]["labels"].get(key) == value]
        return {"items": items}

    def _exec(self, cmd: list[str], log: Path) -> tuple[int, float]:
        t = time.monotonic()
        with open(log, "ab") as f:
            f.write(("$ " + " ".join(cmd) + "\n").encode())
            f.flush()
            try:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=MAX_SECONDS * 2).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        return rc, round(time.monotonic() - t, 2)

    def _run_job(self, job: dict) -> None:
        name = job["metadata"]["name"]
        attempt = int(job["metadata"]["labels"][training_job.ATTEMPT_LABEL])
        spec = job["spec"]["template"]["spec"]
        (train,), (gate,) = spec["initContainers"], spec["containers"]
        message = self.work / f"{name}.termination-log"
        log = self.work / f"{name}.log"
        run: dict[str, Any] = {
            "job": name,
            "attempt": attempt,
            "broken": attempt in self.broken,
            "started_s": round(time.monotonic() - self.t0, 2),
            "rendered_train": train["command"],
            "rendered_gate": gate["command"],
        }
        self.runs.append(run)
        train_cmd = local_command(train["command"], self.claim, message)
        out_dir = train_cmd[train_cmd.index("--out") + 1]
        train_exit: int | None
        if run["broken"]:
            init = train_cmd[train_cmd.index("--init-draft") + 1]
            t = time.monotonic()
            noisy_copy(init, out_dir, scale=BROKEN_NOISE)
            train_exit, run["train_s"] = 0, round(time.monotonic() - t, 2)
            run["train_ran"] = f"replaced by a broken candidate: noisy_copy({init}, scale={BROKEN_NOISE})"
        else:
            train_cmd += ["--minutes", f"{self.a.candidate_minutes:g}", *self.a.train_args]
            run["train_ran"] = train_cmd
            train_exit, run["train_s"] = self._exec(train_cmd, log)
        run["train_exit"] = train_exit
        gate_exit = None
        if train_exit == 0:
            gate_cmd = local_command(gate["command"], self.claim, message) + list(self.a.gate_args)
            run["gate_ran"] = gate_cmd
            gate_exit, run["gate_s"] = self._exec(gate_cmd, log)
        run["gate_exit"] = gate_exit
        text = message.read_text()[: contract.SUMMARY_LIMIT] if message.exists() else _tail(log, 2048)
        run["termination_message"] = text
        score = Path(out_dir) / "score.json"
        if score.is_file():
            run["score"] = _bounded_json(score)
        run["finished_s"] = round(time.monotonic() - self.t0, 2)
        statuses: dict[str, Any] = {
            "initContainerStatuses": [
                {"name": train["name"], "state": {"terminated": {"exitCode": train_exit, "message": ""}}}
            ]
        }
        if gate_exit is not None:
            statuses["containerStatuses"] = [
                {"name": gate["name"], "state": {"terminated": {"exitCode": gate_exit, "message": text}}}
            ]
        ok = gate_exit == 0
        pod = {
            "metadata": {
                "name": f"{name}-x1",
                "labels": {**job["spec"]["template"]["metadata"]["labels"], JOB_LABEL: name},
            },
            "status": {"phase": "Succeeded" if ok else "Failed", **statuses},
        }
        condition = {"type": "Complete" if ok else "Failed", "status": "True"}
        if not ok:
            condition["reason"] = "BackoffLimitExceeded"
        with self.lock:
            self.pods[pod["metadata"]["name"]] = pod
            self.jobs[name].setdefault("status", {})["conditions"] = [condition]


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - n))
            return f.read(n).decode("utf-8", "replace")
    except OSError:
        return ""


def _bounded_json(path: Path, limit: int = 1 << 20) -> Any:
    with open(path, "rb") as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        return {"error": f"{path.name} is larger than {limit} bytes"}
    try:
        return json.loads(raw)
    except ValueError as e:
        return {"error": f"{path.name}: {e}"}


class Operator:
    """The operator's draft rollout and adaptation steps, once per tick, in a thread of their own (an asyncio loop),
    as tuning/loop.py runs them after its scrape; the clock is the real one plus ``skew`` (moved on by the run)."""

    def __init__(self, a: argparse.Namespace, server: Server, api: StandInApi, claim: Path, t0: float):
        self.a, self.server, self.api, self.claim, self.t0 = a, server, api, claim, t0
        self.body = deployment(a)
        parse(self.body)  # the object is one the API server would admit
        self.state = ObjectState()
        self.skew = 0.0
        self.ticks: list[dict] = []  # the ticks at which a phase or the served draft changed
        self.events: list[dict] = []
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.last: dict = {}
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def clock(self) -> float:
        return time.time() + self.skew

    def _event(self, kind: str, reason: str, message: str) -> None:
        self.events.append(
            {"t": round(time.monotonic() - self.t0, 2), "type": kind, "reason": reason, "message": message}
        )

    async def _main(self) -> None:
        config = OperatorConfig(tune_interval_scale=self.a.tick_seconds / AUTOTUNE_INTERVAL)
        target = Target(POD, "127.0.0.1", self.server.url + "/metrics", f"http://127.0.0.1:{self.server.control_port}")

        async def token() -> str:
            return self.server.token

        async def write_draft(draft: dict) -> None:  # status.draft; its adaptation is another manager's field
            status = self.body.setdefault("status", {})
            kept = (status.get("draft") or {}).get("adaptation")
            status["draft"] = {**draft, **({"adaptation": kept} if kept else {})}

        async def write_adaptation(status: dict) -> None:
            self.body.setdefault("status", {}).setdefault("draft", {})["adaptation"] = status

        async def changed() -> None:
            pass  # the reconciler would re-render: the served draft is read from the pod

        async with aiohttp.ClientSession() as session:
            drafts = draft_rollout.DraftRollouts(
                self.state,
                draft_rollout.PodsApi(session, token, config.scrape_timeout),
                write_draft,
                self._event,
                changed,
            )
            adapts = adaptation.Adaptations(
                self.state,
                self.api,
                write_adaptation,
                self._event,
                changed,
                "runtime:bench",
                self.clock,
                str(self.claim),
            )
            while not self.stop_event.is_set():
                t = time.monotonic()
                try:
                    sdd = parse(self.body)
                    snaps, _ = await read_counters(session, config, NAMESPACE, [target], time.time(), None)
                    await drafts.step(sdd, self.body, [target], snaps)
                    await adapts.step(sdd, self.body)
                    self._record(t, (await drafts.api.get(target.control_url)).source)
                except Exception as exc:  # noqa: BLE001 - a tick that fails is recorded; the next one runs
                    self.errors.append(f"{round(t - self.t0, 2)}: {exc!r}"[:400])
                await asyncio.sleep(max(0.0, self.a.tick_seconds - (time.monotonic() - t)))

    def _record(self, t: float, served: str | None) -> None:
        st = self.state.draft_status or {}
        ad = self.state.adaptation_status or {}
        now = {
            "draft_phase": st.get("phase"),
            "adaptation_phase": ad.get("phase"),
            "attempt": ad.get("attempt"),
            "served": served,
        }
        if now != {k: self.last.get(k) for k in now}:
            self.ticks.append(
                {
                    "t": round(t - self.t0, 2),
                    **now,
                    "draft_message": st.get("message"),
                    "adaptation_message": ad.get("message"),
                }
            )
        self.last = now

    def wait_outcome(self, attempt: int, timeout_s: float) -> str | None:
        """The adaptation phase once attempt ``attempt`` ended (Promoted, Refused, Failed), or None on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ad = self.state.adaptation_status or {}
            if int(ad.get("attempt") or 0) >= attempt and ad.get("phase") in ("Promoted", "Refused", "Failed"):
                return str(ad["phase"])
            time.sleep(0.25)
        return None

    def phase_time(self, attempt: int, phase: str) -> float | None:
        return next((t["t"] for t in self.ticks if t["attempt"] == attempt and t["adaptation_phase"] == phase), None)


# ---------------------------------------------------------------------------------------------------- measuring
def counts(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Accepted draft tokens and request-verifies the pod counted between two scrapes."""

    def total(samples: dict[str, float], name: str) -> float:
        return sum(v for k, v in samples.items() if k.startswith(name + "_total{"))

    return {
        "accepted": total(after, POSITION_ACCEPTED) - total(before, POSITION_ACCEPTED),
        "verified": total(after, REQUESTS_VERIFIED) - total(before, REQUESTS_VERIFIED),
    }


def serve_set(server: Server, prompts: list[str], tokens: int) -> dict:
    """The prompts one at a time (batch 1), greedy: tok/s over the set, the pod's accept counts, the outputs."""
    before = pod_samples(server.url)
    outs, errors, n = [], [], 0
    t0 = time.perf_counter()
    for text in prompts:
        body = {"text": text, "sampling_params": {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}}
        try:
            _, raw = http("POST", server.url + "/generate", body, timeout=REQUEST_TIMEOUT_S)
            out = json.loads(raw)
            ids = list(out.get("output_ids") or [])
            n += int((out.get("meta_info") or {}).get("completion_tokens") or len(ids))
            outs.append(ids)
        except Exception as exc:  # noqa: BLE001 - counted as a failed request
            errors.append(repr(exc)[:300])
            outs.append([])
    wall = time.perf_counter() - t0
    c = counts(before, pod_samples(server.url))
    return {
        "tokens": n,
        "wall_s": round(wall, 4),
        "tokens_per_s": round(n / wall, 2) if wall > 0 else None,
        **{k: round(v, 3) for k, v in c.items()},
        "accept_length": round(1 + c["accepted"] / c["verified"], 4) if c["verified"] > 0 else None,
        "failed": len(errors),
        "errors": errors[:5],
        "outputs": outs,
    }


def load_draft(server: Server, source: str) -> dict:
    answer = swap(server.control, source)
    return {"status": answer.get("status"), "client_s": answer.get("client_s"), "served": server.served()}


def first_divergence(a: list[list[int]], b: list[list[int]]) -> str | None:
    for p, (x, y) in enumerate(zip(a, b)):
        for i, (u, v) in enumerate(zip(x, y)):
            if u != v:
                return f"prompt {p}, token {i}: {u} != {v}"
        if len(x) != len(y):
            return f"prompt {p}: {len(x)} != {len(y)} tokens"
    return None if len(a) == len(b) else f"{len(a)} != {len(b)} prompts"


# ---------------------------------------------------------------------------------------------------- the run
def cmd_run(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    for flag, d in (("--target", a.target), ("--head-a", a.head_a), ("--head-b", a.head_b)):
        if not (d / "config.json").is_file():
            _usage(ap, flag, f"{d} holds no config.json (a model directory is expected)")
    for flag, d, split in (("--corpus-a", a.corpus_a, "train"), ("--corpus-b", a.corpus_b, "train"),
                           ("--corpus-b", a.corpus_b, "heldout")):  # fmt: skip
        if not (d / f"{split}.txt").is_file():
            _usage(ap, flag, f"{d / (split + '.txt')} is missing (corpus.py writes it)")
    a.target, a.head_a, a.head_b = a.target.resolve(), a.head_a.resolve(), a.head_b.resolve()
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    claim = (a.work / "claim").resolve()
    claim.mkdir(exist_ok=True)
    t_start = time.monotonic()

    def left() -> float:
        return a.deadline_s - (time.monotonic() - t_start) if a.deadline_s > 0 else math.inf

    prompts = {
        "a": prompts_from(a.corpus_a / "train.txt", a.traffic_prompts, a.prompt_chars),
        "b": prompts_from(a.corpus_b / "train.txt", a.traffic_prompts, a.prompt_chars),
    }
    measure = prompts_from(a.corpus_b / "heldout.txt", a.measure_prompts, a.measure_chars)
    raw: dict[str, Any] = {
        "version": 1,
        "how": {
            "pod": "one specdecode-runtime launch of the patched runtime over the pinned SGLang, capture on, never "
            "restarted",
            "operator": "the operator's own tuning.adaptation.Adaptations and tuning.draft_rollout.DraftRollouts, "
            "stepped once per tick after read_counters, as tuning/loop.py steps them; decisions by tuner/adaptation.py "
            "(due, job_outcome) and tuner/draft_gate.py (CanaryGate)",
            "api_server": "none: an in-memory stand-in applies the Job, lists its pod and holds the object's status",
            "job": "the Job rendered by render/training_job.py, its train and gate commands run as local processes",
            "clock": f"moved on by intervalSeconds ({INTERVAL_SECONDS} s, the CRD's minimum) --capture-seconds after "
            "the shift, and again for the broken attempt",
        },
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items() if k not in ("func", "parser")
        },
        "workloads": {
            "a": {"corpus": str(a.corpus_a), "prompts": len(prompts["a"])},
            "b": {"corpus": str(a.corpus_b), "prompts": len(prompts["b"]), "measure_prompts": len(measure)},
        },
        "stages": {},
    }
    out_json = a.out / "adaptation_run.json"

    def save() -> None:
        tmp = out_json.with_suffix(".tmp")
        tmp.write_text(json.dumps(raw, indent=1) + "\n")
        tmp.replace(out_json)

    def stage(name: str) -> None:
        raw["stages"][name] = round(time.monotonic() - t_start, 2)
        print(f"[{raw['stages'][name]:7.1f} s] {name}", flush=True)
        save()

    server = Server(a, a.work, claim)
    raw["server"] = {"command": server.cmd, "pid": server.pid}
    traffic = operator = None
    try:
        raw["server"]["ready_s"] = round(server.wait_healthy(STARTUP_TIMEOUT_S), 2)
        put_table(server.control, single(a.steps))
        raw["server"]["serving_at_start"] = server.served()
        t0 = time.monotonic()  # the run's clock: every time below is seconds from here
        raw["t0_after_start_s"] = round(t0 - t_start, 2)
        stage("pod healthy")
        api = StandInApi(a, claim, a.work, t0)
        api.broken.add(2)
        operator = Operator(a, server, api, claim, t0)
        operator.thread.start()
        traffic = Traffic(server.url, prompts, a.clients, a.new_tokens).start()
        time.sleep(a.a_seconds)
        traffic.shift("b")
        t_shift = time.monotonic() - t0
        raw["t_shift"] = round(t_shift, 2)
        stage("traffic shifted to workload B")
        time.sleep(a.capture_seconds)
        raw["capture_at_attempt"] = capture_stats(claim)
        operator.skew += INTERVAL_SECONDS  # the interval since the capture's start is over: attempt 1 is due
        raw["t_attempt_1_due"] = round(time.monotonic() - t0, 2)
        stage("attempt 1 due")
        outcome1 = operator.wait_outcome(1, _bounded(a.outcome_timeout, left() - 90))  # 90 s kept to measure
        raw["outcome_1"] = outcome1
        raw["t_outcome_1"] = round(time.monotonic() - t0, 2)
        stage(f"attempt 1: {outcome1}")
        promoted = (operator.state.adaptation_status or {}).get("promoted") or {}
        raw["promoted"] = promoted.get("source") if outcome1 == "Promoted" else None
        if outcome1 is not None:
            operator.skew += INTERVAL_SECONDS  # the next attempt: the deliberately broken candidate
            raw["t_attempt_2_due"] = round(time.monotonic() - t0, 2)
            raw["outcome_2"] = operator.wait_outcome(2, _bounded(a.outcome_timeout, left() - 60))
            raw["t_outcome_2"] = round(time.monotonic() - t0, 2)
            stage(f"attempt 2 (broken): {raw['outcome_2']}")
        operator.stop_event.set()
        operator.thread.join(timeout=a.tick_seconds + 30)
        time.sleep(1.0)  # requests in flight across the last step
        traffic.close()
        raw["traffic"] = traffic.summary(t0)
        raw["served_after_loop"] = server.served()
        raw["capture_at_end"] = capture_stats(claim)
        raw["operator"] = {
            "ticks": operator.ticks,
            "events": operator.events,
            "errors": operator.errors,
            "status": operator.state.adaptation_status,
            "draft_status": operator.state.draft_status,
        }
        raw["attempts"] = api.runs
        stage("adaptation loop done")
        raw["measure"] = measure_heads(a, server, measure, raw.get("promoted"), left, save, raw)
        stage("heads measured")
        if raw.get("promoted") and left() > 15:
            raw["identity"] = identity(a, server, measure[: a.identity_prompts], raw["promoted"])
            stage("greedy identity checked")
        if raw.get("promoted"):
            load_draft(server, raw["promoted"])  # the operator's state: the promoted head serves
    finally:
        if operator is not None:
            operator.stop_event.set()
        if traffic is not None:
            traffic.close()
            raw.setdefault("traffic", traffic.summary(t_start))  # cut short: times from the start
        raw.setdefault("server", {})["restarts"] = server.restarts
        raw["server"]["alive_at_end"] = server.proc.poll() is None
        raw["server"]["served_at_end"] = server.served()
        server.stop()
        (a.out / "server.log").write_text(_tail(server.log_path, 150_000))
        raw["wall_s"] = round(time.monotonic() - t_start, 2)
        save()
        for log in sorted(a.work.glob(f"{NAME}-adapt-*.log")):
            (a.out / f"job_{log.name}").write_text(_tail(log, 100_000))
    print(json.dumps({k: raw.get(k) for k in ("outcome_1", "outcome_2", "t_shift", "t_outcome_1", "promoted")}))
    return 0 if raw.get("outcome_1") == "Promoted" else 1


def _bounded(timeout: float, left: float) -> float:
    return max(10.0, min(timeout, left))


def capture_stats(claim: Path) -> dict:
    files = sorted(claim.glob("*.jsonl"))
    lines = 0
    for f in files:
        with open(f, "rb") as fh:
            lines += sum(1 for _ in fh)
    return {"files": len(files), "records": lines, "bytes": sum(f.stat().st_size for f in files)}


def measure_heads(a, server: Server, prompts: list[str], promoted: str | None, left, save, raw) -> dict:
    """Rotating rounds on one held-out workload-B set at batch 1: each head loaded in place, then the set served."""
    sides = {"stale": str(a.head_a), "offline_b": str(a.head_b)}
    if promoted:
        sides["promoted"] = promoted
    names = list(sides)
    out: dict[str, Any] = {"prompts": len(prompts), "tokens": a.measure_tokens, "steps": a.steps, "rounds": []}
    raw["measure"] = out
    put_table(server.control, single(a.steps))
    for r in range(a.rounds):
        if left() < 30:
            out["cut_short"] = f"stopped before round {r + 1}: {left():.0f} s left"
            break
        order = names[r % len(names) :] + names[: r % len(names)]
        rnd: dict[str, Any] = {"order": order}
        for name in order:
            loaded = load_draft(server, sides[name])
            m = serve_set(server, prompts, a.measure_tokens)
            m.pop("outputs")
            rnd[name] = {**m, "load": loaded}
        out["rounds"].append(rnd)
        save()
    return out


def identity(a, server: Server, prompts: list[str], promoted: str) -> dict:
    """Greedy outputs of the promoted head at --steps against the pod's own at steps 0 (no speculation)."""
    load_draft(server, promoted)
    put_table(server.control, single(0))
    plain = serve_set(server, prompts, a.measure_tokens)
    put_table(server.control, single(a.steps))
    spec = serve_set(server, prompts, a.measure_tokens)
    return {
        "prompts": len(prompts),
        "tokens": a.measure_tokens,
        "steps": a.steps,
        "dtype": a.dtype,
        "identical": plain["outputs"] == spec["outputs"] and not plain["failed"] and not spec["failed"],
        "first_divergence": first_divergence(plain["outputs"], spec["outputs"]),
        "failed": plain["failed"] + spec["failed"],
        "accept_length_steps_n": spec["accept_length"],
    }


# ---------------------------------------------------------------------------------------------------- the CLI
def _positive(flag: str, kind=float):
    def parse_(s: str):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive number, got {s!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be positive, got {s!r}")
        return v

    return parse_


def _non_negative(flag: str):
    def parse_(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {s!r}") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{flag} must not be negative, got {s!r}")
        return v

    return parse_


def _words(s: str) -> list[str]:
    return s.split()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mix", help="corpora A and B interleaved document by document (the target's corpus)")
    m.add_argument("--a", required=True, type=Path)
    m.add_argument("--b", required=True, type=Path)
    m.add_argument("--out", required=True, type=Path)
    m.add_argument("--max-bytes", type=_positive("--max-bytes", int), default=1 << 30, help="read of each split")
    m.set_defaults(func=cmd_mix, parser=m)
    e = sub.add_parser("encode", help="a corpus's training text as the target's packed token stream")
    e.add_argument("--target", required=True, type=Path)
    e.add_argument("--corpus", required=True, type=Path)
    e.add_argument("--max-bytes", type=_positive("--max-bytes", int), default=8_000_000)
    e.set_defaults(func=cmd_encode, parser=e)
    r = sub.add_parser("run", help="the campaign: one pod, the shift, the operator's loop, the measurements")
    r.add_argument("--target", required=True, type=Path)
    r.add_argument("--head-a", required=True, type=Path, help="the head trained on workload A (served first)")
    r.add_argument("--head-b", required=True, type=Path, help="the offline reference head trained on workload B")
    r.add_argument("--corpus-a", required=True, type=Path, help="workload A's corpus (train.txt: its traffic)")
    r.add_argument(
        "--corpus-b", required=True, type=Path, help="workload B's corpus (train.txt traffic, heldout.txt measured)"
    )
    r.add_argument("--work", required=True, type=Path)
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--dtype", default="float32", help="SGLang --dtype ('' for the model's)")
    r.add_argument("--steps", type=_positive("--steps", int), default=5)
    r.add_argument("--clients", type=_positive("--clients", int), default=8)
    r.add_argument("--a-seconds", type=_non_negative("--a-seconds"), default=20.0)
    r.add_argument("--capture-seconds", type=_non_negative("--capture-seconds"), default=45.0)
    r.add_argument("--traffic-prompts", type=_positive("--traffic-prompts", int), default=4000)
    r.add_argument("--prompt-chars", type=_positive("--prompt-chars", int), default=1500)
    r.add_argument("--new-tokens", type=_positive("--new-tokens", int), default=64)
    r.add_argument("--candidate-minutes", type=_positive("--candidate-minutes"), default=1.0)
    r.add_argument("--train-args", type=_words, default=[], help="more flags for the train command (one string)")
    r.add_argument("--gate-args", type=_words, default=[], help="more flags for the gate command (one string)")
    r.add_argument("--min-ratio", type=_positive("--min-ratio"), default=1.02, help="training.minRatio (the gate)")
    r.add_argument(
        "--canary-min-ratio", type=_positive("--canary-min-ratio"), default=0.9, help="rollout.minAcceptRatio"
    )
    r.add_argument("--measure-prompts", type=_positive("--measure-prompts", int), default=8)
    r.add_argument("--measure-chars", type=_positive("--measure-chars", int), default=600)
    r.add_argument("--measure-tokens", type=_positive("--measure-tokens", int), default=128)
    r.add_argument("--rounds", type=_positive("--rounds", int), default=3)
    r.add_argument("--identity-prompts", type=_positive("--identity-prompts", int), default=4)
    r.add_argument("--tick-seconds", type=_positive("--tick-seconds"), default=3.0)
    r.add_argument("--outcome-timeout", type=_positive("--outcome-timeout"), default=360.0)
    r.add_argument("--mem-fraction", type=_positive("--mem-fraction"), default=0.3)
    r.add_argument("--deadline-s", type=_non_negative("--deadline-s"), default=0.0, help="0: none")
    r.set_defaults(func=cmd_run, parser=r)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    return int(a.func(a, a.parser))


if __name__ == "__main__":
    sys.exit(main())
