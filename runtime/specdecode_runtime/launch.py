"""``specdecode-runtime launch``: runtime.yaml -> NCCL environment -> patches -> SGLang's server, in-process.

Order matters and is fixed here:

1. read and validate ``runtime.yaml`` and the extra SGLang arguments, **before** importing SGLang or touching a
   GPU; anything the patch cannot serve exits 2 with the reason (:func:`unsupported_reasons`, the config's part shared
   with ``specdecode validate`` through :mod:`specdecode_runtime.contract.capabilities`);
2. put the NCCL profile into ``os.environ`` (SGLang and NCCL read it at import / communicator creation);
3. record the config path in ``SPECDECODE_RUNTIME_CONFIG`` so every spawned scheduler process re-applies the
   profile and installs the same patches (:func:`specdecode_runtime.scheduler_process.run_scheduler_process`);
4. Live autotune only: write SGLang's ``--speculative-adaptive-config`` JSON (:func:`adaptive_config`) so SGLang
   captures exactly the ``speculative.candidateSteps`` tiers at start-up;
5. create/clean ``PROMETHEUS_MULTIPROC_DIR`` (our series and SGLang's share it, so SGLang's ``/metrics`` serves
   both);
6. parse the translated arguments with SGLang's own ``prepare_server_args`` and start
   ``sglang.srt.entrypoints.http_server.launch_server`` in this process.

Tiers are captured in **Live** mode only. Off never changes the step count, and Rollout changes it by restarting
pods with a new ``numSteps``; capturing extra tiers there would only cost GPU memory (each tier holds its own
draft and target-verify CUDA graphs for every captured batch size) and start-up time.
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from . import SGLANG_VERSION, model_paths, sglang_patch
from .contract.capabilities import serving_problems, step_candidates
from .contract.config import RuntimeConfig, load_runtime_config
from .contract.derived import draft_is_split, live, nccl_environment
from .contract.input_files import InputError
from .contract.server_args import expand_env_refs, sglang_cli_args, unexpanded_refs
from .cpu import DEVICE_ENV
from .cpu.engine import CLI_FLAGS, prepare_launch
from .cpu.scheduler import run_scheduler_process as cpu_run_scheduler_process
from .draft_group import DraftGroupError, choose_draft_ranks
from .sglang_patch import apply_patches, split_config

EXIT_UNSUPPORTED = 2

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
DEFAULT_METRICS_DIR = "/tmp/specdecode-metrics"
STATE_DIR_ENV = "SPECDECODE_STATE_DIR"
DEFAULT_STATE_DIR = "/tmp/specdecode"
ADAPTIVE_CONFIG_NAME = "adaptive-config.json"
# SGLang's EMA controller decides only after ``warmup_batches`` verifies; with this it never decides, even if our
# wrapper around on_verify_complete_cpu were missing (the wrapper already never feeds it in Live mode).
NEVER = 2**62


class UnsupportedConfig(Exception):
    """A config the runtime refuses before any GPU work (exit code 2)."""

    def __init__(self, reasons: Sequence[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


def adaptive_config(cfg: RuntimeConfig) -> dict:
    """SGLang's ``--speculative-adaptive-config`` for Live mode.

    One slot, keyed "1" (every batch size): SGLang prunes a tier's CUDA graphs to the batch sizes whose slot lists
    it (``AdaptiveSpeculativeParams.cuda_graph_bs_for_step``), and our step table may put any candidate on any
    bucket, so every tier must be captured for every graph batch size. ``warmup_batches`` = :data:`NEVER` keeps
    SGLang's EMA controller from ever deciding; the runtime's step table is the only actuator."""
    return {"1": {"candidate_steps": step_candidates(cfg), "warmup_batches": NEVER, "update_interval": 1}}


def adaptive_config_path(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return str(Path(env.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR) / ADAPTIVE_CONFIG_NAME)


def prepare_metrics_dir(path: str | os.PathLike[str]) -> int:
    """Create prometheus-client's multiprocess directory and delete stale ``*.db`` files from an earlier run in the
    same pod (a container restart keeps /tmp; stale counters would be summed into the new ones). Only ``*.db``
    files are removed, never the directory or anything else in it. Returns how many files were removed."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    removed = 0
    for f in d.glob("*.db"):
        if f.is_file():
            f.unlink()
            removed += 1
    return removed


def unsupported_reasons(cfg: RuntimeConfig, args: Sequence[str], sglang_version: str | None) -> list[str]:
    """Everything the runtime refuses, checked without importing SGLang or touching a GPU: what only the pod knows
    (the installed SGLang, its environment variables), then every refusal of the config itself
    (:func:`~specdecode_runtime.contract.capabilities.serving_problems`, which ``specdecode validate`` and the
    operator run too)."""
    reasons: list[str] = []
    if sglang_version is None:
        reasons.append(f"sglang is not installed; the runtime patches sglang=={SGLANG_VERSION}")
    elif sglang_version != SGLANG_VERSION:
        reasons.append(f"unsupported sglang {sglang_version}: the patches are written for sglang=={SGLANG_VERSION}")
    missing = unexpanded_refs(args)
    if missing:
        reasons.append(f"unset environment variable(s) {', '.join(missing)} referenced by the SGLang arguments")
    return reasons + [str(p) for p in serving_problems(cfg, args)]


@dataclass
class LaunchPlan:
    config_path: str
    args: list[str]
    env: dict[str, str]
    split: bool
    draft_ranks: tuple[int, ...] | None
    reasons: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # written by ``launch`` before SGLang starts (not by dry-run)
    captured: list[int] = field(default_factory=list)  # step tiers SGLang captures
    control_port: int = 0


def plan_launch(
    config_path: str,
    extra: Sequence[str] = (),
    environ: dict[str, str] | None = None,
    sglang_version: str | None = "__detect__",
) -> LaunchPlan:
    """Everything ``launch`` will do, computed without importing SGLang (``--dry-run`` prints it)."""
    cfg = model_paths.resolve(load_runtime_config(str(config_path)))  # pvc:// and hf:// -> local directories
    environ = dict(os.environ if environ is None else environ)
    env = nccl_environment(cfg)
    env["SPECDECODE_RUNTIME_CONFIG"] = str(Path(config_path).resolve())
    env[METRICS_DIR_ENV] = environ.get(METRICS_DIR_ENV) or DEFAULT_METRICS_DIR
    args = expand_env_refs(sglang_cli_args(cfg, list(extra)), environ)
    if cfg.target_device == "cpu":  # real SGLang on a CPU with the runtime's kernel stand-ins (specdecode_runtime.cpu)
        args = [*CLI_FLAGS, *args]
        env[DEVICE_ENV] = "cpu"
    files: dict[str, str] = {}
    # Refusal checks see the user's arguments only (our own adaptive flags are appended after them).
    reasons = unsupported_reasons(
        cfg, args, sglang_patch.installed_sglang_version() if sglang_version == "__detect__" else sglang_version
    )
    if live(cfg):
        path = adaptive_config_path(environ)
        files[path] = json.dumps(adaptive_config(cfg), sort_keys=True) + "\n"
        args = [*args, "--speculative-adaptive", "--speculative-adaptive-config", path]
    ranks = None
    if draft_is_split(cfg):
        try:
            ranks = choose_draft_ranks(cfg.target.tensor_parallel_size, cfg.draft.tensor_parallel_size, cfg.draft.ranks)
        except DraftGroupError:
            ranks = None
    return LaunchPlan(
        config_path,
        args,
        env,
        draft_is_split(cfg),
        ranks,
        reasons,
        files,
        step_candidates(cfg),
        cfg.server.control_port,
    )


def format_plan(plan: LaunchPlan) -> str:
    lines = ["# environment"]
    lines += [f"{k}={v}" for k, v in sorted(plan.env.items())]
    lines.append("# sglang arguments")
    lines.append(" ".join(_quote(a) for a in plan.args))
    if plan.split:
        where = list(plan.draft_ranks) if plan.draft_ranks else "by topology at start-up"
        lines.append(f"# draft: split, on TP ranks {where}; proposals broadcast from the first")
    else:
        lines.append("# draft: on the whole target TP group (stock SGLang placement)")
    if plan.files:
        lines.append(
            f"# step tiers captured at start-up: {plan.captured} (autotune Live; SGLang's own EMA "
            "controller never decides)"
        )
    else:
        lines.append(f"# step tiers captured at start-up: {plan.captured} (no live step changes)")
    for path, text in plan.files.items():
        lines.append(f"# file written at launch (not by --dry-run): {path}")
        lines += [f"#   {line}" for line in text.rstrip("\n").splitlines()]
    lines.append(
        f"# metrics: {METRICS_DIR_ENV}={plan.env.get(METRICS_DIR_ENV)} (*.db files removed at launch); "
        "specdecode_* series on SGLang's /metrics"
    )
    lines.append(f"# step control: GET/PUT /specdecode/v1/steps on port {plan.control_port} (TP rank 0)")
    return "\n".join(lines)


def _quote(a: str) -> str:
    return shlex.quote(a)


def launch(config_path: str, extra: Sequence[str] = (), *, dry_run: bool = False, out=None) -> int:
    out = out or sys.stdout
    try:
        plan = plan_launch(config_path, extra)
    except InputError as e:  # unreadable or invalid runtime.yaml: one `field.path: message` line per problem
        print(f"specdecode-runtime: error: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    except (OSError, ValueError) as e:
        print(f"specdecode-runtime: error: {config_path}: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    if plan.reasons:
        for r in plan.reasons:
            print(f"specdecode-runtime: refused: {r}", file=sys.stderr)
        if dry_run:
            print(format_plan(plan), file=out)
        return EXIT_UNSUPPORTED
    if dry_run:
        print(format_plan(plan), file=out)
        return 0
    return _start(plan)


def write_launch_files(plan: LaunchPlan) -> None:
    """The files the plan names (the adaptive config) and a clean metrics directory; before SGLang starts."""
    for path, text in plan.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    prepare_metrics_dir(plan.env[METRICS_DIR_ENV])


def _start(plan: LaunchPlan) -> int:  # pragma: no cover - needs GPUs and a model
    write_launch_files(plan)
    os.environ.update(plan.env)  # before SGLang (and prometheus-client) is imported
    # lazy: imported after os.environ holds the NCCL profile and the metrics directory (module docstring, step 5)
    from .scheduler_process import run_scheduler_process

    cfg = load_runtime_config(plan.config_path)
    if cfg.target_device == "cpu":
        run_scheduler_process = cpu_run_scheduler_process  # installs the CPU stand-ins, then ours
        prepare_launch(cfg.target.tensor_parallel_size)
    apply_patches(split_config(cfg), nccl_environment(cfg), main_process=True)  # env re-apply + hooks
    from sglang.srt.entrypoints.http_server import launch_server  # SGLang (and torch) only in the pod's start
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(plan.args)
    kwargs = {}
    if cfg.cost_probe is not None and cfg.cost_probe.served is not None:
        # lazy: prometheus_client reads PROMETHEUS_MULTIPROC_DIR at import; the calibration's metrics load it, after
        # os.environ holds the directory (module docstring, step 5)
        from .served_probe import warmup_with_calibration

        stock = inspect.signature(launch_server).parameters["execute_warmup_func"].default
        kwargs["execute_warmup_func"] = warmup_with_calibration(cfg, stock)
    launch_server(server_args, run_scheduler_process_func=run_scheduler_process, **kwargs)
    return 0
