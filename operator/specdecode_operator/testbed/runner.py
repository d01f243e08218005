"""Run the emulator and the kopf operator each in its own thread and event loop.

kopf in its own thread starts in milliseconds and stops in milliseconds; on the test's loop its shutdown waits 5 s
for tasks it does not own (toolchain.md §1). The emulator gets its own thread too, so callers can use the ordinary
synchronous kubernetes client against it, exactly as against a real cluster.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

import kmock

from specdecode_operator.api.crd import crd as generated

from .emulator import ApiServerEmulator


def standard_emulator(
    crd: dict | None = None, *, admission: bool = True, keep_history: bool = True
) -> ApiServerEmulator:
    """An emulator serving the built-in kinds, LeaderWorkerSet/ServiceMonitor/kopf peering and our CRD."""
    if crd is None:
        crd = generated()
    emulator = ApiServerEmulator(keep_history=keep_history)
    emulator.declare_builtins()
    emulator.declare_third_party()
    emulator.install_crd(crd, admission=admission)
    return emulator


class EmulatorServer:
    """The emulator behind a real HTTP port on 127.0.0.1, served from a background thread."""

    def __init__(self, emulator: ApiServerEmulator | None = None):
        self.emulator = emulator if emulator is not None else standard_emulator()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="k8s-emulator", daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.emulator, kmock.Server(self.emulator) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the emulator's loop (state changes from tests must not race its handlers)."""

        async def run():
            return fn()

        if self._loop is None:
            raise RuntimeError("the emulator is not running")
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def __enter__(self) -> EmulatorServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the API emulator did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


class OperatorThread:
    """kopf.operator() with our registry in a daemon thread; a context manager that waits until it is ready."""

    def __init__(self, config, *, clusterwide: bool | None = None, standalone: bool | None = None):
        from specdecode_operator.context import OperatorContext
        from specdecode_operator.registry import make_registry

        self.config = config
        self.context = OperatorContext(config)  # its client, metrics and reconciler, for tests and benchmarks
        self.registry = make_registry(self.context)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.error: BaseException | None = None
        namespaces = list(config.namespaces)
        self._kwargs = dict(
            registry=self.registry,
            clusterwide=not namespaces if clusterwide is None else clusterwide,
            namespaces=namespaces,
            standalone=config.standalone if standalone is None else standalone,
            priority=config.priority,
            liveness_endpoint=config.liveness_endpoint,
            stop_flag=self._stop,
            ready_flag=self._ready,
        )
        if not self._kwargs["standalone"]:
            self._kwargs["peering_name"] = config.peering_name
        self._thread = threading.Thread(target=self._main, name="kopf-operator", daemon=True)

    def _main(self) -> None:
        import kopf

        try:
            asyncio.run(kopf.operator(**self._kwargs))
        except BaseException as e:  # reported to the test through .error
            self.error = e

    def __enter__(self) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError(f"the operator did not become ready: {self.error!r}")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.context.stopping.set()  # before kopf's stop flag: no new work is queued during the shutdown
        self._stop.set()
        self._thread.join(15)
