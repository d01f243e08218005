"""Run the real, pinned SGLang on a CPU: ``sglang.Engine`` with the CPU stand-ins in every scheduler process.

The settings are the ones SGLang needs on a plain CPU torch: ``device="cpu"``, the ``torch_native`` attention
backend (extended by :mod:`.attention` for the speculative cycle), no CUDA graphs, the pytorch sampler, no
overlap scheduling, float32 weights (SGLang would otherwise downcast to float16, whose rounding makes greedy
argmax depend on the TP reduction order), and TP ranks over gloo with one OpenMP thread each, bound round-robin to
the cores this process may use.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from multiprocessing import forkserver
from typing import Any, Sequence

from . import DEVICE_ENV, install
from .scheduler import SchedulerEntry

SPEC_META_KEYS = (
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_correct_drafts_histogram",
    "completion_tokens",
)


def cpu_thread_binding(tp: int, cores: Sequence[int] | None = None) -> str:
    """SGLang's ``SGLANG_CPU_OMP_THREADS_BIND``: rank ``r`` on core ``cores[r % len(cores)]``."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    return "|".join(str(cores[r % len(cores)]) for r in range(tp))


def prepare_environment(tp: int, environ: dict[str, str] | os._Environ | None = None) -> None:
    """Environment every spawned SGLang process inherits on a CPU run."""
    env = os.environ if environ is None else environ
    env[DEVICE_ENV] = "cpu"
    env["SGLANG_CPU_OMP_THREADS_BIND"] = cpu_thread_binding(tp)  # one entry per rank of this engine
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "0")  # no GPU: nothing to wait for on a crash
    # SGLang wraps its native rotary in torch.compile(dynamic=True); on a CPU every new batch shape recompiles it
    # (a 16-token generation took 6.8 s instead of 1.3 s), so the schedulers run it eagerly.
    env.setdefault("TORCHDYNAMO_DISABLE", "1")


def server_kwargs(
    model_dir: str,
    draft_dir: str | None = None,
    *,
    tp: int = 1,
    algorithm: str | None = None,
    steps: int = 3,
    topk: int = 1,
    num_draft_tokens: int | None = None,
    max_total_tokens: int = 4096,
    seed: int = 0,
    extra: dict[str, Any] | None = None,
) -> dict:
    """``ServerArgs`` keyword arguments for a CPU run; ``algorithm=None`` runs without speculation."""
    kw: dict[str, Any] = dict(
        model_path=model_dir,
        device="cpu",
        attention_backend="torch_native",
        disable_cuda_graph=True,
        sampling_backend="pytorch",
        disable_overlap_schedule=True,
        dtype="float32",
        tp_size=tp,
        max_total_tokens=max_total_tokens,
        random_seed=seed,
        skip_server_warmup=True,
        log_level="error",
    )
    if algorithm is not None:
        if draft_dir is None:
            raise ValueError(f"speculative algorithm {algorithm} needs a draft model directory")
        if num_draft_tokens is None:
            num_draft_tokens = steps + 1 if topk == 1 else min(topk * steps, 2 * steps) + 1
        kw.update(
            speculative_algorithm=algorithm,
            speculative_draft_model_path=draft_dir,
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=num_draft_tokens,
        )
    kw.update(extra or {})
    return kw


# The same settings as SGLang command-line flags, for ``specdecode-runtime launch`` with ``device: cpu`` (the
# launcher's own flags, e.g. --tp-size, come first; argparse keeps the last occurrence of a flag).
# SGLang sizes the KV pool from free host memory on a CPU (17M tokens, 8 GB here): a bounded pool instead, which
# extraArgs can raise.
CLI_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--disable-cuda-graph",
    "--sampling-backend",
    "pytorch",
    "--disable-overlap-schedule",
    "--dtype",
    "float32",
    "--max-total-tokens",
    "4096",
)


def prepare_launch(tp: int) -> None:
    """Before SGLang's server starts in this process: environment for the spawned schedulers and the CPU
    stand-ins here (pass :func:`.scheduler.run_scheduler_process` as SGLang's scheduler entry point)."""
    prepare_environment(tp)
    install()


# Imported once by the forkserver of :func:`share_preloaded_children`; every scheduler and detokenizer forks from it.
PRELOAD = (
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.speculative.eagle_worker_v2",
    "specdecode_runtime.cpu.patches",
)


def share_preloaded_children() -> None:
    """In a process that starts many engines (:mod:`.host`): SGLang's children fork from one forkserver that has
    imported SGLang once, instead of each importing it after ``spawn`` (tens of seconds per engine on two cores).
    SGLang forces ``spawn`` in ``_set_envs_and_config`` and, on shutdown, kills every child of this process; both
    are adjusted so the forkserver is used and survives from one engine to the next."""
    install()
    from sglang.srt.entrypoints import engine as sgl_engine

    if getattr(sgl_engine._set_envs_and_config, "__specdecode_cpu__", False):
        return
    mp.set_forkserver_preload(list(PRELOAD))
    set_envs, kill_tree = sgl_engine._set_envs_and_config, sgl_engine.kill_process_tree

    def _set_envs_and_config(server_args):
        result = set_envs(server_args)
        mp.set_start_method("forkserver", force=True)
        return result

    def kill_process_tree(parent_pid, include_parent=True, skip_pid=None, wait_timeout=60):
        if parent_pid == os.getpid() and skip_pid is None and not include_parent:
            skip_pid = forkserver._forkserver._forkserver_pid
        return kill_tree(parent_pid, include_parent, skip_pid, wait_timeout)

    _set_envs_and_config.__specdecode_cpu__ = True  # type: ignore[attr-defined]  # marks our stand-in (a function attribute)
    sgl_engine._set_envs_and_config = _set_envs_and_config
    sgl_engine.kill_process_tree = kill_process_tree


def engine_class():
    """``sglang.Engine`` whose scheduler processes get this process's environment as it is now and install the CPU
    stand-ins first."""
    install()
    from sglang.srt.entrypoints.engine import Engine

    class CpuEngine(Engine):
        run_scheduler_process_func = SchedulerEntry(os.environ)

    return CpuEngine


@dataclass
class GenerateResult:
    tokens: list[list[int]]
    meta: list[dict[str, Any]]
    generate_s: float
    startup_s: float = 0.0
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def accept_lengths(self) -> list[float]:
        return [float(m.get("spec_accept_length") or 0.0) for m in self.meta]

    @property
    def verify_cycles(self) -> int:
        return sum(int(m.get("spec_verify_ct") or 0) for m in self.meta)


class CpuSGLang:
    """One running SGLang engine on the CPU (a context manager; :meth:`close` shuts its processes down)."""

    def __init__(self, model_dir: str, draft_dir: str | None = None, **kwargs: Any):
        self.kwargs = server_kwargs(model_dir, draft_dir, **kwargs)
        prepare_environment(self.kwargs["tp_size"])
        t0 = time.perf_counter()
        self.engine = engine_class()(**self.kwargs)
        self.startup_s = time.perf_counter() - t0

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 16) -> GenerateResult:
        """Greedy generation of ``max_new_tokens`` tokens for each prompt (token ids; EOS ignored)."""
        params = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
        t0 = time.perf_counter()
        out = self.engine.generate(input_ids=[list(p) for p in prompts], sampling_params=params)
        elapsed = time.perf_counter() - t0
        return GenerateResult(
            tokens=[list(o["output_ids"]) for o in out],
            meta=[{k: o["meta_info"].get(k) for k in SPEC_META_KEYS if k in o["meta_info"]} for o in out],
            generate_s=elapsed,
            startup_s=self.startup_s,
            kwargs=dict(self.kwargs),
        )

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    def __enter__(self) -> CpuSGLang:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_generate(
    model_dir: str, draft_dir: str | None, prompts: Sequence[Sequence[int]], max_new_tokens: int = 16, **kwargs: Any
) -> GenerateResult:
    """Start an engine, generate greedily, shut it down."""
    with CpuSGLang(model_dir, draft_dir, **kwargs) as engine:
        return engine.generate(prompts, max_new_tokens)
