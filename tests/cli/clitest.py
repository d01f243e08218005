"""Running both CLIs as a user does (subprocesses), with the checks every bad-input test makes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pcie8-glm5-eagle3.yaml"
NVLINK_EXAMPLE = ROOT / "examples" / "h200-nvlink-rollout.yaml"
SEED = ROOT / "bench" / "scenarios" / "pcie8-seed.yaml"
RUNTIME_EXAMPLE = ROOT / "examples" / "runtime" / "pcie8-glm5-eagle3.runtime.yaml"


def specdecode(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120):
    return _run("specdecode_operator.cli", args, stdin, env, timeout)


def runtime(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120):
    return _run("specdecode_runtime", args, stdin, env, timeout)


def _run(module: str, args, stdin, env, timeout):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=timeout,
        env=full_env,
    )


def refused(r, *fragments: str) -> str:
    """Exit 2, no traceback, and every fragment in stderr; returns stderr."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    for f in fragments:
        assert f in r.stderr, (f, r.stderr)
    return r.stderr


def deep_yaml(depth: int = 5000) -> str:
    return "a: " + "[" * depth + "]" * depth + "\n"
