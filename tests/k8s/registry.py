"""A real OCI registry on loopback for the chart release tests: the CNCF distribution registry, built from Go modules
by envtest/registry/build.sh (cached by version, as kube-apiserver is), storing into a temporary directory.

``make test`` builds it first (``make registry``); a test run only reuses the binary: with no binary the tests that
need it skip, or fail under SPECDECODE_REQUIRE_ENVTEST=1, as the API server's do.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
import urllib.error
import urllib.request

from .envtest import _die_with_parent, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "envtest" / "registry" / "build.sh"
READY_SECONDS = 30  # the registry answers /v2/ within a second of starting; the rest is slack for a loaded machine


class RegistryUnavailable(RuntimeError):
    """The registry binary is not built (or cannot be)."""


def binary(*, build: bool = False) -> pathlib.Path:
    env = dict(os.environ)
    if not build:
        env["SPECDECODE_REGISTRY_NO_BUILD"] = "1"
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=3600, env=env)
    if done.returncode != 0:
        raise RegistryUnavailable(f"{BUILD} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    path = pathlib.Path(done.stdout.strip().splitlines()[-1]) / "registry"
    if not os.access(path, os.X_OK):
        raise RegistryUnavailable(f"{path} is missing or not executable")
    return path


class Registry:
    """``registry serve`` on 127.0.0.1:<free port>, plain HTTP (loopback only), filesystem storage under ``workdir``."""

    def __init__(self, workdir: str | os.PathLike):
        self.workdir = pathlib.Path(workdir)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"oci://{self.host}/charts"

    def start(self) -> Registry:
        exe = binary()
        config = self.workdir / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.workdir / 'data'}}}}}\n"
            f"http: {{addr: '{self.host}'}}\n"
        )
        self.log = open(self.workdir / "registry.log", "wb")
        self.process = subprocess.Popen(
            [str(exe), "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.workdir / "registry.log").read_text(errors="replace")[-2000:]
                raise RegistryUnavailable(
                    f"registry on {self.host} did not answer /v2/ within {READY_SECONDS} s: {tail}"
                )
            time.sleep(0.1)

    def tags(self, repository: str) -> list[str]:
        """The tags the registry holds for ``repository`` (the distribution API, not helm)."""
        with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=10) as answer:
            return sorted(json.loads(answer.read(1 << 20))["tags"])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if getattr(self, "log", None):
            self.log.close()
