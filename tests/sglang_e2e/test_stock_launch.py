"""``specdecode-runtime launch`` with ``device: cpu`` serves real SGLang: the HTTP server answers /generate with
the tokens the engine gives without speculation, and /metrics carries the runtime's acceptance counters, equal to
the counts SGLang itself reports for the request.

Without ``capture`` in runtime.yaml (spec.draft.adaptation off, the default) the same engine captures nothing: no
capture file anywhere, SGLang's output path is not wrapped (TP rank 0 logs the hook whenever it finds it installed)
and /metrics has no capture series, after requests were served.

One engine for the module: the launch test empties the radix cache and reads what its own request added to the
counters, so it holds in either order."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from conftest import MAX_NEW_TOKENS, PROMPTS, RUNTIME, result_of

from specdecode_runtime.sglang_patch.finished_requests import INSTALLED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test also starts every engine it needs
STARTUP_TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback
        return r.read(1 << 20)


def _post(url: str, body: dict, timeout: float = 60) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback
        return json.loads(r.read(1 << 20))


def _series(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}(\{{[^}}]*\}})?\s+([0-9.eE+-]+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


@contextlib.contextmanager
def launched(work, port: int, extra: list[str] = (), poll_s: float = 0.5):
    """``specdecode-runtime launch`` of ``work/runtime.yaml`` in a session of its own (SGLang's shutdown kills the
    whole process tree of the server process), until ``/health`` answers 200 (refused while starting, 503 while the
    warm-up runs); yields the base URL and stops the tree afterwards."""
    env = dict(
        os.environ,
        PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"),
        SPECDECODE_STATE_DIR=str(work / "state"),
        PYTHONPATH=os.pathsep.join([str(RUNTIME), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        # the stop below signals the whole tree, so the server sees its scheduler die first and takes the crash path:
        # without these, it sleeps 5 s "to let GPU activity settle" before py-spy / CUDA dumps (no GPU here)
        SGLANG_PYSPY_DUMP_BEFORE_CRASH="0",
        SGLANG_CUDA_COREDUMP_BEFORE_CRASH="0",
    )
    log = open(work / "launch.log", "wb")
    args = [sys.executable, "-m", "specdecode_runtime", "launch", "--config", str(work / "runtime.yaml")]
    proc = subprocess.Popen(
        [*args, *(["--", *extra] if extra else [])],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"launch exited with {proc.returncode}:\n{(work / 'launch.log').read_text()[-4000:]}")
            try:
                _get(base + "/health")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"server not healthy after {STARTUP_TIMEOUT_S} s:\n{(work / 'launch.log').read_text()[-4000:]}"
                    )
                time.sleep(poll_s)
        yield base
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
        log.close()


def write_runtime(work, name: str, models, speculative: str, extra: str = "") -> tuple[int, int]:
    """A one-rank CPU ``runtime.yaml`` (the tiny target with its agreeing EAGLE head, ``speculative`` as a YAML
    flow mapping, ``extra`` top-level lines after it) and its control token in ``work``: the server and control
    ports it names."""
    port, control = _free_port(), _free_port()
    (work / "token").write_text("t0ken\n")
    (work / "runtime.yaml").write_text(f"""\
apiVersion: specdecode.io/runtime/v1
name: {name}
device: cpu
target: {{model: {models.target}, tensorParallelSize: 1}}
draft: {{model: {models.eagle_agree}, algorithm: EAGLE, tensorParallelSize: 1}}
speculative: {speculative}
nccl: {{profile: None, preflight: false}}
server: {{port: {port}, controlPort: {control}, tokenFile: {work / "token"}}}
topology: {{nodes: 1, gpusPerNode: 1}}
{extra}""")
    return port, control


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory):
    work = tmp_path_factory.mktemp("cpu-launch")
    port, _ = write_runtime(work, "cpu-launch", tiny_models, "{numSteps: 3, eagleTopK: 1, candidateSteps: [3]}")
    assert "capture" not in yaml.safe_load((work / "runtime.yaml").read_text())
    with launched(work, port, ["--skip-server-warmup"], poll_s=2.0) as base:
        yield base, work


def _totals(metrics: str, names: tuple[str, ...]) -> dict[str, float]:
    return {name: sum(_series(metrics, name).values()) for name in names}


def _host_series(metrics: str) -> dict[str, float]:
    return {k: v for k, v in _series(metrics, "specdecode_prefill_phase_seconds_total").items() if 'clock="host"' in k}


COUNTERS = (
    "specdecode_verify_cycles_total",
    "specdecode_position_accepted_total",
    "specdecode_prefill_batches_total",
    "specdecode_prefill_requests_total",
    "specdecode_prefill_tokens_total",
)


def test_launch_serves_the_engine_tokens(served, stock):
    base, _ = served
    # the radix cache empty, as the engine started (the module's other test serves these prompts too)
    flush = urllib.request.Request(base + "/flush_cache", method="POST")
    with urllib.request.urlopen(flush, timeout=30) as r:  # noqa: S310 - loopback
        assert r.status == 200
    before = _get(base + "/metrics").decode()
    out = _post(
        base + "/generate",
        {
            "input_ids": PROMPTS[0],
            "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
        },
    )
    assert out["output_ids"] == result_of(stock, "nospec-tp1")["tokens"][0]
    meta = out["meta_info"]
    assert meta["spec_verify_ct"] > 0

    metrics = _get(base + "/metrics").decode()
    was, now = _totals(before, COUNTERS), _totals(metrics, COUNTERS)
    added = {name: now[name] - was[name] for name in COUNTERS}
    cycles = added["specdecode_verify_cycles_total"]
    accepted = added["specdecode_position_accepted_total"]
    # the only request served between the two scrapes: what the runtime's counters added is SGLang's own counts for it
    assert cycles == meta["spec_verify_ct"]
    assert accepted == meta["spec_num_correct_drafts"]
    assert accepted > 0

    # its prefill, split into parts by the prefill probe; each came alone (as did /health's one-token probes before)
    batches = added["specdecode_prefill_batches_total"]
    assert now["specdecode_prefill_batches_total"] >= batches >= 1
    assert added["specdecode_prefill_requests_total"] == batches
    assert now["specdecode_prefill_requests_total"] == now["specdecode_prefill_batches_total"]
    assert added["specdecode_prefill_tokens_total"] >= len(PROMPTS[0]) + batches - 1
    parts, parts_before = _host_series(metrics), _host_series(before)
    phase = {p: next(k for k in parts if f'phase="{p}"' in k) for p in ("launch", "target", "draft", "result")}
    host = {p: parts[k] - parts_before.get(k, 0.0) for p, k in phase.items()}
    assert all(v > 0 for v in host.values()), host
    # the target's and the draft's extends run inside the scheduler's launch of the batch
    assert host["target"] + host["draft"] <= host["launch"], host
    total = {p: parts[k] for p, k in phase.items()}
    assert total["target"] + total["draft"] <= total["launch"], total


def test_capture_off_writes_nothing_hooks_nothing_and_exports_nothing(served):
    base, work = served
    for prompt in PROMPTS:
        out = _post(
            base + "/generate",
            {
                "input_ids": prompt,
                "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
            },
        )
        assert len(out["output_ids"]) == MAX_NEW_TOKENS
    metrics = _get(base + "/metrics").decode()
    log = (work / "launch.log").read_text()
    assert "specdecode: step control on" in log  # TP rank 0's engine started: its hook report below is meaningful
    assert INSTALLED not in log
    assert "capturing finished requests" not in log
    assert not list(work.rglob("*.jsonl"))
    assert "specdecode_verify_cycles_total" in metrics  # the runtime's series are served ...
    assert "specdecode_capture" not in metrics  # ... the capture's are not, not even declared
