"""The real, pinned SGLang on the CPU: tiny models made on the fly, engines run in a host process of their own
(``specdecode_runtime.cpu.host``: SGLang's shutdown kills every child of the process that started the engine, so
that must never be pytest). Everything here is session-scoped: the models are written once, and each host
process serves a whole list of engine runs, so SGLang is imported once per list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
if str(RUNTIME) not in sys.path:
    sys.path.insert(0, str(RUNTIME))

# Token ids (1 = <s>) of the prompts every run generates from; greedy, EOS ignored.
PROMPTS = [[1, 5, 9, 100, 33, 7, 81, 12, 44], [1, 200, 17, 3, 99, 150, 61, 8, 23]]
MAX_NEW_TOKENS = 16
HOST_TIMEOUT_S = float(os.environ.get("SPECDECODE_E2E_TIMEOUT", "420"))


def sglang_required() -> None:
    from specdecode_runtime.sglang_patch import installed_sglang_version

    if installed_sglang_version() is None:
        if os.environ.get("SPECDECODE_REQUIRE_SGLANG"):
            pytest.fail("SPECDECODE_REQUIRE_SGLANG is set but sglang is not installed")
        pytest.skip("sglang is not installed and SPECDECODE_REQUIRE_SGLANG is unset")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Target (default tiny shape) plus random and agreeing EAGLE / EAGLE-3 drafts."""
    sglang_required()
    from specdecode_runtime.cpu.tiny_models import make_tiny_models

    return make_tiny_models(tmp_path_factory.mktemp("tiny-models"), seed=0)


def run_host(runs: list[dict], timeout: float = HOST_TIMEOUT_S) -> dict[str, dict]:
    """Run ``runs`` in one ``specdecode_runtime.cpu.host`` process; {name: result}. A run that did not report
    (the host was killed, or timed out) maps to {"error": ...} with the host's stderr tail."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(RUNTIME), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "specdecode_runtime.cpu.host"],
            input=json.dumps({"runs": runs}),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = (
            e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        ) + f"\nhost timed out after {timeout:.0f} s"
    results: dict[str, dict] = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            obj = json.loads(line)
            if "name" in obj:
                results[obj["name"]] = obj
    for run in runs:
        results.setdefault(run["name"], {"name": run["name"], "error": f"no result; host stderr:\n{stderr[-4000:]}"})
    return results


def result_of(results: dict[str, dict], name: str) -> dict:
    r = results[name]
    assert "error" not in r, f"{name}: {r['error']}\n{r.get('traceback', '')}"
    return r


def first_divergence(a: list[list[int]], b: list[list[int]]) -> str:
    for p, (x, y) in enumerate(zip(a, b)):
        for i, (u, v) in enumerate(zip(x, y)):
            if u != v:
                return f"prompt {p}, token {i}: {u} != {v}"
        if len(x) != len(y):
            return f"prompt {p}: lengths {len(x)} != {len(y)}"
    return "equal"


# name -> (tp, algorithm, draft ("agree" / "random"), steps, topk)
STOCK_RUNS = {
    "nospec-tp1": (1, None, None, 0, 0),
    "nospec-tp2": (2, None, None, 0, 0),
    "eagle-s1-k1": (1, "EAGLE", "agree", 1, 1),
    "eagle-s3-k1": (1, "EAGLE", "agree", 3, 1),
    "eagle-s3-k2": (1, "EAGLE", "agree", 3, 2),
    "eagle-random-s3-k1": (1, "EAGLE", "random", 3, 1),
    "eagle3-s1-k1": (1, "EAGLE3", "agree", 1, 1),
    "eagle3-s3-k2": (1, "EAGLE3", "agree", 3, 2),
}


@pytest.fixture(scope="session")
def stock(tiny_models):
    """Every stock run, in one host process (SGLang imported once for all of them)."""
    runs = []
    for name, (tp, algorithm, draft, steps, topk) in STOCK_RUNS.items():
        run = {
            "name": name,
            "model_dir": tiny_models.target,
            "tp": tp,
            "prompts": PROMPTS,
            "max_new_tokens": MAX_NEW_TOKENS,
        }
        if algorithm:
            run.update(
                algorithm=algorithm, draft_dir=tiny_models.draft(algorithm, draft == "agree"), steps=steps, topk=topk
            )
        runs.append(run)
    return run_host(runs)
