"""``specdecode-runtime launch``: runtime.yaml -> NCCL environment -> patches -> SGLang's server, in-process.

Order matters and is fixed here:

1. read and validate ``runtime.yaml`` and the extra SGLang arguments, **before** importing SGLang or touching a
   GPU; anything the patch cannot serve exits 2 with the reason (:func:`unsupported_reasons`);
2. put the NCCL profile into ``os.environ`` (SGLang and NCCL read it at import / communicator creation);
3. record the config path in ``SPECDECODE_RUNTIME_CONFIG`` so every spawned scheduler process re-applies the
   profile and installs the same patches (:func:`specdecode_runtime.sglang_patch.run_scheduler_process`);
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

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from . import SGLANG_VERSION, model_paths
from .contract.config import RuntimeConfig, load_runtime_config
from .contract.derived import captured_steps, draft_is_split, draft_tp_problems, live, nccl_environment
from .contract.input_files import InputError
from .contract.server_args import expand_env_refs, flag_value, sglang_cli_args, unexpanded_refs

EXIT_UNSUPPORTED = 2

# Flags the split draft cannot serve, with the reason.
_SPLIT_REFUSED = {
    "--speculative-use-rejection-sampling": "rejection sampling needs the draft's probabilities on every rank; the "
    "split draft broadcasts only its tokens",
    "--enable-dp-attention": "DP attention changes the draft's attention layout; the split draft supports pure TP "
    "targets only",
    "--enable-multi-layer-eagle": "multi-layer EAGLE uses MultiLayerEagleWorkerV2, which the patch does not wrap",
    "--enable-two-batch-overlap": "two-batch overlap splits the batch outside the draft/verify cycle the patch wraps",
    "--enable-pdmux": "PD multiplexing is not supported with the split draft",
}
# Flags refused whatever the draft placement.
_ALWAYS_REFUSED = {
    "--enable-nccl-nvls": "NVLink multicast stays off in every NCCL profile",
    "--enable-symm-mem": "symmetric memory turns NVLink multicast and NCCL_CUMEM on, against the NCCL profile",
}


# SGLang's adaptive tiers are refused by SGLang itself (adaptive_unsupported_reason: adaptive is then silently turned
# off) under these flags; Live step control needs the tiers, so the launcher refuses them with Live.
_LIVE_REFUSED = {
    "--enable-dp-attention": "SGLang's adaptive tiers are not synchronized across DP ranks",
    "--enable-multi-layer-eagle": "MultiLayerEagleWorkerV2 has no adaptive tiers",
    "--enable-two-batch-overlap": "a tier swap would discard the two-batch-overlap attention wrapper",
    "--enable-pdmux": "a tier swap does not update the PD-multiplexing backend group",
}
# The runtime owns SGLang's adaptive machinery: a user-supplied controller would change the step count behind the
# metrics' and the step table's back.
_OWNED_FLAGS = ("--speculative-adaptive", "--speculative-adaptive-config")

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
    return {"1": {"candidate_steps": captured_steps(cfg), "warmup_batches": NEVER, "update_interval": 1}}


def adaptive_config_path(environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return str(Path(environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR) / ADAPTIVE_CONFIG_NAME)


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


def _has_flag(args: Sequence[str], flag: str) -> bool:
    value = flag_value(args, flag)
    return value is not None and value.lower() not in ("false", "0", "no")


def unsupported_reasons(cfg: RuntimeConfig, args: Sequence[str], sglang_version: str | None) -> list[str]:
    """Everything the runtime refuses, checked without importing SGLang or touching a GPU."""
    reasons: list[str] = []
    if sglang_version is None:
        reasons.append(f"sglang is not installed; the runtime patches sglang=={SGLANG_VERSION}")
    elif sglang_version != SGLANG_VERSION:
        reasons.append(f"unsupported sglang {sglang_version}: the patches are written for sglang=={SGLANG_VERSION}")
    missing = unexpanded_refs(args)
    if missing:
        reasons.append(f"unset environment variable(s) {', '.join(missing)} referenced by the SGLang arguments")
    for flag, why in _ALWAYS_REFUSED.items():
        if _has_flag(args, flag):
            reasons.append(f"{flag}: {why}")
    target_tp, draft_tp = cfg.target.tensor_parallel_size, cfg.draft.tensor_parallel_size
    reasons += draft_tp_problems(target_tp, draft_tp, cfg.draft.ranks or None)
    if draft_is_split(cfg):
        for flag, why in _SPLIT_REFUSED.items():
            if _has_flag(args, flag):
                reasons.append(f"{flag} with a split draft (draft TP {draft_tp} < target TP {target_tp}): {why}")
        pp = flag_value(args, "--pp-size") or flag_value(args, "--pipeline-parallel-size")
        if pp not in (None, "1"):
            reasons.append("pipeline parallelism with a split draft: PP already hosts the draft on the last stage only")
        dp = flag_value(args, "--dp-size") or flag_value(args, "--data-parallel-size")
        if dp not in (None, "1"):
            reasons.append("data parallelism (--dp-size) with a split draft is not supported")
        if cfg.draft.algorithm not in ("EAGLE", "EAGLE3", "NEXTN"):
            reasons.append(f"the split draft supports EAGLE/EAGLE3/NEXTN drafts, not {cfg.draft.algorithm}")
    algo = (flag_value(args, "--speculative-algorithm") or cfg.draft.algorithm).upper()
    if algo != cfg.draft.algorithm.upper():
        reasons.append(f"--speculative-algorithm {algo} contradicts draft.algorithm {cfg.draft.algorithm}")
    for flag in _OWNED_FLAGS:
        if flag_value(args, flag) is not None:
            reasons.append(f"{flag}: the runtime writes SGLang's adaptive config itself (autotune mode Live, from "
                           "speculative.candidateSteps); another controller would change steps behind the step table")
    if live(cfg):
        spec = cfg.speculative
        if cfg.draft.algorithm not in ("EAGLE", "EAGLE3"):
            reasons.append(f"autotune Live needs SGLang's adaptive step tiers, which support EAGLE/EAGLE3 only, "
                           f"not {cfg.draft.algorithm}")
        if spec.eagle_top_k != 1:
            reasons.append(f"autotune Live needs SGLang's adaptive step tiers, which support eagleTopK 1 only, "
                           f"not {spec.eagle_top_k}")
        if spec.num_steps not in spec.candidate_steps:
            reasons.append(f"numSteps {spec.num_steps} is not in candidateSteps {sorted(spec.candidate_steps)}: "
                           "SGLang starts on numSteps and needs it captured")
        for flag, why in _LIVE_REFUSED.items():
            if _has_flag(args, flag):
                reasons.append(f"{flag} with autotune Live: {why}")
    return reasons


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


def plan_launch(config_path: str, extra: Sequence[str] = (), environ: dict[str, str] | None = None,
                sglang_version: str | None = "__detect__") -> LaunchPlan:
    """Everything ``launch`` will do, computed without importing SGLang (``--dry-run`` prints it)."""
    from .draft_group import DraftGroupError, choose_draft_ranks
    from .sglang_patch import installed_sglang_version

    cfg = model_paths.resolve(load_runtime_config(str(config_path)))  # pvc:// and hf:// -> local directories
    environ = dict(os.environ if environ is None else environ)
    env = nccl_environment(cfg)
    env["SPECDECODE_RUNTIME_CONFIG"] = str(Path(config_path).resolve())
    env[METRICS_DIR_ENV] = environ.get(METRICS_DIR_ENV) or DEFAULT_METRICS_DIR
    args = expand_env_refs(sglang_cli_args(cfg, list(extra)), environ)
    if cfg.target_device == "cpu":  # real SGLang on a CPU with the runtime's kernel stand-ins (specdecode_runtime.cpu)
        from .cpu import DEVICE_ENV
        from .cpu.engine import CLI_FLAGS

        args = [*CLI_FLAGS, *args]
        env[DEVICE_ENV] = "cpu"
    files: dict[str, str] = {}
    # Refusal checks see the user's arguments only (our own adaptive flags are appended after them).
    reasons = unsupported_reasons(cfg, args, installed_sglang_version() if sglang_version == "__detect__"
                                  else sglang_version)
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
    return LaunchPlan(config_path, args, env, draft_is_split(cfg), ranks, reasons, files, captured_steps(cfg),
                      cfg.server.control_port)


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
        lines.append(f"# step tiers captured at start-up: {plan.captured} (autotune Live; SGLang's own EMA "
                     "controller never decides)")
    else:
        lines.append(f"# step tiers captured at start-up: {plan.captured} (no live step changes)")
    for path, text in plan.files.items():
        lines.append(f"# file written at launch (not by --dry-run): {path}")
        lines += [f"#   {line}" for line in text.rstrip("\n").splitlines()]
    lines.append(f"# metrics: {METRICS_DIR_ENV}={plan.env.get(METRICS_DIR_ENV)} (*.db files removed at launch); "
                 "specdecode_* series on SGLang's /metrics")
    lines.append(f"# step control: GET/PUT /specdecode/v1/steps on port {plan.control_port} (TP rank 0)")
    return "\n".join(lines)


def _quote(a: str) -> str:
    import shlex

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
    from .sglang_patch import apply_patches, run_scheduler_process, split_config

    cfg = load_runtime_config(plan.config_path)
    if cfg.target_device == "cpu":
        from .cpu.engine import prepare_launch
        from .cpu.scheduler import run_scheduler_process  # noqa: F811 - installs the CPU stand-ins, then ours

        prepare_launch(cfg.target.tensor_parallel_size)
    apply_patches(split_config(cfg), nccl_environment(cfg), main_process=True)  # env re-apply + hooks
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(plan.args)
    launch_server(server_args, run_scheduler_process_func=run_scheduler_process)
    return 0
