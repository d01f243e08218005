"""Translate a :class:`~specdecode_runtime.contract.config.RuntimeConfig` into the pinned SGLang's command-line
arguments.

Pure and deterministic: no sglang or torch import, the same config always gives the same list. Two users:

* the renderer, for ``runtime.launcher: sglang`` (a stock SGLang image started as
  ``python3 -m sglang.launch_server <args>``);
* ``specdecode-runtime launch``, which hands the same list to SGLang's own parser in-process.

Only stock SGLang flags are emitted. What stock SGLang cannot express (the draft's own TP size and ranks, the
step-control port, the NCCL profile) travels in ``runtime.yaml`` and is applied by the launcher's patches and
environment, never as a flag.

Multi-node targets (``topology.nodes > 1``) need each pod's node rank and the rank-0 address, which only the pod
knows. They are written as Kubernetes dependent-variable references, ``$(SPECDECODE_NODE_RANK)`` and
``$(SPECDECODE_DIST_INIT_ADDR)``: the kubelet expands them in a container's ``args`` from the container's
environment, and the launcher expands them itself from ``os.environ`` (see :func:`expand_env_refs`).
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Mapping, Sequence

from .config import RuntimeConfig
from .derived import num_draft_tokens

NODE_RANK_ENV = "SPECDECODE_NODE_RANK"
DIST_INIT_ADDR_ENV = "SPECDECODE_DIST_INIT_ADDR"
HOST = "0.0.0.0"

# Flags this module sets from typed fields, and the other spellings SGLang's parser accepts for the same options:
# a second occurrence in user arguments would silently fight the typed field (argparse keeps the last one), so
# runtime.extraArgs (CEL, api/rules.py) and the self-test's --sglang-arg refuse every name here.
MANAGED_FLAGS = (
    "--model-path",
    "--tp-size",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--quantization",
    "--context-length",
    "--host",
    "--port",
    "--enable-metrics",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
)
MANAGED_FLAG_ALIASES = ("--model", "--tensor-parallel-size", "--tp")
# Every other speculative flag too, in runtime.extraArgs: the typed speculative fields, the Live step tiers and the
# runtime's adaptive config own speculation in a deployment (the self-test, a tool, lets an operator try them).
MANAGED_FLAG_FAMILY = "--speculative-"


def is_managed_flag(arg: str) -> bool:
    """True when ``arg`` (``--flag`` or ``--flag=value``) names an option this module sets (any spelling)."""
    name = arg.split("=", 1)[0]
    return name in MANAGED_FLAGS or name in MANAGED_FLAG_ALIASES


def extra_args_pattern() -> str:
    """RE2 pattern (CEL ``matches``) of one runtime.extraArgs item that sets a managed flag or a speculative one,
    with or without ``=value``."""
    names = [f[2:] for f in (*MANAGED_FLAGS, *MANAGED_FLAG_ALIASES)] + [MANAGED_FLAG_FAMILY[2:] + ".*"]
    return "^--(" + "|".join(names) + ")(=.*)?$"


_ENV_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def sglang_cli_args(cfg: RuntimeConfig, extra: Sequence[str] | Iterable[str] = ()) -> list[str]:
    """The pinned SGLang's CLI arguments for ``cfg``, followed by ``cfg.extra_args`` and then ``extra``.

    The order is fixed (managed flags first, user arguments last) so the output is stable for golden tests and
    rendered manifests; with argparse the last occurrence of a flag wins.
    """
    t, d, s = cfg.target, cfg.draft, cfg.speculative
    args: list[str] = [
        "--model-path",
        t.model,
        "--tp-size",
        str(t.tensor_parallel_size),
    ]
    if t.quantization:
        args += ["--quantization", t.quantization]
    if t.context_length:
        args += ["--context-length", str(t.context_length)]
    args += [
        "--speculative-algorithm",
        d.algorithm,
        "--speculative-draft-model-path",
        d.model,
        "--speculative-num-steps",
        str(s.num_steps),
        "--speculative-eagle-topk",
        str(s.eagle_top_k),
    ]
    ndt = num_draft_tokens(cfg)
    if ndt is not None:
        args += ["--speculative-num-draft-tokens", str(ndt)]
    args += ["--host", HOST, "--port", str(cfg.server.port), "--enable-metrics"]
    if cfg.topology.nodes > 1:
        args += [
            "--nnodes",
            str(cfg.topology.nodes),
            "--node-rank",
            f"$({NODE_RANK_ENV})",
            "--dist-init-addr",
            f"$({DIST_INIT_ADDR_ENV})",
        ]
    args += [str(a) for a in cfg.extra_args]
    args += [str(a) for a in extra]
    return args


def expand_env_refs(args: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Expand ``$(VAR)`` references the way the kubelet does; an unset variable is left as written (the kubelet
    does the same), and the launcher then refuses it with a clear message."""
    env = os.environ if env is None else env

    def sub(m: re.Match[str]) -> str:
        return env.get(m.group(1), m.group(0))

    return [_ENV_REF.sub(sub, a) for a in args]


def unexpanded_refs(args: Sequence[str]) -> list[str]:
    """Variable names still written as ``$(VAR)`` after expansion."""
    return sorted({m.group(1) for a in args for m in _ENV_REF.finditer(a)})


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given for ``flag`` (``--flag v`` or ``--flag=v``); ``"true"`` for a bare boolean flag."""
    value: str | None = None
    for i, a in enumerate(args):
        if a == flag:
            nxt = args[i + 1] if i + 1 < len(args) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else "true"
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value
