"""``specdecode-runtime launch``: runtime.yaml -> NCCL environment -> patches -> SGLang's server, in-process.

Order matters and is fixed here:

1. read and validate ``runtime.yaml`` and the extra SGLang arguments, **before** importing SGLang or touching a
   GPU; anything the patch cannot serve exits 2 with the reason (:func:`unsupported_reasons`);
2. put the NCCL profile into ``os.environ`` (SGLang and NCCL read it at import / communicator creation);
3. record the config path in ``SPECDECODE_RUNTIME_CONFIG`` so every spawned scheduler process re-applies the
   profile and installs the same patches (:func:`specdecode_runtime.sglang_patch.run_scheduler_process`);
4. parse the translated arguments with SGLang's own ``prepare_server_args`` and start
   ``sglang.srt.entrypoints.http_server.launch_server`` in this process.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from . import SGLANG_VERSION
from .config import RuntimeConfig
from .nccl import profile_env
from .server_args import expand_env_refs, flag_value, sglang_cli_args, unexpanded_refs

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


class UnsupportedConfig(Exception):
    """A config the runtime refuses before any GPU work (exit code 2)."""

    def __init__(self, reasons: Sequence[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


def load_config(path: str | os.PathLike[str]) -> RuntimeConfig:
    return RuntimeConfig.from_yaml(Path(path).read_text())


def nccl_environment(cfg: RuntimeConfig) -> dict[str, str]:
    return profile_env(cfg.nccl.profile, multi_node=cfg.topology.nodes > 1, overrides=dict(cfg.nccl.env))


def is_split(cfg: RuntimeConfig) -> bool:
    return cfg.draft.tensor_parallel_size < cfg.target.tensor_parallel_size


def split_config(cfg: RuntimeConfig):
    """The patches' view of the config; None when the draft runs on the whole target group."""
    from .sglang_patch import SplitConfig

    return SplitConfig.from_runtime_config(cfg) if is_split(cfg) else None


def _has_flag(args: Sequence[str], flag: str) -> bool:
    value = flag_value(args, flag)
    return value is not None and value.lower() not in ("false", "0", "no")


def unsupported_reasons(cfg: RuntimeConfig, args: Sequence[str], sglang_version: str | None) -> list[str]:
    """Everything the runtime refuses, checked without importing SGLang or touching a GPU."""
    from .draft_group import DraftGroupError, choose_draft_ranks

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
    tp, d = cfg.target.tensor_parallel_size, cfg.draft.tensor_parallel_size
    if d > tp:
        reasons.append(f"draft TP {d} is larger than target TP {tp}: the draft group must be inside the target group")
    if is_split(cfg) or cfg.draft.ranks:
        try:
            choose_draft_ranks(tp, d, cfg.draft.ranks)
        except DraftGroupError as e:
            reasons.append(str(e))
    if is_split(cfg):
        for flag, why in _SPLIT_REFUSED.items():
            if _has_flag(args, flag):
                reasons.append(f"{flag} with a split draft (draft TP {d} < target TP {tp}): {why}")
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
    return reasons


@dataclass
class LaunchPlan:
    config_path: str
    args: list[str]
    env: dict[str, str]
    split: bool
    draft_ranks: tuple[int, ...] | None
    reasons: list[str] = field(default_factory=list)


def plan_launch(config_path: str, extra: Sequence[str] = (), environ: dict[str, str] | None = None,
                sglang_version: str | None = "__detect__") -> LaunchPlan:
    """Everything ``launch`` will do, computed without importing SGLang (``--dry-run`` prints it)."""
    from .draft_group import DraftGroupError, choose_draft_ranks
    from .sglang_patch import installed_sglang_version

    cfg = load_config(config_path)
    environ = dict(os.environ if environ is None else environ)
    env = nccl_environment(cfg)
    env["SPECDECODE_RUNTIME_CONFIG"] = str(Path(config_path).resolve())
    args = expand_env_refs(sglang_cli_args(cfg, list(extra)), environ)
    version = installed_sglang_version() if sglang_version == "__detect__" else sglang_version
    ranks = None
    if is_split(cfg):
        try:
            ranks = choose_draft_ranks(cfg.target.tensor_parallel_size, cfg.draft.tensor_parallel_size, cfg.draft.ranks)
        except DraftGroupError:
            ranks = None
    return LaunchPlan(config_path, args, env, is_split(cfg), ranks, unsupported_reasons(cfg, args, version))


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
    return "\n".join(lines)


def _quote(a: str) -> str:
    import shlex

    return shlex.quote(a)


def launch(config_path: str, extra: Sequence[str] = (), *, dry_run: bool = False, out=None) -> int:
    out = out or sys.stdout
    try:
        plan = plan_launch(config_path, extra)
    except (OSError, ValueError) as e:  # unreadable or invalid runtime.yaml (pydantic errors are ValueErrors)
        print(f"specdecode-runtime: cannot read {config_path}: {e}", file=sys.stderr)
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


def _start(plan: LaunchPlan) -> int:  # pragma: no cover - needs GPUs and a model
    os.environ.update(plan.env)  # before SGLang is imported
    from .sglang_patch import apply_patches, run_scheduler_process

    cfg = load_config(plan.config_path)
    apply_patches(split_config(cfg), nccl_environment(cfg), main_process=True)  # env re-apply + hooks
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(plan.args)
    launch_server(server_args, run_scheduler_process_func=run_scheduler_process)
    return 0
