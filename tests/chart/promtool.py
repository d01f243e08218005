"""The real promtool (built from Go modules by tools/promtool/build.sh, cached by version) for the chart's tests.

Skipped where it is not built, unless SPECDECODE_REQUIRE_PROMTOOL=1 (``make test``, whose ``promtool`` target
builds it first), which turns that into a failure. A test run never starts the build: it outlasts a test timeout.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from functools import lru_cache

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "promtool" / "build.sh"


@lru_cache(maxsize=1)
def _located() -> tuple[str | None, str]:
    if os.environ.get("SPECDECODE_PROMTOOL"):
        return os.environ["SPECDECODE_PROMTOOL"], ""
    env = {**os.environ, "SPECDECODE_PROMTOOL_NO_BUILD": "1"}
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=60, env=env)
    if done.returncode != 0:
        return None, done.stderr.strip()[-500:]
    return str(pathlib.Path(done.stdout.strip().splitlines()[-1]) / "promtool"), ""


def promtool() -> str:
    path, why = _located()
    if path is None or not os.access(path, os.X_OK):
        if os.environ.get("SPECDECODE_REQUIRE_PROMTOOL") == "1":
            pytest.fail(f"promtool is required (SPECDECODE_REQUIRE_PROMTOOL=1): {why or path}")
        pytest.skip(f"promtool is not built (make promtool): {why or path}")
    return path


def run(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
