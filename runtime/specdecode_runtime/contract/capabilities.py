"""What a runtime pod can run: the algorithms, the refusals and the step tiers, in one place.

Three consumers must agree on these facts or a user finds out at the worst moment: ``specdecode validate`` and the
operator (which refuse a spec before anything is applied), and ``specdecode-runtime launch`` (which refuses it in
the pod, exit 2). All three call :func:`serving_problems`; the renderer, the tuner, the simulator, the demo and the
benchmark read the tiers a pod serves from :func:`step_candidates` / :func:`tuner_steps`.

Refusals that depend on the pod rather than the config (the installed SGLang version, unset environment variables
in the arguments) are the launcher's own; everything that follows from ``runtime.yaml`` is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# The algorithm names live in the leaf module .algorithms; re-exported here for the CRD model.
from .algorithms import ALGORITHMS as ALGORITHMS
from .algorithms import DEFAULT_ALGORITHM as DEFAULT_ALGORITHM
from .algorithms import Algorithm as Algorithm
from .config import RuntimeConfig
from .derived import draft_is_split, draft_tp_problems, live
from .server_args import flag_value, sglang_cli_args

SPLIT_DRAFT_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # the draft worker the split patch wraps
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")  # the pinned SGLang's adaptive step tiers (Live mode)

# Flags the split draft cannot serve, with the reason.
SPLIT_REFUSED = {
    "--speculative-use-rejection-sampling": "rejection sampling needs the draft's probabilities on every rank; the "
    "split draft broadcasts only its tokens",
    "--enable-dp-attention": "DP attention changes the draft's attention layout; the split draft supports pure TP "
    "targets only",
    "--enable-multi-layer-eagle": "multi-layer EAGLE uses MultiLayerEagleWorkerV2, which the patch does not wrap",
    "--enable-two-batch-overlap": "two-batch overlap splits the batch outside the draft/verify cycle the patch wraps",
    "--enable-pdmux": "PD multiplexing is not supported with the split draft",
}
# Flags refused whatever the draft placement.
ALWAYS_REFUSED = {
    "--enable-nccl-nvls": "NVLink multicast stays off in every NCCL profile",
    "--enable-symm-mem": "symmetric memory turns NVLink multicast and NCCL_CUMEM on, against the NCCL profile",
}
# SGLang's adaptive tiers are refused by SGLang itself (adaptive_unsupported_reason: adaptive is then silently turned
# off) under these flags; Live step control needs the tiers, so they are refused with Live.
LIVE_REFUSED = {
    "--enable-dp-attention": "SGLang's adaptive tiers are not synchronized across DP ranks",
    "--enable-multi-layer-eagle": "MultiLayerEagleWorkerV2 has no adaptive tiers",
    "--enable-two-batch-overlap": "a tier swap would discard the two-batch-overlap attention wrapper",
    "--enable-pdmux": "a tier swap does not update the PD-multiplexing backend group",
}
# The runtime owns SGLang's adaptive machinery: a user-supplied controller would change the step count behind the
# metrics' and the step table's back.
OWNED_FLAGS = ("--speculative-adaptive", "--speculative-adaptive-config")

# Refusals that are not a flag table entry (each flag of the tables above is its own rule, named by the flag).
RULES = (
    "draft-tp",
    "split-pp",
    "split-dp",
    "split-algorithm",
    "algorithm-flag",
    "live-algorithm",
    "live-top-k",
    "live-num-steps",
    "served-warmup",
)


@dataclass(frozen=True, order=True)
class ServingProblem:
    """One refusal: the ``runtime.yaml`` field it concerns (``extraArgs`` for SGLang flags), the message, and the
    rule that made it (a name of :data:`RULES` or ``<table>:<flag>``; tests use it to cover every rule)."""

    field: str
    message: str
    rule: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def rule_names() -> list[str]:
    """Every refusal rule :func:`serving_problems` applies."""
    tables = {
        "always": ALWAYS_REFUSED,
        "split": SPLIT_REFUSED,
        "live": LIVE_REFUSED,
        "owned": dict.fromkeys(OWNED_FLAGS, ""),
    }
    return [*RULES, *(f"{name}:{flag}" for name, table in tables.items() for flag in table)]


def _has_flag(args: Sequence[str], flag: str) -> bool:
    value = flag_value(args, flag)
    return value is not None and value.lower() not in ("false", "0", "no")


def serving_problems(cfg: RuntimeConfig, args: Sequence[str] | None = None) -> list[ServingProblem]:
    """Everything the runtime refuses to serve for ``cfg``; empty when a pod can run it.

    ``args`` are SGLang's arguments as the launcher will pass them (default: :func:`sglang_cli_args` of ``cfg``,
    which ends with ``cfg.extra_args``). Checked without importing SGLang or touching a GPU."""
    args = sglang_cli_args(cfg) if args is None else list(args)
    out: list[ServingProblem] = []
    for flag, why in ALWAYS_REFUSED.items():
        if _has_flag(args, flag):
            out.append(ServingProblem("extraArgs", f"{flag}: {why}", f"always:{flag}"))
    target_tp, draft_tp = cfg.target.tensor_parallel_size, cfg.draft.tensor_parallel_size
    algorithm = cfg.draft.algorithm
    out += [
        ServingProblem("draft.tensorParallelSize", p, "draft-tp")
        for p in draft_tp_problems(target_tp, draft_tp, cfg.draft.ranks or None)
    ]
    if draft_is_split(cfg):
        split = f"with a split draft (draft TP {draft_tp} < target TP {target_tp})"
        for flag, why in SPLIT_REFUSED.items():
            if _has_flag(args, flag):
                out.append(ServingProblem("extraArgs", f"{flag} {split}: {why}", f"split:{flag}"))
        pp = flag_value(args, "--pp-size") or flag_value(args, "--pipeline-parallel-size")
        if pp not in (None, "1"):
            out.append(
                ServingProblem(
                    "extraArgs",
                    f"pipeline parallelism {split}: PP already hosts the draft on the last stage only",
                    "split-pp",
                )
            )
        dp = flag_value(args, "--dp-size") or flag_value(args, "--data-parallel-size")
        if dp not in (None, "1"):
            out.append(
                ServingProblem("extraArgs", f"data parallelism (--dp-size) {split} is not supported", "split-dp")
            )
        if algorithm not in SPLIT_DRAFT_ALGORITHMS:
            out.append(
                ServingProblem(
                    "draft.algorithm",
                    f"{algorithm} {split}: the split draft supports "
                    f"{'/'.join(SPLIT_DRAFT_ALGORITHMS)} drafts only; set draft.tensorParallelSize "
                    f"to {target_tp} for {algorithm}",
                    "split-algorithm",
                )
            )
    flag_algorithm = (flag_value(args, "--speculative-algorithm") or algorithm).upper()
    if flag_algorithm != algorithm.upper():
        out.append(
            ServingProblem(
                "extraArgs",
                f"--speculative-algorithm {flag_algorithm} contradicts draft.algorithm {algorithm}",
                "algorithm-flag",
            )
        )
    for flag in OWNED_FLAGS:
        if flag_value(args, flag) is not None:
            out.append(
                ServingProblem(
                    "extraArgs",
                    f"{flag}: the runtime writes SGLang's adaptive config itself "
                    "(autotune mode Live, from speculative.candidateSteps); another controller "
                    "would change steps behind the step table",
                    f"owned:{flag}",
                )
            )
    if live(cfg):
        spec = cfg.speculative
        if algorithm not in ADAPTIVE_ALGORITHMS:
            out.append(
                ServingProblem(
                    "draft.algorithm",
                    f"autotune Live needs SGLang's adaptive step tiers, which "
                    f"support {'/'.join(ADAPTIVE_ALGORITHMS)} only, not {algorithm}",
                    "live-algorithm",
                )
            )
        if spec.eagle_top_k != 1:
            out.append(
                ServingProblem(
                    "speculative.eagleTopK",
                    f"autotune Live needs SGLang's adaptive step tiers, "
                    f"which support eagleTopK 1 only, not {spec.eagle_top_k}",
                    "live-top-k",
                )
            )
        if spec.num_steps not in spec.candidate_steps:
            out.append(
                ServingProblem(
                    "speculative.numSteps",
                    f"numSteps {spec.num_steps} is not in candidateSteps "
                    f"{sorted(spec.candidate_steps)}: SGLang starts on numSteps and needs it "
                    "captured",
                    "live-num-steps",
                )
            )
        for flag, why in LIVE_REFUSED.items():
            if _has_flag(args, flag):
                out.append(ServingProblem("extraArgs", f"{flag} with autotune Live: {why}", f"live:{flag}"))
    probe = getattr(cfg, "cost_probe", None)
    if probe is not None and probe.served is not None and _has_flag(args, "--skip-server-warmup"):
        out.append(
            ServingProblem(
                "costProbe.served",
                "the served calibration runs in SGLang's server warm-up, which --skip-server-warmup skips; "
                "remove one of them",
                "served-warmup",
            )
        )
    return out


# ---- the step tiers a pod serves ------------------------------------------------------------------------------------
MAX_CANDIDATES = 8  # every step count of a default 1..7 range; bench/results/tuner.md shows what thinning to 4 costs
TARGET_ONLY_STEPS = 0


def candidate_steps(min_steps: int, max_steps: int, current: int, limit: int = MAX_CANDIDATES) -> list[int]:
    """Step counts the runtime captures CUDA graphs for: the bounds, the current value, and evenly spread values in
    between, at most ``limit`` of them (each capture costs memory and start-up time)."""
    lo, hi = min(min_steps, max_steps), max(min_steps, max_steps)
    chosen = {lo, hi, min(max(current, lo), hi)}
    span = list(range(lo, hi + 1))
    slots = max(limit - len(chosen), 0)
    if slots and len(span) > 2:
        for i in range(1, slots + 1):
            chosen.add(span[round(i * (len(span) - 1) / (slots + 1))])
            if len(chosen) >= limit:
                break
    return sorted(chosen)[: max(limit, 1)] if len(chosen) > limit else sorted(chosen)


def autotune_steps(mode: str, min_steps: int, max_steps: int, steps: int) -> tuple[int, list[int]]:
    """The starting step count and the ``candidateSteps`` written into runtime.yaml for an autotune mode.

    Off keeps ``steps`` as the only candidate; Live and Rollout clamp it into ``min..max`` and spread the
    candidates over that range (Live captures them all; Rollout uses them as the values a restart may choose).
    Live also captures the target-only tier, steps 0: the pinned SGLang decodes it through its trivial one-token verify
    (no draft forward, no proposal broadcast; the draft still extends its KV so a later tier drafts from a warm
    state), which is how the tuner switches speculation off for batch sizes where drafting loses. Rollout never
    restarts pods into steps 0: a restart re-renders ``--speculative-num-steps``, which SGLang needs >= 1."""
    if mode == "Off":
        return steps, [steps]
    steps = min(max(steps, min_steps), max_steps)
    spread = candidate_steps(min_steps, max_steps, steps)
    return steps, ([TARGET_ONLY_STEPS, *spread] if mode == "Live" else spread)


def tuner_steps(mode: str, min_steps: int, max_steps: int, steps: int) -> list[int]:
    """The step counts the tuner may choose, all of them ones a pod rendered for ``mode`` can serve: in Live the
    tiers the pod captures (steps 0 included); in Rollout the values a restart renders as they are (no 0); in Off
    (report only) the Live set, so a recommendation names what switching to Live would serve."""
    return autotune_steps("Rollout" if mode == "Rollout" else "Live", min_steps, max_steps, steps)[1]


def step_candidates(cfg: RuntimeConfig) -> list[int]:
    """The step tiers a pod running ``cfg`` serves (CUDA graphs captured at start-up): ``candidateSteps`` in Live
    mode, steps 0 included, else only ``numSteps``.

    Off never changes the step count and Rollout changes it by restarting pods, so capturing extra tiers there would
    only cost GPU memory and start-up time."""
    if live(cfg):
        return sorted(set(int(steps) for steps in cfg.speculative.candidate_steps))
    return [int(cfg.speculative.num_steps)]
