"""Paths to the real kubectl and helm binaries (pinned; fetched once into the user cache by envtest/fetch-tools.sh)."""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
FETCH = ROOT / "envtest" / "fetch-tools.sh"


@functools.cache
def tools_dir() -> pathlib.Path:
    """The directory holding kubectl and helm; the script reuses its cache, so this is cheap after the first run."""
    done = subprocess.run([str(FETCH)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{FETCH} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    path = pathlib.Path(done.stdout.strip().splitlines()[-1])
    if not (os.access(path / "kubectl", os.X_OK) and os.access(path / "helm", os.X_OK)):
        raise RuntimeError(f"{FETCH} printed {path}, which lacks kubectl or helm")
    return path


def kubectl() -> str:
    return str(tools_dir() / "kubectl")


def helm() -> str:
    return str(tools_dir() / "helm")


def run(
    tool: str,
    *args: str,
    kubeconfig: str | os.PathLike | None = None,
    input: str | None = None,
    timeout: float = 120,
    check: bool = True,
    home: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run kubectl or helm with a private kubeconfig (never the user's) and, for helm, private cache/config dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "HELM_"))}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    if home is not None:
        for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
            env[var] = str(pathlib.Path(home) / sub)
    binary = {"kubectl": kubectl, "helm": helm}[tool]()
    done = subprocess.run([binary, *args], capture_output=True, text=True, input=input, timeout=timeout, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done
