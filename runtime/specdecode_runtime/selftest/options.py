"""``selftest`` flags: parsed with argparse, then checked together so that a bad combination exits 2 with the flag
and what is allowed, before anything is started."""

from __future__ import annotations

import argparse
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..contract.derived import draft_tokens_per_cycle, draft_tp_problems, is_split_draft
from ..contract.server_args import is_managed_flag
from ..cpu.tiny_models import ShapeError, validate_shape

MAX_TP = 16
MAX_STEPS = 16
MAX_TOPK = 8
MAX_MODEL_CONFIG_BYTES = 64 * 1024


class OptionError(ValueError):
    """A flag value the self-test cannot run with (exit code 2)."""


@dataclass(frozen=True)
class Options:
    device: str = "cpu"
    tp: int = 2
    draft_tp: int = 1
    draft_ranks: tuple[int, ...] | None = None
    algorithm: str = "EAGLE"
    steps: int = 3
    topk: int = 1
    num_draft_tokens: int | None = None
    live_steps: tuple[int, ...] = ()
    model_config: dict[str, int] = field(default_factory=dict)
    model_path: str | None = None
    draft_model_path: str | None = None
    prompts: int = 2
    max_new_tokens: int = 24
    timeout: float = 600.0
    json: bool = False
    agree: bool = True
    layouts: tuple[str, ...] = ("nospec", "sharded", "split")
    keep: str | None = None
    sglang_args: tuple[str, ...] = ()  # extra SGLang argv, passed to every engine the self-test starts
    load_format: str | None = None  # "dummy": realistic shapes without weights (SGLang fills them at random)
    warmup: int = 1  # untimed generations before the timed one (graph warm-up, first-call kernel compilation)
    measure_batches: tuple[int, ...] = ()  # served cycle measured per batch size and tier (--measure-cycles)
    measure_tokens: int = 64  # decode tokens per request between the two generations a served cycle is timed from
    measure_repeats: int = 1  # timings per (tier, batch); the row reports their median (--measure-repeats)
    prompt_file: str | None = None  # text whose documents (split at <|endoftext|>) become the prompts (--model-path)
    prompt_tokens: int = 64  # tokens per prompt taken from each document
    corrupt_draft: bool = False
    draft_swaps: tuple[str, ...] = ()  # drafts POSTed to the draft endpoint during generation (--draft-swaps)

    @property
    def candidate_steps(self) -> list[int]:
        return sorted({self.steps, *self.live_steps})

    @property
    def draft_tokens(self) -> int:
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens

        chain = draft_tokens_per_cycle(self.steps, self.topk)
        return chain if chain is not None else min(self.topk * self.steps, 2 * self.steps + 2)


MAX_SGLANG_ARGS = 64
MAX_PROMPT_FILE_BYTES = 16 * 1024 * 1024
LOAD_FORMATS = ("auto", "dummy")
LAYOUTS = ("nospec", "stock", "sharded", "split")
# Flags the self-test sets itself for every layout (the runtime's managed flags plus what the self-test needs).
SELFTEST_FLAGS = ("--load-format", "--device", "--random-seed")


def _sglang_flags() -> tuple[dict[str, Any], list[str]]:
    """SGLang's own option strings and their actions (its argparse parser), or ({}, []) where SGLang is absent."""
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001 - no SGLang here: the engine's own parser reports a bad flag later
        return {}, []
    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    actions = dict(parser._option_string_actions)
    return actions, sorted(a for a in actions if a.startswith("--"))


def parse_sglang_args(items: list[str] | None) -> tuple[str, ...]:
    """``KEY[=VALUE]`` items (KEY with or without its leading ``--``) as SGLang argv. Each KEY must be one of
    SGLang's own options spelled out in full: SGLang's parser accepts unambiguous abbreviations, and the pinned
    version split ``--cuda-graph-max-bs`` into ``-decode`` / ``-prefill``, so an abbreviation silently means
    something else in the next release. Flags the runtime or the self-test set from typed options are refused."""

    items = list(items or [])
    if len(items) > MAX_SGLANG_ARGS:
        raise OptionError(f"--sglang-arg given {len(items)} times; at most {MAX_SGLANG_ARGS} allowed")
    actions, known = _sglang_flags()
    argv: list[str] = []
    for item in items:
        key, eq, value = str(item).partition("=")
        key = key.strip()
        flag = key if key.startswith("--") else f"--{key}"
        if not key or not flag[2:] or " " in flag:
            raise OptionError(f"--sglang-arg {item!r}: expected KEY[=VALUE], e.g. attention-backend=triton")
        if is_managed_flag(flag) or flag in SELFTEST_FLAGS:
            raise OptionError(
                f"--sglang-arg {flag}: set by the self-test from its own options (--tp, --steps, "
                "--topk, --algorithm, --model-path, --load-format, --device); not allowed here"
            )
        if known and flag not in actions:
            near = [k for k in known if k.startswith(flag)] or difflib.get_close_matches(flag, known, n=3)
            hint = f"; did you mean {', '.join(near[:4])}?" if near else ""
            raise OptionError(f"--sglang-arg {flag}: not an option of the installed SGLang{hint}")
        takes_value = actions[flag].nargs != 0 if flag in actions else bool(eq)
        if takes_value and not eq:
            raise OptionError(f"--sglang-arg {flag} takes a value: write {flag[2:]}=VALUE")
        if not takes_value and eq:
            raise OptionError(f"--sglang-arg {flag} is a switch and takes no value; write {flag[2:]}")
        argv.append(flag)
        if eq:
            many = flag in actions and actions[flag].nargs in ("+", "*")
            argv.extend(value.replace(",", " ").split() if many else [value])
    return tuple(argv)


def head_split_problem(heads: int, kv_heads: int, tp: int, device: str = "cuda") -> str | None:
    """Whether the pinned SGLang can load a Llama with these heads at TP ``tp`` on ``device``.

    CUDA: SGLang's own rule (``LlamaAttention``, ``QKVParallelLinear``): attention heads split evenly; KV heads split
    evenly when there are at least ``tp`` of them, else each is replicated on ``tp / kv_heads`` ranks, so
    ``kv_heads`` must divide ``tp``. CPU: SGLang pads the heads to a multiple of ``tp`` instead of replicating them
    (``configs/update_config.adjust_config_with_unaligned_cpu_tp``) and loading the padded KV heads then fails (KV
    heads 2 at TP 4: "start (24) + length (12) exceeds dimension size (24)"), so both counts must divide evenly."""
    if heads % tp:
        return f"num_attention_heads {heads} must be divisible by --tp {tp} (every rank holds whole heads)"
    if kv_heads >= tp and kv_heads % tp:
        return (
            f"num_key_value_heads {kv_heads} must be divisible by --tp {tp} (at least as many KV heads as "
            "ranks are split evenly)"
        )
    if kv_heads < tp and device == "cpu":
        return (
            f"num_key_value_heads {kv_heads} must be divisible by --tp {tp} on --device cpu (SGLang pads KV "
            "heads on a CPU instead of replicating them, and the padded heads do not load)"
        )
    if kv_heads < tp and tp % kv_heads:
        return (
            f"num_key_value_heads {kv_heads} must divide --tp {tp} (fewer KV heads than ranks are replicated, "
            "each on the same number of ranks)"
        )
    return None


def _int_list(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip() != "")
    except ValueError:
        raise OptionError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise OptionError(f"{flag} must list at least one integer")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu (torch stand-ins, gloo) or cuda (the runtime image)")
    p.add_argument("--tp", type=int, default=2, help="target tensor-parallel size (processes)")
    p.add_argument(
        "--draft-tp",
        type=int,
        default=None,
        help="draft TP size of the split layout (default: the length of --draft-ranks, else 1)",
    )
    p.add_argument("--draft-ranks", default=None, help="TP ranks of the split draft, comma-separated (e.g. 1 or 2,3)")
    p.add_argument("--algorithm", default="EAGLE", help="EAGLE or EAGLE3")
    p.add_argument("--steps", type=int, default=3, help="speculative steps at start")
    p.add_argument("--topk", type=int, default=1, help="EAGLE top-k (a tree when > 1)")
    p.add_argument("--num-draft-tokens", type=int, default=None, help="verify tree size (topk > 1)")
    p.add_argument(
        "--live-steps",
        default=None,
        help="step counts PUT to the control API one after another "
        "during generation, e.g. 1,5 (autotune Live: every value is captured as a tier)",
    )
    p.add_argument(
        "--model-config",
        default=None,
        help="YAML with the tiny target's shape (transformers config "
        "keys: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, "
        "intermediate_size, vocab_size)",
    )
    p.add_argument("--model-path", default=None, help="a real target model instead of the tiny one (cuda)")
    p.add_argument("--draft-model-path", default=None, help="its draft (with --model-path)")
    p.add_argument("--prompts", type=int, default=2, help="prompts generated together (batch size)")
    p.add_argument("--max-new-tokens", type=int, default=24, help="greedy tokens per prompt")
    p.add_argument(
        "--random-draft",
        action="store_true",
        help="a random draft instead of one that agrees with "
        "the target (exercises rejections; acceptance lengths stay near 1)",
    )
    p.add_argument(
        "--layouts",
        default="nospec,sharded,split",
        help="runs to compare (nospec,sharded,split; at "
        "least two to compare tokens, and split needs sharded: its proposals are checked against the sharded "
        "draft's; stock: the sharded layout's SGLang arguments on SGLang with no runtime patch, for a "
        "patched-vs-stock speed comparison; one layout alone is a measurement: its checks and costs are "
        "reported, tokens are not compared)",
    )
    p.add_argument(
        "--sglang-arg",
        action="append",
        default=None,
        metavar="KEY[=VALUE]",
        help="an SGLang argument for every engine started, e.g. attention-backend=triton (repeatable; "
        "full option names only)",
    )
    p.add_argument(
        "--load-format",
        default=None,
        choices=LOAD_FORMATS,
        help="dummy: realistic shapes from "
        "--model-config without weights (SGLang fills them at random; acceptance is then ~0)",
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed generations before the timed one (default 1)")
    p.add_argument(
        "--measure-cycles",
        default=None,
        metavar="BATCHES",
        help="after the timed generation, the "
        "served decode cycle per batch size (e.g. 1,8,32) and tier, next to the start-up cost probe's "
        "prediction",
    )
    p.add_argument(
        "--measure-repeats",
        type=int,
        default=1,
        help="timings of each served cycle (1..16); the row reports their median and keeps every sample",
    )
    p.add_argument(
        "--prompt-file",
        default=None,
        help="with --model-path: UTF-8 text (at most 16 MiB) whose "
        "documents, split at <|endoftext|>, give the prompts (held-out text for a trained model); "
        "default: synthetic token ids",
    )
    p.add_argument("--prompt-tokens", type=int, default=64, help="tokens per prompt from --prompt-file (default 64)")
    p.add_argument(
        "--measure-tokens",
        type=int,
        default=64,
        help="decode tokens per request a served cycle is timed over (default 64)",
    )
    p.add_argument(
        "--corrupt-draft",
        action="store_true",
        help="negative control: S's leader proposes one constant "
        "token in the split run; the draft checks must fail (exit 1)",
    )
    p.add_argument(
        "--draft-swaps",
        default=None,
        metavar="LIST",
        help="drafts loaded in place one after another while the prompts decode (POST to the draft endpoint), "
        "comma-separated: noisy (a copy of the served draft with noise added to every weight, made by the "
        "self-test), served (the draft the run started with) or an absolute path; the report lists each answer "
        "and checks every rank swapped at the same decode round",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run before ranks are reported hung")
    p.add_argument("--keep", default=None, help="directory to keep models, configs and rank records in")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


MAX_DRAFT_SWAPS = 8
DRAFT_SWAP_NAMES = ("noisy", "served")


def _draft_swaps(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    items = tuple(x.strip() for x in str(text).split(",") if x.strip())
    if not items or len(items) > MAX_DRAFT_SWAPS:
        raise OptionError(f"--draft-swaps must list 1..{MAX_DRAFT_SWAPS} drafts, got {len(items)}")
    bad = [x for x in items if x not in DRAFT_SWAP_NAMES and not x.startswith("/")]
    if bad:
        raise OptionError(f"--draft-swaps items must be noisy, served or an absolute path, got {bad}")
    return items


def _read_model_config(path: str, dummy: bool = False) -> dict[str, int]:
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise OptionError(f"--model-config {path}: {e.strerror or e}") from None
    if size > MAX_MODEL_CONFIG_BYTES:
        raise OptionError(f"--model-config {path} is {size} bytes; at most {MAX_MODEL_CONFIG_BYTES} allowed")
    try:
        data = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise OptionError(f"--model-config {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise OptionError(f"--model-config {path} must be a mapping of transformers config keys")
    try:
        validate_shape(data, dummy=dummy)
    except ShapeError as e:
        raise OptionError(f"--model-config {path}: {e}") from None
    return {str(k): int(v) for k, v in data.items()}


def from_namespace(ns: argparse.Namespace) -> Options:
    """Check every flag and their combination; :class:`OptionError` names the flag and what is allowed."""
    device = str(ns.device).lower()
    if device not in ("cpu", "cuda"):
        raise OptionError(f"--device must be cpu or cuda, got {ns.device!r}")
    if not 1 <= ns.tp <= MAX_TP:
        raise OptionError(f"--tp must be within 1..{MAX_TP}, got {ns.tp}")
    ranks = _int_list("--draft-ranks", ns.draft_ranks) if ns.draft_ranks is not None else None
    draft_tp = ns.draft_tp if ns.draft_tp is not None else (len(ranks) if ranks else 1)
    algorithm = str(ns.algorithm).upper()
    if algorithm not in ("EAGLE", "EAGLE3"):
        raise OptionError(f"--algorithm must be EAGLE or EAGLE3, got {ns.algorithm!r}")
    if not 1 <= ns.steps <= MAX_STEPS:
        raise OptionError(f"--steps must be within 1..{MAX_STEPS}, got {ns.steps}")
    if not 1 <= ns.topk <= MAX_TOPK:
        raise OptionError(f"--topk must be within 1..{MAX_TOPK}, got {ns.topk}")
    live = _int_list("--live-steps", ns.live_steps) if ns.live_steps is not None else ()
    bad = [steps for steps in live if not 0 <= steps <= MAX_STEPS]
    if bad:
        raise OptionError(f"--live-steps values must be within 0..{MAX_STEPS}, got {bad}")
    if live and ns.topk != 1:
        raise OptionError("--live-steps needs --topk 1: SGLang's step tiers support chains only")
    layouts = tuple(x.strip() for x in str(ns.layouts).split(",") if x.strip())
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown or not layouts:
        raise OptionError(f"--layouts must list {', '.join(LAYOUTS)}, got {ns.layouts!r}")
    if "stock" in layouts and live:
        raise OptionError("--layouts stock cannot take --live-steps: stock SGLang has no step-control API")
    if len(set(layouts)) < 2 and "split" in layouts:
        raise OptionError(
            f"--layouts with split must include sharded: the split draft's proposals and acceptance "
            f"are compared with the sharded draft's in the same states, got {ns.layouts!r}"
        )
    if "split" in layouts and "sharded" not in layouts:
        raise OptionError(
            f"--layouts with split must include sharded: the split draft's proposals and acceptance "
            f"are compared with the sharded draft's in the same states, got {ns.layouts!r}"
        )
    if getattr(ns, "corrupt_draft", False) and "split" not in layouts:
        raise OptionError("--corrupt-draft corrupts the split run's draft: --layouts must include split")
    swaps = _draft_swaps(getattr(ns, "draft_swaps", None))
    if swaps and live:
        raise OptionError("--draft-swaps cannot be combined with --live-steps (one mid-generation driver per run)")
    if swaps and not set(layouts) & {"sharded", "split"}:
        raise OptionError("--draft-swaps needs a speculative layout: --layouts must include sharded or split")
    if "split" in layouts:
        if ns.tp < 2:
            raise OptionError("the split layout needs --tp 2 or more (the draft on a subset of the target's ranks)")
        if not (draft_tp >= 1 and is_split_draft(draft_tp, ns.tp)):
            raise OptionError(f"--draft-tp must be within 1..{ns.tp - 1} (smaller than --tp), got {draft_tp}")
        problems = draft_tp_problems(ns.tp, draft_tp, ranks)
        if problems:
            flag = "--draft-ranks" if ranks is not None else "--draft-tp"
            raise OptionError(f"{flag}: {problems[0]}")
    ndt = ns.num_draft_tokens
    if ndt is not None:
        chain = draft_tokens_per_cycle(ns.steps, ns.topk)
        if ns.topk == 1 and ndt != chain:
            raise OptionError(f"--num-draft-tokens must be --steps + 1 = {chain} with --topk 1, got {ndt}")
        if ns.topk > 1 and not 2 <= ndt <= ns.topk * ns.steps + 1:
            raise OptionError(
                f"--num-draft-tokens must be within 2..{ns.topk * ns.steps + 1} with --topk "
                f"{ns.topk} and --steps {ns.steps}, got {ndt}"
            )
    if not 1 <= ns.prompts <= 16:
        raise OptionError(f"--prompts must be within 1..16, got {ns.prompts}")
    if not 1 <= ns.max_new_tokens <= 4096:
        raise OptionError(f"--max-new-tokens must be within 1..4096, got {ns.max_new_tokens}")
    if not 10 <= ns.timeout <= 86400:
        raise OptionError(f"--timeout must be within 10..86400 seconds, got {ns.timeout}")
    if (ns.model_path is None) != (ns.draft_model_path is None):
        raise OptionError("--model-path and --draft-model-path go together")
    if ns.model_path is not None and ns.model_config is not None:
        raise OptionError("--model-config describes the tiny model; it cannot be combined with --model-path")
    load_format = getattr(ns, "load_format", None)
    shape = _read_model_config(ns.model_config, dummy=load_format == "dummy") if ns.model_config is not None else {}
    if shape:
        full = validate_shape(shape, dummy=load_format == "dummy")
        problem = head_split_problem(full["num_attention_heads"], full["num_key_value_heads"], ns.tp, device)
        if problem:
            raise OptionError(f"--model-config: {problem}")
    warmup = int(getattr(ns, "warmup", 1))
    if not 0 <= warmup <= 8:
        raise OptionError(f"--warmup must be within 0..8, got {warmup}")
    measure = getattr(ns, "measure_cycles", None)
    batches = _int_list("--measure-cycles", measure) if measure is not None else ()
    if any(not 1 <= b <= 256 for b in batches):
        raise OptionError(f"--measure-cycles batch sizes must be within 1..256, got {list(batches)}")
    measure_tokens = int(getattr(ns, "measure_tokens", 64))
    measure_repeats = int(getattr(ns, "measure_repeats", 1))
    if not 1 <= measure_repeats <= 16:
        raise OptionError(f"--measure-repeats must be within 1..16, got {measure_repeats}")
    if not 8 <= measure_tokens <= 4096:
        raise OptionError(f"--measure-tokens must be within 8..4096, got {measure_tokens}")
    if load_format == "dummy" and ns.model_path is not None:
        raise OptionError("--load-format dummy describes a --model-config shape; a --model-path has its weights")
    sglang_args = parse_sglang_args(getattr(ns, "sglang_arg", None))
    prompt_file = getattr(ns, "prompt_file", None)
    prompt_tokens = int(getattr(ns, "prompt_tokens", 64))
    if prompt_file is not None:
        if ns.model_path is None:
            raise OptionError("--prompt-file needs --model-path: its text is tokenized with that model's tokenizer")
        if not Path(prompt_file).is_file():
            raise OptionError(f"--prompt-file {prompt_file}: no such file")
        if Path(prompt_file).stat().st_size > MAX_PROMPT_FILE_BYTES:
            raise OptionError(f"--prompt-file {prompt_file} is larger than {MAX_PROMPT_FILE_BYTES} bytes")
    if not 4 <= prompt_tokens <= 2048:
        raise OptionError(f"--prompt-tokens must be within 4..2048, got {prompt_tokens}")
    return Options(
        device=device,
        tp=ns.tp,
        draft_tp=draft_tp,
        draft_ranks=ranks,
        algorithm=algorithm,
        steps=ns.steps,
        topk=ns.topk,
        num_draft_tokens=ndt,
        live_steps=live,
        model_config=shape,
        model_path=ns.model_path,
        draft_model_path=ns.draft_model_path,
        prompts=ns.prompts,
        max_new_tokens=ns.max_new_tokens,
        timeout=float(ns.timeout),
        json=bool(ns.json),
        agree=not ns.random_draft,
        layouts=tuple(dict.fromkeys(layouts)),
        keep=ns.keep,
        corrupt_draft=bool(getattr(ns, "corrupt_draft", False)),
        draft_swaps=swaps,
        sglang_args=sglang_args,
        load_format=load_format,
        warmup=warmup,
        measure_batches=tuple(sorted(set(batches))),
        measure_tokens=measure_tokens,
        measure_repeats=measure_repeats,
        prompt_file=prompt_file,
        prompt_tokens=prompt_tokens,
    )
