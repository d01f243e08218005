"""Run a list of CPU SGLang engines one after another in this process and report each as a JSON line.

``python -m specdecode_runtime.cpu.host < runs.json`` — stdin: ``{"runs": [{"name": ..., "model_dir": ...,
"draft_dir": ..., "tp": 1, "algorithm": "EAGLE", "steps": 3, "topk": 1, "num_draft_tokens": null, "prompts":
[[1, 5, 9]], "max_new_tokens": 16, "extra": {}}]}``; stdout: one ``{"name", "tokens", "meta", "startup_s",
"generate_s"}`` (or ``{"name", "error"}``) line per run, then ``{"done": true}``.

Why a process of its own: ``Engine.shutdown`` kills every child of the process that started the engine, and a
failing scheduler makes SGLang kill that process's whole tree; a test runner, or anything else that has children,
must not be that process. One host serves many runs, and their SGLang processes fork from one preloaded
forkserver (:func:`.engine.share_preloaded_children`), so SGLang is imported twice for all of them.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any, TextIO

from .engine import CpuSGLang, share_preloaded_children

RUN_KEYS = (
    "name",
    "model_dir",
    "draft_dir",
    "tp",
    "algorithm",
    "steps",
    "topk",
    "num_draft_tokens",
    "prompts",
    "max_new_tokens",
    "extra",
)
MAX_RUNS = 64
MAX_INPUT_BYTES = 1 << 20


def _emit(out: TextIO, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def run_one(run: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: run[k] for k in ("tp", "algorithm", "steps", "topk", "num_draft_tokens", "extra") if k in run}
    with CpuSGLang(run["model_dir"], run.get("draft_dir"), **kwargs) as engine:
        result = engine.generate(run["prompts"], int(run.get("max_new_tokens", 16)))
    return {
        "name": run.get("name"),
        "tokens": result.tokens,
        "meta": result.meta,
        "startup_s": round(result.startup_s, 3),
        "generate_s": round(result.generate_s, 3),
    }


def main(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    text = stdin.read(MAX_INPUT_BYTES + 1)
    if len(text) > MAX_INPUT_BYTES:
        print(f"input larger than {MAX_INPUT_BYTES} bytes", file=sys.stderr)
        return 2
    try:
        runs = json.loads(text)["runs"]
        if not isinstance(runs, list) or len(runs) > MAX_RUNS:
            raise ValueError(f"runs must be a list of at most {MAX_RUNS} objects")
        for i, run in enumerate(runs):
            if not isinstance(run, dict) or "name" not in run or "model_dir" not in run:
                raise ValueError(f"runs[{i}] must be an object with at least name and model_dir")
            unknown = sorted(set(run) - set(RUN_KEYS))
            if unknown:
                raise ValueError(f"runs[{i}]: unknown keys {unknown}; allowed: {', '.join(RUN_KEYS)}")
    except (ValueError, KeyError, TypeError) as e:
        print(f"invalid input: {e}", file=sys.stderr)
        return 2

    share_preloaded_children()
    for run in runs:
        try:
            _emit(stdout, run_one(run))
        except Exception as e:  # noqa: BLE001 - reported per run; the next run still starts
            _emit(
                stdout,
                {
                    "name": run.get("name"),
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-4000:],
                },
            )
    _emit(stdout, {"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
