"""Binds :mod:`specdecode_runtime.draft_group` into SGLang 0.5.23: the EAGLE draft runs on a subset S of the
target's TP ranks and broadcasts its proposals.

Shape of the patch (SGLang's own code runs unchanged on every rank; only the draft worker differs):

* **Groups.** ``EAGLEWorkerV2.__init__`` (every TP rank) first creates, in one fixed order, the draft
  ``GroupCoordinator`` over S (singleton blocks for the other ranks) and the dedicated broadcast communicator over
  the target group (:class:`~specdecode_runtime.draft_group.DraftGroups`).
* **Layout, third case.** ``resolve_draft_parallel_layout`` (as bound in ``eagle_worker_v2``) returns
  ``DraftParallelLayout(tp_group=<draft group>, attn_tp_size=|S|)`` on S, so SGLang's own
  ``patch_tensor_parallel_group`` narrows tp/attn/moe sizes for the draft: draft weights load |S|-way sharded and
  the draft CUDA graphs are captured on S only.
* **Ranks outside S** get a :class:`RemoteDraftWorker` instead of ``EagleDraftWorker``: no weights, no draft KV
  pool, no draft graphs. Its ``draft()`` receives the broadcast and rebuilds its own verify input with SGLang's
  ``build_eagle_verify_input`` (so every rank fills its own target verify buffers); its draft-extend methods
  return shape-valid placeholders (the overlap FutureMap stores them; nothing reads them).
* **On S**, ``build_eagle_verify_input`` (as bound in ``eagle_worker_v2``) first broadcasts the raw proposals from
  S's leader, eagerly, between the draft graph replay and the verify-input build (never inside a graph).
* **Embedding / shared head.** ``EAGLEWorkerV2.alloc_memory_pool`` (every rank) all-gathers the target's
  vocab-sharded embedding and head once; ``EagleDraftWorker._resolve_shared_embed_and_head`` hands S its |S|-way
  shard of them.
* **No group-wide collective on S alone.** Draft construction, memory-pool allocation, backend and graph set-up run
  inside :func:`~specdecode_runtime.draft_group.draft_only_scope`: ``get_available_gpu_memory(distributed=True)``
  is answered locally there, and any other torch.distributed collective over a group reaching outside S raises at
  once instead of deadlocking.
* **Hooks for the engine wiring** (:mod:`specdecode_runtime.engine`, installed per scheduler process by
  :func:`bootstrap_from_env`): :func:`set_verify_callback` (per-position acceptance and host-side phase times,
  after each verify, on the CPU), :func:`set_step_control` (which pre-captured step tier to run),
  :func:`set_iteration_callback` (once per scheduler-loop pass on every rank, the step-table exchange) and
  :func:`set_worker_ready_callback` (start-up, after every tier is captured) — see their docstrings.

Every patch names the SGLang symbol it wraps (:data:`PATCH_POINTS`); :func:`apply_patches` installs them all and
returns a :class:`PatchSet` whose ``remove()`` restores every original binding. ``check_patch_points`` verifies
them against the installed SGLang without starting anything (``specdecode-runtime check-sglang``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from . import SGLANG_VERSION

logger = logging.getLogger("specdecode.sglang_patch")

CONFIG_ENV = "SPECDECODE_RUNTIME_CONFIG"
EW2 = "sglang.srt.speculative.eagle_worker_v2"


@dataclass(frozen=True)
class PatchPoint:
    """One SGLang symbol the runtime wraps, replaces or relies on, with the parameters it must have."""

    target: str  # dotted path of the binding we touch / read
    params: tuple[str, ...]  # expected parameter names, in order (empty: not a callable check)
    role: str  # "wrap", "rebind", "use", "hook"
    why: str
    origin: str | None = None  # where the object is defined, when ``target`` is an imported binding


PATCH_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(f"{EW2}.EAGLEWorkerV2.__init__", ("self", "server_args", "gpu_id", "nccl_port", "target_worker"),
               "wrap", "create the draft group and broadcast communicator on every rank; RemoteDraftWorker outside S"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.alloc_memory_pool",
               ("self", "memory_pool_config", "req_to_token_pool", "token_to_kv_pool_allocator"),
               "wrap", "all-gather the target's vocab-sharded embedding/head once, on every rank"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.forward_batch_generation",
               ("self", "batch", "on_publish", "grammar_barrier", "pp_proxy_tensors"),
               "wrap", "host timestamps of each decode cycle's launch, stamped on the returned result; runs "
               "unchanged otherwise (calls draft_worker.draft / _draft_extend_for_decode on every rank)"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.verify", ("self", "batch", "pp_proxy_tensors", "grammar_barrier"),
               "wrap", "host timestamps around the target verify launch, and the tier it ran with"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.init_cuda_graphs", ("self",),
               "wrap", "worker ready on every rank (tiers captured): step channel, preflight, rank-0 metrics/server"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.build_adaptive_runtime_state",
               ("self", "speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs"),
               "use", "captures one tier per candidate step at start-up (--speculative-adaptive)"),
    PatchPoint("sglang.srt.speculative.adaptive_runtime_state.AdaptiveController._activate",
               ("self", "speculative_num_steps"), "use", "pointer swap to a captured tier; raises if uncaptured"),
    PatchPoint("sglang.srt.speculative.adaptive_runtime_state.AdaptiveController.init_states",
               ("self", "cuda_graph_bs"), "use", "builds a SpecRuntimeState for every candidate step"),
    PatchPoint("sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams.__init__",
               ("self", "initial_steps", "cfg_path"), "use", "reads the adaptive config the launcher writes"),
    PatchPoint("sglang.srt.speculative.adaptive_spec_params._load_adaptive_config", ("cfg_path",), "use",
               "SGLang's loader/validator of that config (the launcher tests call it)"),
    PatchPoint("sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams.cuda_graph_bs_for_step",
               ("self", "step"), "use", "one slot keyed '1' captures every tier for every graph batch size"),
    PatchPoint("sglang.srt.managers.scheduler.Scheduler.ingest_requests", ("self", "stop_at_pause"), "wrap",
               "once per scheduler-loop pass on every TP rank, same order, on the host: step-table exchange"),
    PatchPoint("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
               "._resolve_spec_v2_tokens", ("self", "result", "batch"), "wrap",
               "hands the result's launch stamp to on_verify_complete_cpu, which SGLang calls from here"),
    PatchPoint("sglang.srt.managers.utils.GenerationBatchResult", (), "use",
               "a plain dataclass (no slots): carries the cycle stamp from launch to result processing"),
    PatchPoint("sglang.srt.utils.common.add_prometheus_middleware", ("app",), "use",
               "SGLang's /metrics: MultiProcessCollector over PROMETHEUS_MULTIPROC_DIR, so our series appear"),
    PatchPoint("sglang.srt.utils.common.set_prometheus_multiproc_dir", (), "use",
               "keeps a user-set PROMETHEUS_MULTIPROC_DIR (only adds an unused subdirectory)"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2._forward_prefill_batch",
               ("self", "batch", "on_publish", "pp_proxy_tensors", "coordination_plan"),
               "use", "runs unchanged; calls draft_worker._draft_extend_for_prefill on every rank"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.on_verify_complete_cpu", ("self", "num_correct_drafts_per_req", "batch_size"),
               "hook", "metrics hook: accepted drafts per request after each verify, already on the CPU; with step "
               "control installed SGLang's EMA controller is never fed"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.activate_step_by_batch", ("self", "batch_size"),
               "hook", "step-control hook: pick the pre-captured tier before each decode round, every rank"),
    PatchPoint(f"{EW2}.EAGLEWorkerV2.apply_runtime_state", ("self", "state"),
               "use", "pointer-swap to a pre-captured SpecRuntimeState (adaptive tiers)"),
    PatchPoint(f"{EW2}.EagleDraftWorker.__init__", ("self", "server_args", "gpu_id", "nccl_port", "target_worker"),
               "wrap", "draft model construction on S only, inside the draft-only guard"),
    PatchPoint(f"{EW2}.EagleDraftWorker.alloc_memory_pool",
               ("self", "memory_pool_config", "req_to_token_pool", "token_to_kv_pool_allocator"),
               "wrap", "draft KV pool on S only, inside the draft-only guard"),
    PatchPoint(f"{EW2}.EagleDraftWorker.init_attention_backends", ("self",), "wrap", "S only, guarded"),
    PatchPoint(f"{EW2}.EagleDraftWorker.init_cuda_graphs", ("self",), "wrap", "draft CUDA graphs on S only, guarded"),
    PatchPoint(f"{EW2}.EagleDraftWorker.init_attention_backend", ("self",), "wrap",
               "S only, guarded: also called per step tier by build_adaptive_runtime_state"),
    PatchPoint(f"{EW2}.EagleDraftWorker._capture_cuda_graphs", ("self",), "wrap",
               "S only, guarded: also called per step tier by build_adaptive_runtime_state"),
    PatchPoint(f"{EW2}.EagleDraftWorker._resolve_shared_embed_and_head", ("self",),
               "wrap", "S receives its |S|-way shard of the gathered target embedding/head"),
    PatchPoint(f"{EW2}.EagleDraftWorker.draft", ("self", "batch", "with_topology"),
               "use", "mirrored by RemoteDraftWorker.draft"),
    PatchPoint(f"{EW2}.EagleDraftWorker._draft_extend_for_decode", ("self", "batch", "batch_result", "kv_loc_plan"),
               "use", "mirrored by RemoteDraftWorker (placeholders)"),
    PatchPoint(f"{EW2}.EagleDraftWorker._draft_extend_for_prefill",
               ("self", "batch", "target_hidden_states", "next_token_ids", "mm_input_embeds", "kv_loc_plan"),
               "use", "mirrored by RemoteDraftWorker (placeholders)"),
    PatchPoint(f"{EW2}.EagleDraftWorker", (), "rebind", "EAGLEWorkerV2.__init__ builds its draft worker by this name"),
    PatchPoint(f"{EW2}.resolve_draft_parallel_layout", ("model_spec", "collapse_cp"), "rebind",
               "third case: DraftParallelLayout(tp_group=<S>) on S",
               origin="sglang.srt.speculative.draft_parallel.resolve_draft_parallel_layout"),
    PatchPoint(f"{EW2}.build_eagle_verify_input",
               ("batch", "draft_input", "parent_list", "top_scores_index", "draft_tokens", "draft_probs",
                "target_worker", "topk", "num_steps", "num_draft_tokens", "tree_mask_mode", "device"),
               "rebind", "broadcast the proposals from S's leader before the verify input is built",
               origin="sglang.srt.speculative.eagle_worker_common.build_eagle_verify_input"),
    PatchPoint("sglang.srt.utils.common.get_available_gpu_memory",
               ("device", "gpu_id", "distributed", "empty_cache", "cpu_group"), "rebind",
               "answered locally inside draft-only phases (its distributed form is a world all-reduce)"),
    PatchPoint("sglang.srt.distributed.parallel_state.patch_tensor_parallel_group", ("tp_group", "owns_attention"),
               "use", "narrows tp/attn/moe sizes to the draft group (reused as is)"),
    PatchPoint("sglang.srt.distributed.parallel_state.init_model_parallel_group",
               ("group_ranks", "local_rank", "backend", "use_pynccl", "use_custom_allreduce",
                "use_message_queue_broadcaster", "group_name"), "use", "creates the draft GroupCoordinator"),
    PatchPoint("sglang.srt.configs.draft_parallel.DraftParallelLayout", (), "use",
               "fields tp_group, attn_tp_size, disable_cp"),
    PatchPoint("sglang.srt.speculative.base_spec_worker.EagleDraftWorkerBase._rebuild_topk1_chain_buffers", ("self",),
               "use", "chain constants every rank rebuilds for topk=1"),
    PatchPoint("sglang.srt.speculative.eagle_info.EagleDraftInput", (), "use", "placeholders outside S"),
    PatchPoint("sglang.srt.speculative.pp_draft_embedding.resolve_target_embed_and_head", ("target_model", "draft_model"),
               "use", "the target's (vocab-sharded) embedding and head"),
    PatchPoint("sglang.srt.managers.scheduler.run_scheduler_process",
               ("server_args", "port_args", "gpu_id", "tp_rank", "pp_rank", "dp_rank", "pipe_writer"),
               "use", "spawned per rank; wrapped by run_scheduler_process below (patches re-applied in the child)"),
    PatchPoint("sglang.srt.entrypoints.http_server.launch_server",
               ("server_args", "init_tokenizer_manager_func", "run_scheduler_process_func"), "use",
               "the launcher passes run_scheduler_process_func"),
    PatchPoint("sglang.srt.entrypoints.engine._set_envs_and_config", ("server_args",), "wrap",
               "re-apply the NCCL profile after SGLang sets NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE"),
    PatchPoint("sglang.srt.server_args.prepare_server_args", ("argv",), "use", "SGLang's own CLI parser"),
)


class _ImportBlocked(ImportError):
    """The module exists but importing it needs a package this machine lacks (e.g. a GPU-only dependency)."""

    def __init__(self, module: str, cause: BaseException):
        super().__init__(f"{module}: {type(cause).__name__}: {cause}")
        self.module = module


def _resolve(path: str) -> tuple[Any, str, Any]:
    """(owner, attribute, value) for a dotted path whose prefix is an importable module."""
    import importlib.util

    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name or (e.name and name.startswith(e.name + ".")) or importlib.util.find_spec(name) is None:
                continue
            raise _ImportBlocked(name, e) from e
        except ImportError as e:
            raise _ImportBlocked(name, e) from e
        owner = obj
        for name in parts[i:-1]:
            owner = getattr(owner, name)
        attr = parts[-1]
        return owner, attr, inspect.getattr_static(owner, attr) if isinstance(owner, type) else getattr(owner, attr)
    raise ImportError(f"cannot import any module prefix of {path}")


@dataclass
class CheckResult:
    point: PatchPoint
    ok: bool
    detail: str


def check_patch_points(points: Sequence[PatchPoint] = PATCH_POINTS) -> list[CheckResult]:
    """Resolve every patch point in the installed SGLang and compare parameter names (no GPU work)."""
    out: list[CheckResult] = []
    for p in points:
        try:
            owner, attr, value = _resolve(p.target)
        except _ImportBlocked as e:
            out.append(_static_check(p, e))
            continue
        except Exception as e:  # noqa: BLE001
            out.append(CheckResult(p, False, f"missing: {type(e).__name__}: {e}"))
            continue
        if p.origin:
            try:
                _, _, orig = _resolve(p.origin)
                if value is not orig and getattr(value, "__specdecode_original__", None) is not orig:
                    out.append(CheckResult(p, False, f"{p.target} is not bound to {p.origin}"))
                    continue
            except Exception as e:  # noqa: BLE001
                out.append(CheckResult(p, False, f"origin missing: {e}"))
                continue
        if p.params:
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            fn = getattr(fn, "__specdecode_original__", fn)
            try:
                names = tuple(inspect.signature(fn).parameters)
            except (TypeError, ValueError) as e:
                out.append(CheckResult(p, False, f"no signature: {e}"))
                continue
            if names[: len(p.params)] != p.params:
                out.append(CheckResult(p, False, f"parameters {names} != expected {p.params}"))
                continue
            out.append(CheckResult(p, True, f"({', '.join(names)})"))
        else:
            out.append(CheckResult(p, True, type(value).__name__))
    return out


def _static_check(p: PatchPoint, blocked: "_ImportBlocked") -> CheckResult:
    """Check a function's parameters from the module's source when the module cannot be imported here (the
    server entry points import GPU-only packages such as xgrammar); the pod imports them for real."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(blocked.module)
    if spec is None or not spec.origin:
        return CheckResult(p, False, f"missing module {blocked.module}")
    tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    rest = p.target[len(blocked.module) + 1 :].split(".")
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for name in rest:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return CheckResult(p, False, f"{name} not defined in {spec.origin} (static check)")
        body = getattr(node, "body", [])
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return CheckResult(p, True, "defined (static check)")
    a = node.args
    names = tuple(x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs])
    if names[: len(p.params)] != p.params:
        return CheckResult(p, False, f"parameters {names} != expected {p.params} (static check)")
    return CheckResult(p, True, f"({', '.join(names)}) [static: {blocked}]")


def installed_sglang_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("sglang")
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# Patch bookkeeping
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Binding:
    owner: Any
    attr: str
    original: Any
    had_own: bool
    replacement: Any


@dataclass
class PatchSet:
    """Everything :func:`apply_patches` changed; ``remove()`` puts every original binding back."""

    bindings: list[_Binding] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    def _set(self, owner: Any, attr: str, replacement: Any) -> None:
        had_own = attr in vars(owner) if isinstance(owner, type) else True
        original = vars(owner).get(attr) if isinstance(owner, type) else getattr(owner, attr)
        if isinstance(replacement, types.FunctionType) and original is not None:
            replacement.__specdecode_original__ = (  # type: ignore[attr-defined]
                original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
            )
        self.bindings.append(_Binding(owner, attr, original, had_own, replacement))
        setattr(owner, attr, replacement)

    def wrap(self, target: str, make: Callable[[Callable], Callable]) -> None:
        """Replace ``target`` with ``make(original)``."""
        owner, attr, value = _resolve(target)
        original = getattr(owner, attr)  # bound lookup through the MRO for inherited methods
        self._set(owner, attr, make(original))
        self.targets.append(target)

    def rebind_everywhere(self, target: str, make: Callable[[Callable], Callable], prefix: str = "sglang.") -> None:
        """Wrap a function and every ``from X import f`` binding of it in modules under ``prefix``."""
        owner, attr, original = _resolve(target)
        new = make(original)
        self._set(owner, attr, new)
        for name, mod in list(sys.modules.items()):
            if not name.startswith(prefix) or mod is None or mod is owner:
                continue
            for k, v in list(vars(mod).items()):
                if v is original:
                    self._set(mod, k, new)
        self.targets.append(target)

    def remove(self) -> None:
        for b in reversed(self.bindings):
            if b.had_own:
                setattr(b.owner, b.attr, b.original)
            else:
                with contextlib.suppress(AttributeError):
                    delattr(b.owner, b.attr)
        self.bindings.clear()
        self.targets.clear()


# ---------------------------------------------------------------------------------------------------------------
# Split state (one per scheduler process) and hooks
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SplitConfig:
    """What the patches need from runtime.yaml (kept free of pydantic so it pickles and tests stay light)."""

    draft_tp: int
    draft_ranks: tuple[int, ...] | None = None  # TP-local ranks; None: by topology, then 0..d-1
    use_topology: bool = True

    @classmethod
    def from_runtime_config(cls, cfg: Any) -> "SplitConfig":
        ranks = tuple(cfg.draft.ranks) if cfg.draft.ranks else None
        return cls(draft_tp=int(cfg.draft.tensor_parallel_size), draft_ranks=ranks)


@dataclass
class _SplitState:
    groups: Any  # DraftGroups
    broadcaster: Any  # ProposalBroadcaster
    hidden: tuple[int | None, Any]
    gathered: tuple[Any, Any] = (None, None)


_STATE: _SplitState | None = None
_ACTIVE: PatchSet | None = None
_verify_cb: Callable[[list[int], int, int, dict[str, float]], None] | None = None
_step_cb: Callable[[int], int | None] | None = None
_iteration_cb: Callable[[], None] | None = None
_ready_cb: Callable[[Any], None] | None = None
_CYCLE: Any = None  # CycleStamp of the decode cycle being launched (between forward entry and return)
_RESULT_CYCLE: Any = None  # CycleStamp of the result being processed (inside _resolve_spec_v2_tokens)
_CLOCK: Any = None  # engine.CycleClock, one per process


def set_verify_callback(cb: Callable[[list[int], int, int, dict[str, float]], None] | None) -> None:
    """Metrics hook point: ``EAGLEWorkerV2.on_verify_complete_cpu``. After every decode verify, on every TP rank,
    ``cb(num_correct_drafts_per_req, batch_size, num_steps, phase_seconds)`` is called with the accepted draft count
    per request (bonus token excluded), already on the CPU (no extra GPU sync), the tier that verify ran with
    (stamped at launch: under the overlap scheduler the worker may already run the next batch's tier), and the
    host-side phase times of :class:`specdecode_runtime.engine.CycleClock` (empty if the result carries no stamp).
    Per-position acceptance follows: position j was accepted in a request iff its count >= j. Export from one rank
    (tp_rank 0)."""
    global _verify_cb
    _verify_cb = cb


def set_step_control(cb: Callable[[int], int | None] | None) -> None:
    """Step-control swap point: ``EAGLEWorkerV2.activate_step_by_batch``, called before every decode round on
    every TP rank. ``cb(batch_size)`` returns the step count to run, or None to keep the current one; the value
    must be identical on every rank at the same iteration (the engine's step table, exchanged in
    :func:`set_iteration_callback`'s hook). The swap is SGLang's pointer swap to a pre-captured tier
    (``adaptive_controller._activate``), so the runtime must start with ``--speculative-adaptive`` and the tiers
    (``speculative.candidateSteps``) pre-built; an uncaptured step count raises. While a callback is set, SGLang's
    own EMA controller is neither consulted here nor fed in ``on_verify_complete_cpu``: the table is the only
    actuator."""
    global _step_cb
    _step_cb = cb


def set_iteration_callback(cb: Callable[[], None] | None) -> None:
    """``Scheduler.ingest_requests``: ``cb()`` once per scheduler-loop pass, on every TP rank, in the same order,
    before the pass chooses and launches its batch (outside any CUDA graph). The engine exchanges step tables
    here."""
    global _iteration_cb
    _iteration_cb = cb


def set_worker_ready_callback(cb: Callable[[Any], None] | None) -> None:
    """``EAGLEWorkerV2.init_cuda_graphs`` (every rank, once, after the tiers are captured and before the event
    loop): ``cb(worker)``. The engine starts its channel, preflight, metrics and control server here."""
    global _ready_cb
    _ready_cb = cb


def active_patches() -> PatchSet | None:
    return _ACTIVE


# ---------------------------------------------------------------------------------------------------------------
# The draft worker outside S
# ---------------------------------------------------------------------------------------------------------------


class _NullRunner:
    """Just enough of a ModelRunner for EAGLEWorkerV2's bookkeeping outside S (no weights, no KV pool)."""

    def __init__(self, target_runner: Any):
        self.model_config = target_runner.spec_aux_config.draft_model_config or target_runner.model_config
        self.spec_algorithm = target_runner.spec_algorithm
        self.device = target_runner.device
        self.attn_backend = None
        self.draft_attn_backend = None
        self.graph_memory_usage: dict[str, float] = {}
        self.graph_time_usage: dict[str, float] = {}
        self.weight_load_time = 0.0
        self.preloaded_weights_bytes = 0
        self.canary_manager = None
        self.device_timer = None


def _make_remote_draft_worker_cls() -> type:
    from sglang.srt.configs.draft_parallel import DraftParallelLayout
    from sglang.srt.runtime_context import get_device, get_parallel, get_spec
    from sglang.srt.speculative import eagle_worker_v2 as ew2
    from sglang.srt.speculative.base_spec_worker import EagleDraftWorkerBase
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.eagle_utils import default_tree_mask_mode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    import torch

    from .draft_group import ProposalLayout

    class RemoteDraftWorker(EagleDraftWorkerBase):
        """The draft worker of a rank outside S: receives proposals, never drafts."""

        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            super().__init__()
            self.server_args, self.gpu_id, self.nccl_port = server_args, gpu_id, nccl_port
            self.target_worker = target_worker
            self.device = get_device().device
            self.topk = get_spec().speculative_eagle_topk
            self.speculative_num_steps = get_spec().speculative_num_steps
            self.speculative_num_draft_tokens = get_spec().speculative_num_draft_tokens
            self.speculative_algorithm = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
            self._rebuild_topk1_chain_buffers()
            self.parallel_layout = DraftParallelLayout(tp_group=None, attn_tp_size=get_parallel().attn_tp_size)
            self.draft_runner = _NullRunner(target_worker.model_runner)
            self.draft_worker = None
            self.draft_attn_backend = self.draft_extend_attn_backend = None
            self.cuda_graph_runner = self.cuda_graph_runner_for_draft_extend = None
            self.hot_token_id = None
            self.tree_mask_mode = default_tree_mask_mode()

        @property
        def draft_runners(self):
            return []

        def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None):
            self.req_to_token_pool = req_to_token_pool
            self.token_to_kv_pool_allocator = token_to_kv_pool_allocator

        def init_attention_backends(self):
            pass

        def init_attention_backend(self):
            pass

        def init_cuda_graphs(self):
            pass

        def _capture_cuda_graphs(self):
            pass

        def draft_extend(self):
            pass

        def _placeholders(self, bs: int):
            hidden, dtype = _STATE.hidden if _STATE is not None else (None, None)
            topk_p = torch.zeros((bs, self.topk), dtype=torch.float32, device=self.device)
            topk_index = torch.zeros((bs, self.topk), dtype=torch.int64, device=self.device)
            hs = torch.zeros((bs, hidden), dtype=dtype, device=self.device) if hidden else None
            return topk_p, topk_index, hs

        def draft(self, batch, *, with_topology: bool = False):
            draft_input = batch.spec_info
            bs = batch.seq_lens.shape[0]
            parents = scores = tokens = None
            if not batch.forward_mode.is_idle():
                layout = ProposalLayout(self.speculative_num_steps, self.topk, self.speculative_num_draft_tokens)
                tokens, parents, scores = _STATE.broadcaster.broadcast(bs, layout=layout)
                if self.topk == 1:
                    parents = self._topk1_parents_prealloc[:bs]
                    scores = self._topk1_score_indices_prealloc[:bs]
            verify_input = _ORIG_BUILD(
                batch, draft_input, parents, scores, tokens, None,
                target_worker=self.target_worker, topk=self.topk, num_steps=self.speculative_num_steps,
                num_draft_tokens=self.speculative_num_draft_tokens, tree_mask_mode=self.tree_mask_mode,
                device=self.device,
            )
            if with_topology:
                return verify_input, parents, scores
            return verify_input

        def _draft_extend_for_prefill(self, batch, target_hidden_states, next_token_ids, mm_input_embeds=None,
                                      kv_loc_plan=None):
            bs = next_token_ids.shape[0]
            topk_p, topk_index, hs = self._placeholders(bs)
            return EagleDraftInput(
                topk_p=topk_p, topk_index=topk_index, hidden_states=hs, bonus_tokens=next_token_ids,
                num_tokens_per_req=1, num_tokens_for_logprob_per_req=1,
            )

        def _draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None):
            nd = batch_result.next_draft_input
            nd.topk_p, nd.topk_index, hs = self._placeholders(batch.seq_lens.shape[0])
            if hs is not None:
                nd.hidden_states = hs
            nd.cuda_graph_compatible = True

    RemoteDraftWorker.__module__ = __name__
    ew2  # noqa: B018 - imported for its side effect of being loaded before patching
    return RemoteDraftWorker


_ORIG_BUILD: Callable | None = None


# ---------------------------------------------------------------------------------------------------------------
# apply / remove
# ---------------------------------------------------------------------------------------------------------------


def _local_memory(orig: Callable) -> Callable:
    from .draft_group import in_draft_only_scope

    def get_available_gpu_memory(device, gpu_id, distributed=False, empty_cache=True, cpu_group=None):
        if distributed and in_draft_only_scope():
            distributed = False  # a world all-reduce issued on S alone would hang the other ranks
        return orig(device, gpu_id, distributed=distributed, empty_cache=empty_cache, cpu_group=cpu_group)

    return get_available_gpu_memory


def _create_groups(split: SplitConfig, target_worker: Any):
    """Every TP rank, same order: draft GroupCoordinator (S + singletons), then the broadcast communicator."""
    import torch
    import torch.distributed as dist
    from sglang.srt.distributed.parallel_state import init_model_parallel_group
    from sglang.srt.runtime_context import get_parallel

    from .draft_group import (
        DraftGroups,
        DraftPlacement,
        ProposalBroadcaster,
        ProposalLayout,
        choose_draft_ranks,
        detect_topology,
    )

    par = get_parallel()
    tp = par.tp_group
    target_ranks = tuple(tp.ranks)
    topo = detect_topology() if (split.use_topology and split.draft_ranks is None) else None
    local = choose_draft_ranks(len(target_ranks), split.draft_tp, split.draft_ranks, topo)
    placement = DraftPlacement.from_tp_ranks(target_ranks, local)
    blocks = [list(b) for b in DraftGroups.partition(placement)]
    backend = dist.get_backend(tp.device_group)
    coordinator = init_model_parallel_group(
        blocks, tp.local_rank, backend, use_pynccl=placement.draft_tp_size > 1 and backend == "nccl",
        use_message_queue_broadcaster=False, group_name="specdecode_draft",
    )
    bcast = dist.new_group(ranks=list(target_ranks), backend=backend)
    groups = DraftGroups(placement=placement, rank=dist.get_rank(), draft_group=coordinator, bcast_group=bcast,
                         draft_backend=backend, bcast_backend=backend)
    from sglang.srt.runtime_context import get_exec, get_schedule, get_spec

    graph_max = getattr(getattr(get_exec().graph, "cuda_graph_config", None), "decode", None)
    max_bs = max(getattr(graph_max, "max_bs", 0) or 0, get_schedule().max_running_requests or 0, 1)
    spec = get_spec()
    steps = spec.speculative_num_steps
    if getattr(spec, "speculative_adaptive", False):  # size the buffer for the deepest captured tier, once
        from sglang.srt.speculative.adaptive_spec_params import resolve_candidate_steps_from_config

        steps = max([steps, *resolve_candidate_steps_from_config(spec.speculative_adaptive_config)])
    widest = ProposalLayout(max(steps, 1), spec.speculative_eagle_topk,
                            max(spec.speculative_num_draft_tokens, steps + 1) if spec.speculative_eagle_topk == 1
                            else spec.speculative_num_draft_tokens)
    device = tp.device if hasattr(tp, "device") else torch.device("cuda", torch.cuda.current_device())
    bcaster = ProposalBroadcaster(groups, widest, max_bs=max_bs, device=device)
    return groups, bcaster


def apply_patches(
    split: SplitConfig | None = None, nccl_env: dict[str, str] | None = None, *, main_process: bool = False
) -> PatchSet:
    """Install every patch (idempotent: an active set is returned as is). ``split=None`` (or a draft TP equal to
    the target TP) installs only the hooks and the NCCL re-apply. ``main_process``: also wrap SGLang's
    ``_set_envs_and_config`` (the launcher's own process, before the schedulers are spawned; spawned schedulers
    re-apply the profile in :func:`bootstrap_from_env` instead)."""
    global _ACTIVE, _ORIG_BUILD
    if _ACTIVE is not None:
        return _ACTIVE
    from .torchvision_stub import install as _stub_install

    _stub_install()
    from sglang.srt.speculative import eagle_worker_v2 as ew2

    from .draft_group import draft_only_scope

    ps = PatchSet()
    env = dict(nccl_env or {})

    # -- NCCL profile re-applied after SGLang's own environment set-up ------------------------------------------
    def wrap_set_envs(orig):
        def _set_envs_and_config(server_args):
            result = orig(server_args)
            os.environ.update(env)
            return result

        return _set_envs_and_config

    if main_process:
        ps.wrap("sglang.srt.entrypoints.engine._set_envs_and_config", wrap_set_envs)

    # -- hooks -------------------------------------------------------------------------------------------------
    import time as _time

    from .engine import CycleClock, CycleStamp

    global _CLOCK
    _CLOCK = CycleClock()

    def wrap_verify(orig):
        def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size=0):
            if _verify_cb is not None:
                stamp = _RESULT_CYCLE
                steps = stamp.steps if stamp is not None and stamp.steps is not None else self.speculative_num_steps
                _verify_cb(list(num_correct_drafts_per_req), batch_size, steps, _CLOCK.phases(stamp))
            if _step_cb is not None:
                return None  # the step table is the only actuator: SGLang's EMA controller is never fed
            return orig(self, num_correct_drafts_per_req, batch_size)

        return on_verify_complete_cpu

    def wrap_forward(orig):
        def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
            global _CYCLE
            decode = not (batch.forward_mode.is_extend() or batch.is_extend_in_batch) \
                and not batch.forward_mode.is_idle()
            if _verify_cb is None or not decode:
                return orig(self, batch, on_publish, grammar_barrier, pp_proxy_tensors)
            stamp = _CYCLE = CycleStamp(t_start=_time.perf_counter())
            try:
                out = orig(self, batch, on_publish, grammar_barrier, pp_proxy_tensors)
            finally:
                _CYCLE = None
            stamp.t_end = _time.perf_counter()
            try:
                out.specdecode_cycle = stamp
            except AttributeError:  # a result type with slots: phases are then not recorded
                pass
            return out

        return forward_batch_generation

    def wrap_verify_launch(orig):
        def verify(self, batch, *a, **k):
            stamp = _CYCLE
            if stamp is None:
                return orig(self, batch, *a, **k)
            stamp.steps = self.speculative_num_steps
            stamp.t_verify_start = _time.perf_counter()
            try:
                return orig(self, batch, *a, **k)
            finally:
                stamp.t_verify_end = _time.perf_counter()

        return verify

    def wrap_resolve(orig):
        def _resolve_spec_v2_tokens(self, result, batch):
            global _RESULT_CYCLE
            _RESULT_CYCLE = getattr(result, "specdecode_cycle", None)
            try:
                return orig(self, result, batch)
            finally:
                _RESULT_CYCLE = None

        return _resolve_spec_v2_tokens

    def wrap_ready(orig):
        def init_cuda_graphs(self):
            out = orig(self)
            if _ready_cb is not None:
                _ready_cb(self)
            return out

        return init_cuda_graphs

    def wrap_ingest(orig):
        def ingest_requests(self, stop_at_pause=False):
            if _iteration_cb is not None:
                _iteration_cb()
            return orig(self, stop_at_pause)

        return ingest_requests

    def wrap_activate(orig):
        def activate_step_by_batch(self, batch_size):
            if _step_cb is not None:
                want = _step_cb(batch_size)
                if want is not None and want != self.speculative_num_steps:
                    if self.adaptive_controller is None:
                        raise RuntimeError("step control needs --speculative-adaptive (pre-captured tiers)")
                    self.adaptive_controller._activate(int(want))
                return None
            return orig(self, batch_size)

        return activate_step_by_batch

    ps.wrap(f"{EW2}.EAGLEWorkerV2.on_verify_complete_cpu", wrap_verify)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.activate_step_by_batch", wrap_activate)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.forward_batch_generation", wrap_forward)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.verify", wrap_verify_launch)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.init_cuda_graphs", wrap_ready)
    ps.wrap("sglang.srt.managers.scheduler.Scheduler.ingest_requests", wrap_ingest)
    ps.wrap("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
            "._resolve_spec_v2_tokens", wrap_resolve)

    if split is None:
        _ACTIVE = ps
        return ps

    # -- the split draft -----------------------------------------------------------------------------------------
    RealDraftWorker = ew2.EagleDraftWorker
    Remote = _make_remote_draft_worker_cls()
    _ORIG_BUILD = ew2.build_eagle_verify_input

    def _guarded(orig, what):
        def method(self, *a, **k):
            st = _STATE
            if st is None:
                return orig(self, *a, **k)
            with draft_only_scope(st.groups.placement.draft_ranks, what):
                return orig(self, *a, **k)

        return method

    def wrap_worker_init(orig):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            global _STATE
            from sglang.srt.runtime_context import get_parallel

            if split.draft_tp >= get_parallel().tp_size:
                _STATE = None
                return orig(self, server_args, gpu_id, nccl_port, target_worker)
            groups, bcaster = _create_groups(split, target_worker)
            _STATE = _SplitState(groups=groups, broadcaster=bcaster, hidden=(None, None))
            factory = RealDraftWorker if groups.in_draft else Remote
            ew2.EagleDraftWorker = factory
            try:
                orig(self, server_args, gpu_id, nccl_port, target_worker)
            finally:
                ew2.EagleDraftWorker = RealDraftWorker
            from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec_from_config

            runner = target_worker.model_runner
            cfg = runner.spec_aux_config.draft_model_config
            _STATE.hidden = (
                get_draft_recurrent_hidden_state_spec_from_config(cfg, runner.spec_algorithm)
                if cfg is not None
                else (None, None)
            )
            logger.info("specdecode: draft on ranks %s of %s (this rank %s S)", groups.placement.draft_ranks,
                        groups.placement.target_ranks, "in" if groups.in_draft else "outside")

        return __init__

    def wrap_pool(orig):
        def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None):
            st = _STATE
            if st is not None:
                from sglang.srt.speculative.pp_draft_embedding import resolve_target_embed_and_head

                vocab = self._target_worker.model_runner.model_config.vocab_size
                embed, head = resolve_target_embed_and_head(self._target_worker.model_runner.model)
                gathered = []
                for t in (embed, head):
                    if t is None or t.shape[0] >= vocab:  # absent, or already replicated
                        gathered.append(t)
                        continue
                    full = st.groups.gather_vocab_shards(t.data)
                    gathered.append(st.groups.draft_shard(full) if full is not None else None)
                st.gathered = (gathered[0], gathered[1])
            return orig(self, memory_pool_config=memory_pool_config, req_to_token_pool=req_to_token_pool,
                        token_to_kv_pool_allocator=token_to_kv_pool_allocator)

        return alloc_memory_pool

    def wrap_embed(orig):
        def _resolve_shared_embed_and_head(self):
            st = _STATE
            if st is None or st.gathered == (None, None):
                return orig(self)
            embed, head = st.gathered
            import torch

            return (torch.nn.Parameter(embed, requires_grad=False) if embed is not None else None,
                    torch.nn.Parameter(head, requires_grad=False) if head is not None else None)

        return _resolve_shared_embed_and_head

    def wrap_layout(orig):
        def resolve_draft_parallel_layout(model_spec, *, collapse_cp=False):
            st = _STATE
            if st is None or not st.groups.in_draft:
                return orig(model_spec, collapse_cp=collapse_cp)
            from sglang.srt.configs.draft_parallel import DraftParallelLayout

            g = st.groups.draft_group
            return DraftParallelLayout(tp_group=g, attn_tp_size=g.world_size)

        return resolve_draft_parallel_layout

    def wrap_build(orig):
        def build_eagle_verify_input(batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs,
                                     **kw):
            st = _STATE
            if st is None or batch.forward_mode.is_idle():
                return orig(batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, **kw)
            from .draft_group import ProposalLayout

            topk = kw["topk"]
            layout = ProposalLayout(kw["num_steps"], topk, kw["num_draft_tokens"])
            bs = batch.seq_lens.shape[0]
            tokens, p, s = st.broadcaster.broadcast(
                bs, draft_tokens, parent_list if topk > 1 else None, top_scores_index if topk > 1 else None,
                layout=layout,
            )
            if topk > 1:
                parent_list, top_scores_index = p, s
            return orig(batch, draft_input, parent_list, top_scores_index, tokens, None, **kw)

        return build_eagle_verify_input

    ps.wrap(f"{EW2}.EAGLEWorkerV2.__init__", wrap_worker_init)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.alloc_memory_pool", wrap_pool)
    for meth, what in (
        ("__init__", "draft model construction"),
        ("alloc_memory_pool", "draft KV pool allocation"),
        ("init_attention_backends", "draft attention backends"),
        ("init_cuda_graphs", "draft CUDA-graph capture"),
        ("init_attention_backend", "draft attention backend of a step tier"),
        ("_capture_cuda_graphs", "draft CUDA-graph capture of a step tier"),
    ):
        ps.wrap(f"{EW2}.EagleDraftWorker.{meth}", lambda orig, what=what: _guarded(orig, what))
    ps.wrap(f"{EW2}.EagleDraftWorker._resolve_shared_embed_and_head", wrap_embed)
    ps.wrap(f"{EW2}.resolve_draft_parallel_layout", wrap_layout)
    ps.wrap(f"{EW2}.build_eagle_verify_input", wrap_build)
    ps.rebind_everywhere("sglang.srt.utils.common.get_available_gpu_memory", _local_memory)
    _ACTIVE = ps
    return ps


def remove_patches() -> None:
    """Undo :func:`apply_patches` (tests, and ``check-sglang``); also clears every hook callback."""
    global _ACTIVE, _STATE, _ORIG_BUILD, _verify_cb, _step_cb, _iteration_cb, _ready_cb, _CYCLE, _RESULT_CYCLE
    if _ACTIVE is not None:
        _ACTIVE.remove()
    _ACTIVE, _STATE, _ORIG_BUILD = None, None, None
    _verify_cb = _step_cb = _iteration_cb = _ready_cb = _CYCLE = _RESULT_CYCLE = None


@contextlib.contextmanager
def patched(split: SplitConfig | None = None, nccl_env: dict[str, str] | None = None) -> Iterator[PatchSet]:
    ps = apply_patches(split, nccl_env, main_process=False)
    try:
        yield ps
    finally:
        remove_patches()


# ---------------------------------------------------------------------------------------------------------------
# Child-process entry points
# ---------------------------------------------------------------------------------------------------------------


def bootstrap_from_env() -> PatchSet | None:
    """In a spawned scheduler process: re-apply the NCCL profile and install the patches from the config file
    named by ``SPECDECODE_RUNTIME_CONFIG`` (set by the launcher). No variable: nothing happens."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    from .launch import load_config, nccl_environment, split_config

    cfg = load_config(path)
    env = nccl_environment(cfg)
    os.environ.update(env)
    ps = apply_patches(split_config(cfg), env)
    from .engine import EngineRuntime, EngineSettings

    EngineRuntime(EngineSettings.from_runtime_config(cfg)).install()
    return ps


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Passed to SGLang as ``run_scheduler_process_func``: spawned children unpickle it by reference, so they
    import this module, install the patches, then run SGLang's own ``run_scheduler_process``."""
    bootstrap_from_env()
    from sglang.srt.managers.scheduler import run_scheduler_process as orig

    return orig(*args, **kwargs)


def sglang_plugin() -> None:
    """Entry point for SGLang's ``sglang.srt.plugins`` group (an alternative to ``run_scheduler_process``):
    SGLang calls every general plugin at the start of each process; a no-op unless the launcher set
    ``SPECDECODE_RUNTIME_CONFIG``."""
    bootstrap_from_env()


__all__ = [
    "PATCH_POINTS",
    "PatchPoint",
    "PatchSet",
    "SGLANG_VERSION",
    "SplitConfig",
    "apply_patches",
    "check_patch_points",
    "patched",
    "remove_patches",
    "run_scheduler_process",
    "set_iteration_callback",
    "set_step_control",
    "set_verify_callback",
    "set_worker_ready_callback",
]
