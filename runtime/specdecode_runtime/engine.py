"""Engine-side wiring inside each SGLang scheduler process: metrics, live step control and the NCCL preflight.

SGLang runs one scheduler process per TP rank; :func:`specdecode_runtime.scheduler_process.bootstrap_from_env` builds one
:class:`EngineRuntime` per process and registers its methods on the patch's hook points:

* **worker ready** (wrapped ``EAGLEWorkerV2.init_cuda_graphs``, every rank, after every tier is captured and before
  the event loop): the :class:`~specdecode_runtime.control.StepControlChannel` on every rank; the NCCL preflight
  over the TP group (every rank, it is a sequence of collectives); the draft swap's
  :class:`~specdecode_runtime.draft_swap.DraftSwapper` (every rank: the served draft's identity from rank 0); on TP
  rank 0 only, :class:`SpecMetrics` and the control HTTP server (the only place a PUT or a draft POST is accepted).
* **iteration** (wrapped ``Scheduler.ingest_requests``): ``channel.step(iteration)``. SGLang's docstring calls
  ``ingest_requests`` "the one place a new per-iteration input source belongs": every TP rank calls it exactly
  once per scheduler-loop pass, in the same order (it broadcasts the received requests from rank 0), on the host,
  outside any CUDA graph, before the batch of that pass is chosen and launched. A table therefore takes effect at
  the same iteration, hence on the same batch, on every rank. A draft swap arrives in the same exchange and settles
  at a later exchange iteration on every rank alike (:mod:`specdecode_runtime.draft_swap`).
* **step control** (wrapped ``EAGLEWorkerV2.activate_step_by_batch``): the step table's entry for the batch size;
  the patch swaps SGLang's pre-captured tier when it differs from the running one.
* **verify** (wrapped ``EAGLEWorkerV2.on_verify_complete_cpu``): one ``record_cycle`` per decode verify on rank 0,
  from ``num_correct_drafts_per_req`` that SGLang has already copied to the CPU.
* **finished request** (wrapped ``SchedulerOutputStreamer._stream_output_generation``, only where runtime.yaml has
  a ``capture`` section): on rank 0, the request is offered to the traffic capture's writer
  (:mod:`specdecode_runtime.capture`), which samples it and queues it without waiting.

Phase times are host-side ``perf_counter`` stamps (:class:`~specdecode_runtime.sglang_patch.cycle_clock.CycleClock`),
never a CUDA synchronize. What they mean under SGLang's overlap scheduler is documented there and in docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from . import cost_probe, preflight
from .capture import CaptureSettings, CaptureWriter
from .contract.capabilities import step_candidates
from .contract.config import CostProbeConfig
from .contract.derived import is_split_draft, live
from .contract.draft_swap import DraftIdentity
from .contract.http_limits import SERVER_LIMITS
from .contract.step_table import StepTable
from .control import StepControlChannel, create_control_app
from .draft_swap import DraftRequests, DraftSwapper
from .sglang_patch import engine_hooks as sp
from .sglang_patch import finished_requests, plain_decode, plain_graphs
from .sglang_patch import process_state as sp_state
from .sglang_patch.apply import install_capture_hook
from .sglang_patch.cost_runner import SGLangStageRunner, sync_for
from .sglang_patch.draft_swap import SGLangDraftTarget
from .sglang_patch.prefill_probe import PrefillProbe, cuda_events

log = logging.getLogger("specdecode.engine")

# A table submitted on rank 0 travels in the next exchange; exchanging every 4th iteration costs one small gloo
# broadcast per 4 loop passes and delays a PUT by at most 4 passes (a few decode cycles).
DEFAULT_EXCHANGE_EVERY = 4


@dataclass(frozen=True)
class EngineSettings:
    """What a scheduler process needs from runtime.yaml (plain data: built once per process, no pydantic)."""

    num_steps: int
    captured: tuple[int, ...]  # step tiers SGLang captured; the only values a table may use
    live: bool
    buckets: tuple[int, ...]
    draft_tp: int
    control_port: int | None  # None: no endpoint; 0: any free port (tests)
    token_file: str | None
    preflight: bool = True
    host: str = "0.0.0.0"
    exchange_every: int = DEFAULT_EXCHANGE_EVERY
    preflight_iterations: int = 200
    cost_probe: bool = True  # start-up cost probe through SGLang's forwards (sglang_patch.cost_runner)
    cost_budget_ms: float = 2.0  # time budget per probe point
    capture: CaptureSettings | None = None  # traffic capture (rank 0); None: no hook, no writer, no series

    @classmethod
    def from_runtime_config(cls, cfg: Any) -> EngineSettings:
        probe = getattr(cfg, "cost_probe", None) or CostProbeConfig()
        return cls(
            num_steps=int(cfg.speculative.num_steps),
            captured=tuple(step_candidates(cfg)),
            live=live(cfg),
            buckets=tuple(cfg.server.buckets),
            draft_tp=int(cfg.draft.tensor_parallel_size),
            control_port=int(cfg.server.control_port),
            token_file=cfg.server.token_file,
            preflight=cfg.nccl.preflight is not False,
            cost_probe=probe.enabled,
            cost_budget_ms=float(probe.budget_ms),
            capture=CaptureSettings.from_config(cfg.capture) if getattr(cfg, "capture", None) else None,
        )


@dataclass
class ControlServer:
    """The aiohttp step endpoint on its own event loop in a daemon thread (SGLang's scheduler loop is synchronous
    and must never wait for HTTP)."""

    app: Any
    host: str
    port: int
    loop: Any = None
    runner: Any = None
    thread: threading.Thread | None = None
    bound_port: int | None = None
    error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> ControlServer:
        from aiohttp import web

        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                self.runner = web.AppRunner(self.app, access_log=None, **SERVER_LIMITS)
                loop.run_until_complete(self.runner.setup())
                site = web.TCPSite(self.runner, self.host, self.port)
                loop.run_until_complete(site.start())
                addrs = self.runner.addresses
                self.bound_port = int(addrs[0][1]) if addrs else self.port
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                self.error = e
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.runner.cleanup())
            loop.close()

        self.thread = threading.Thread(target=serve, name="specdecode-control", daemon=True)
        self.thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"control server did not start on {self.host}:{self.port} within {timeout}s")
        if self.error is not None:
            raise RuntimeError(f"control server on {self.host}:{self.port}: {self.error}") from self.error
        return self

    def stop(self) -> None:
        if self.loop is not None and self.thread is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


def _rank0_decides(group, src: int) -> Callable[[bool], bool]:
    """``agree`` for the cost probe: TP rank 0's "take another sample?" broadcast over the (gloo) TP group, so every
    rank launches a stage the same number of times and the stage's collectives line up."""
    import torch
    import torch.distributed as dist

    def agree(more: bool) -> bool:
        flag = torch.tensor([1 if more else 0], dtype=torch.int32)
        dist.broadcast(flag, src=src, group=group)
        return bool(flag.item())

    return agree


@dataclass
class EngineRuntime:
    """One per scheduler process. ``start`` on every rank once the worker is ready; the other methods are the
    hook callbacks (cheap when there is nothing to do)."""

    settings: EngineSettings
    channel: Any = None  # StepControlChannel
    metrics: Any = None  # SpecMetrics, TP rank 0 only
    server: ControlServer | None = None
    iteration: int = 0
    preflight_results: list = field(default_factory=list)
    tp_rank: int | None = None
    _shown: Any = None  # the table last published on specdecode_num_steps
    cost_runner: Any = None  # cost_probe.RunStep replaying one captured stage; None: no start-up cost probe
    cost_sync: Any = None  # waits for the stage's device work; None: cost_probe's default
    cost_points: list = field(default_factory=list)
    draft_target: Any = None  # draft_swap.DraftTarget of this rank (from the worker); None: no draft swaps
    draft_swap: Any = None  # draft_swap.DraftSwapper, every rank, when draft_target is set
    capture: CaptureWriter | None = None  # TP rank 0 with settings.capture

    # ---- start-up ----------------------------------------------------------------------------------------------
    def start(
        self,
        *,
        tp_rank: int,
        tp_size: int,
        cpu_group=None,
        src: int = 0,
        device_group=None,
        device=None,
        registry=None,
        serve: bool = True,
    ) -> EngineRuntime:
        """Every rank, same order. ``cpu_group`` carries the step tables (gloo: SGLang's TP ``cpu_group``);
        ``device_group`` is timed by the preflight (SGLang's TP ``device_group``, NCCL on GPUs)."""
        s = self.settings
        self.tp_rank = tp_rank
        self.channel = StepControlChannel(
            group=cpu_group,
            src=src,
            lead=0,
            every=s.exchange_every,
            initial=StepTable.single(s.num_steps),
            candidates=s.captured,
        )
        if tp_rank == 0:
            from prometheus_client import CollectorRegistry

            from .metrics import SpecMetrics

            # A private registry: under PROMETHEUS_MULTIPROC_DIR the values live in the shared files whatever the
            # registry, and SGLang's /metrics reads those files (MultiProcessCollector), not this process.
            self.metrics = SpecMetrics(
                registry=registry if registry is not None else CollectorRegistry(),
                buckets=s.buckets,
                capture=s.capture is not None,
            )
            self.metrics.set_candidates(s.captured)
            self.metrics.set_draft_tp(s.draft_tp)
            self._publish(self.channel.table)
            if finished_requests.hook_installed():  # with a capture section only: the pod log shows which
                log.info("specdecode: %s", finished_requests.INSTALLED)
            if s.capture is not None:
                try:
                    self.capture = CaptureWriter(
                        s.capture, on_result=self.metrics.record_capture, on_bytes=self.metrics.set_capture_bytes
                    ).start()
                except OSError as exc:  # an unwritable capture volume: serve, capture nothing, say why
                    log.error("specdecode: traffic capture off: %s: %s", s.capture.directory, exc)
        if self.draft_target is not None:  # every rank (one broadcast of the served draft's identity)
            self._start_draft_swap(tp_rank, cpu_group, src)
        if s.preflight and tp_size > 1:
            self.preflight_results = preflight.run_preflight(
                group=device_group,
                device=device,
                src=src,
                iterations=s.preflight_iterations,
                warmup=max(s.preflight_iterations // 10, 1),
            )
            if self.metrics is not None:
                preflight.export(self.preflight_results, self.metrics)
                log.info("specdecode: NCCL preflight (us): %s", preflight.summary(self.preflight_results))
        if self.cost_runner is not None:  # every rank, same order: a stage replay may hold collectives
            self.cost_points = cost_probe.probe_at_start(
                self.cost_runner,
                s.captured,
                s.buckets,
                self.metrics,
                split_draft=is_split_draft(s.draft_tp, tp_size),
                sync=self.cost_sync,
                budget_s=s.cost_budget_ms / 1000.0,
                agree=_rank0_decides(cpu_group, src) if tp_size > 1 else None,
            )
        if tp_rank == 0 and serve and s.control_port is not None:
            draft = self.draft_swap.requests if self.draft_swap is not None else None
            app = create_control_app(self.channel, s.token_file, draft=draft)
            self.server = ControlServer(app, s.host, s.control_port)
            self.server.start()
            log.info(
                "specdecode: step control on %s:%s (captured tiers %s)",
                s.host,
                self.server.bound_port,
                list(s.captured),
            )
        return self

    def _start_draft_swap(self, tp_rank: int, cpu_group, src: int) -> None:
        target = self.draft_target
        requests = DraftRequests(DraftIdentity(target.source, None)) if tp_rank == 0 else None
        self.draft_swap = DraftSwapper(
            target,
            source=target.source,
            is_src=tp_rank == 0,
            rank=tp_rank,
            group=cpu_group,
            src=src,
            requests=requests,
            metrics=self.metrics,
        ).start()
        self.channel.draft = requests

    def on_worker_ready(self, worker: Any) -> None:
        """Hook for the wrapped ``EAGLEWorkerV2.init_cuda_graphs``: SGLang's TP group from its runtime context."""
        import torch
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        tp = par.tp_group
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        captured_plain = None
        if 0 in self.settings.captured and plain_decode.enabled:  # every rank: the capture's collectives line up
            captured_plain = plain_graphs.capture(worker)
        if self.settings.cost_probe and self.cost_runner is None:
            try:
                self.cost_runner, self.cost_sync = SGLangStageRunner(worker), sync_for(worker)
            except AttributeError as exc:  # a worker without the EAGLEWorkerV2 layout: serve without a probe
                log.warning("specdecode: no start-up cost probe for %s: %s", type(worker).__name__, exc)
        if self.draft_target is None:  # every rank: the swap's collectives line up whether or not it holds the draft
            self.draft_target = SGLangDraftTarget(worker)
        self.start(
            tp_rank=par.tp_rank,
            tp_size=par.tp_size,
            cpu_group=tp.cpu_group,
            src=tp.ranks[0],
            device_group=tp.device_group,
            device=device,
        )
        if self.metrics is not None:
            plain_decode.on_catch_up = self.metrics.record_catch_up
            sp_state.prefill_probe = PrefillProbe(
                self.metrics.record_prefill_phase, self.metrics.record_prefill_batch, device_events=cuda_events()
            )
            if captured_plain is not None:
                self.metrics.set_plain_graphs(captured_plain.seconds, captured_plain.nbytes)

    # ---- per iteration / per batch / per verify -----------------------------------------------------------------
    def on_iteration(self) -> None:
        if self.channel is None:
            return
        self.iteration += 1
        table = self.channel.step(self.iteration)
        if table is not self._shown and self.metrics is not None:
            self._publish(table)
        if self.draft_swap is not None:  # every rank, the same iterations: a swap arrives and settles in exchanges
            due = self.channel.take_draft_request()
            if due is not None:
                self.draft_swap.begin(*due)
            if self.iteration % self.channel.every == 0:
                self.draft_swap.poll()

    def steps_for_batch(self, batch_size: int) -> int | None:
        table = self.channel.table if self.channel is not None else None
        return table.lookup(batch_size) if table is not None else None

    def on_verify(
        self, accepted_per_req: Sequence[int], batch_size: int, steps: int, phase_seconds: Mapping[str, float]
    ) -> None:
        if self.metrics is not None:
            self.metrics.record_cycle(batch_size, steps, accepted_per_req, phase_seconds)

    def on_finished(self, req: Any) -> None:
        """Hook for a finished request (only installed with ``capture``): offered to the capture on rank 0."""
        capture = self.capture
        if capture is None:
            return
        draft = self.draft_swap.requests.identity if self.draft_swap is not None and self.draft_swap.requests else None

        def build() -> dict[str, Any]:
            record = finished_requests.record_of(req)
            if draft is not None:
                record["draft"] = draft.to_json()
            return record

        capture.offer(build)

    def _publish(self, table) -> None:
        self._shown = table
        if table is not None:
            self.metrics.set_steps(table.lookup)

    # ---- hook registration ---------------------------------------------------------------------------------------
    def install(self) -> None:
        sp.set_worker_ready_callback(self.on_worker_ready)
        sp.set_iteration_callback(self.on_iteration)
        sp.set_step_control(self.steps_for_batch)
        sp.set_verify_callback(self.on_verify)
        if self.settings.capture is not None:
            install_capture_hook()
            finished_requests.set_finished_callback(self.on_finished)

    def stop(self) -> None:
        if self.capture is not None:
            self.capture.close()
            self.capture = None
        if self.server is not None:
            self.server.stop()
            self.server = None
