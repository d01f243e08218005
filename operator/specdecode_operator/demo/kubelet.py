"""A stand-in for the kubelet and the workload controllers, for the demo only.

On a real cluster the Deployment controller creates pods, the kubelet starts the runtime image and the
EndpointSlice controller publishes pod IPs. Here one thread does the same against the API emulator: for each
Deployment the operator owns it runs simulated runtime servers (``specdecode-runtime simulate``'s app) on loopback
addresses 127.0.0.N, writes Pod objects and the headless Service's EndpointSlice, and reports the Deployment's
status, so the operator and the tuner see what they would see on a cluster. A changed pod template (a Rollout)
restarts the simulated pods, which costs the scenario's restartSeconds of simulated time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from specdecode_runtime.contract.capabilities import step_candidates
from specdecode_runtime.contract.config import RuntimeConfig
from specdecode_runtime.contract.scenario import Scenario
from specdecode_runtime.simulate.engine import SimEngine
from specdecode_runtime.simulate.server import create_app

from ..render import names

log = logging.getLogger(__name__)


@dataclass
class SimPod:
    name: str
    ip: str
    engine: SimEngine
    runner: web.AppRunner
    config_hash: str


@dataclass
class KubeletState:
    pods: dict[str, list[SimPod]] = field(default_factory=dict)  # deployment name -> pods
    restarts: int = 0


class SimulatedKubelet:
    def __init__(
        self,
        api_client,
        namespace: str,
        scenario: Scenario,
        speed: float,
        token_dir: Path,
        *,
        first_ip: int = 10,
        poll_seconds: float = 0.25,
    ):
        self.api = api_client
        self.namespace = namespace
        self.scenario = scenario
        self.speed = speed
        self.token_dir = token_dir
        self.poll_seconds = poll_seconds
        self.state = KubeletState()
        self._next_ip = first_ip
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="sim-kubelet", daemon=True)
        self.errors: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SimulatedKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(15)

    def engines(self) -> list[SimEngine]:
        return [p.engine for pods in self.state.pods.values() for p in pods]

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            while not self._stop.is_set():
                try:
                    await asyncio.to_thread(self._observe)
                    await self._sync()
                except Exception as e:  # the demo keeps going; the error is shown at the end
                    log.warning("simulated kubelet: %s", e)
                    self.errors.append(str(e))
                await asyncio.sleep(self.poll_seconds)
        finally:
            for pods in self.state.pods.values():
                for pod in pods:
                    await pod.runner.cleanup()

    # ------------------------------------------------------------------ reading the API
    def _observe(self) -> None:
        from kubernetes import client

        apps, core = client.AppsV1Api(self.api), client.CoreV1Api(self.api)
        selector = f"app.kubernetes.io/managed-by={names.MANAGED_BY}"
        # the client's models type every field Optional; these are objects the API server returned in full
        listed: Any = apps.list_namespaced_deployment(self.namespace, label_selector=selector)
        self._deployments: list[Any] = listed.items
        self._configs = {}
        self._tokens = {}
        for dep in self._deployments:
            name = dep.metadata.labels["app.kubernetes.io/instance"]
            with contextlib.suppress(Exception):
                cm: Any = core.read_namespaced_config_map(names.config_map(name), self.namespace)
                self._configs[name] = RuntimeConfig.from_yaml(cm.data["runtime.yaml"])
            with contextlib.suppress(Exception):
                secret: Any = core.read_namespaced_secret(names.control_secret(name), self.namespace)
                self._tokens[name] = base64.b64decode(secret.data["token"]).decode()

    # ------------------------------------------------------------------ making it so
    async def _sync(self) -> None:
        for dep in self._deployments:
            name = dep.metadata.labels["app.kubernetes.io/instance"]
            cfg = self._configs.get(name)
            if cfg is None:
                continue
            config_hash = (dep.spec.template.metadata.annotations or {}).get(names.CONFIG_HASH_ANNOTATION, "")
            token_file = self.token_dir / name
            if name in self._tokens:
                token_file.write_text(self._tokens[name])
            pods = self.state.pods.setdefault(dep.metadata.name, [])
            for pod in pods:
                if pod.config_hash != config_hash:  # a rollout: new pod template -> restart with the new config
                    pod.engine.restart(self.scenario.restart_seconds)
                    pod.engine.set_step_table([(1, cfg.speculative.num_steps)])
                    pod.engine.set_candidates(step_candidates(cfg))
                    pod.config_hash = config_hash
                    self.state.restarts += 1
            while len(pods) < (dep.spec.replicas or 0):
                pods.append(await self._start_pod(dep, cfg, config_hash, token_file, len(pods)))
            while len(pods) > (dep.spec.replicas or 0):
                await pods.pop().runner.cleanup()
            await asyncio.to_thread(self._publish, dep, name, cfg, pods)

    async def _start_pod(self, dep, cfg: RuntimeConfig, config_hash: str, token_file: Path, index: int) -> SimPod:
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        engine = SimEngine(
            self.scenario, seed=(self.scenario.seed or 0) + index, draft_tp=cfg.draft.tensor_parallel_size
        )
        # exactly the tiers a real pod with this runtime.yaml captures and serves (steps 0 only in Live)
        app = create_app(engine, step_candidates(cfg), str(token_file), speed=self.speed, model=cfg.target.model)
        engine.set_step_table([(1, cfg.speculative.num_steps)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, ip, cfg.server.port).start()
        if cfg.server.control_port != cfg.server.port:
            await web.TCPSite(runner, ip, cfg.server.control_port).start()
        return SimPod(f"{dep.metadata.name}-{config_hash[:6]}-{index}", ip, engine, runner, config_hash)

    def _publish(self, dep, name: str, cfg: RuntimeConfig, pods: list[SimPod]) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        apps = client.AppsV1Api(self.api)
        discovery = client.DiscoveryV1Api(self.api)
        labels = dict(dep.spec.template.metadata.labels or {})
        for pod in pods:
            body: Any = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod.name,
                    "namespace": self.namespace,
                    "labels": labels,
                    "annotations": {"specdecode.io/simulated": "true"},
                },
                "spec": {"containers": [{"name": "runtime", "image": "simulated"}]},
            }
            status = {
                "status": {
                    "phase": "Running",
                    "podIP": pod.ip,
                    "podIPs": [{"ip": pod.ip}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            }
            try:
                core.read_namespaced_pod(pod.name, self.namespace)
            except client.ApiException as e:
                if e.status != 404:
                    raise
                core.create_namespaced_pod(self.namespace, body)
                core.patch_namespaced_pod_status(pod.name, self.namespace, status)
        ports = [
            {"name": "http", "port": cfg.server.port, "protocol": "TCP"},
            {"name": "control", "port": cfg.server.control_port, "protocol": "TCP"},
        ]
        slice_body: Any = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{names.headless_service(name)}-sim",
                "namespace": self.namespace,
                "labels": {
                    "kubernetes.io/service-name": names.headless_service(name),
                    "endpointslice.kubernetes.io/managed-by": "specdecode-demo-kubelet",
                },
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [p.ip],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "name": p.name, "namespace": self.namespace},
                }
                for p in pods
            ],
            "ports": ports,
        }
        try:
            discovery.create_namespaced_endpoint_slice(self.namespace, slice_body)
        except client.ApiException as e:
            if e.status != 409:
                raise
            discovery.patch_namespaced_endpoint_slice(slice_body["metadata"]["name"], self.namespace, slice_body)
        n = len(pods)
        apps.patch_namespaced_deployment_status(
            dep.metadata.name,
            self.namespace,
            {
                "status": {
                    "observedGeneration": dep.metadata.generation,
                    "replicas": n,
                    "readyReplicas": n,
                    "updatedReplicas": n,
                    "availableReplicas": n,
                    "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}],
                }
            },
        )
