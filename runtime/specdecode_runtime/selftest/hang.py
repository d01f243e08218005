"""Naming a hang: which rank waits, and in which collective, from each scheduler's own stack dump.

Every scheduler process under ``selftest`` registers :mod:`faulthandler` on ``SIGUSR1``
(:mod:`.rank_probe`). When a run outlives its timeout the supervisor signals each rank, reads the dumps and
reports, per rank, the innermost ``torch.distributed`` call of the scheduler thread (the collective it waits in)
and the first frame of SGLang or the runtime above it (who issued it). No debugger or py-spy is needed.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_COLLECTIVE_FILES = ("torch/distributed/", "sglang/srt/distributed/")
_CALLER_HINTS = ("specdecode_runtime/", "sglang/srt/")
_COLLECTIVE_NAMES = frozenset(
    {
        "all_reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all_single",
        "barrier",
        "monitored_barrier",
        "broadcast_object_list",
        "all_gather_object",
        "reduce",
        "gather",
        "scatter",
        "send",
        "recv",
        "new_group",
        "broadcast_pyobj",
        "broadcast_object",
    }
)


def _in_distributed(frame: dict) -> bool:
    return any(k in frame["file"] for k in _COLLECTIVE_FILES)


def rank_pids(directory: str | os.PathLike[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for f in Path(directory).glob("rank*.pid"):
        try:
            out[int(f.stem[4:])] = int(f.read_text().strip())
        except ValueError:
            continue
    return out


def _threads(text: str) -> list[list[dict]]:
    """faulthandler's dump as a list of threads, each a list of frames, most recent first."""
    threads: list[list[dict]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
            continue
        m = _FRAME.match(line)
        if m and threads:
            threads[-1].append({"file": m["file"], "line": int(m["line"]), "func": m["func"]})
    return threads


def summarize_stack(text: str) -> dict:
    """The scheduler thread's collective and its caller (or its innermost frame when it waits in none)."""
    threads = _threads(text)
    if not threads:
        return {"waiting_in": None, "detail": "no stack dump (the process did not answer SIGUSR1)"}
    main = next(
        (t for t in threads if any("scheduler" in f["file"] or f["func"] == "run_scheduler_process" for f in t)),
        threads[-1],
    )
    for i, f in enumerate(main):
        if _in_distributed(f):
            j = i  # the distributed block: [i, j]
            while j + 1 < len(main) and _in_distributed(main[j + 1]):
                j += 1
            block = main[i : j + 1]
            op = next((g for g in block if g["func"] in _COLLECTIVE_NAMES), block[0])
            caller = next(
                (g for g in main[j + 1 :] if any(k in g["file"] for k in _CALLER_HINTS)),
                main[j + 1] if j + 1 < len(main) else None,
            )
            return {
                "waiting_in": op["func"],
                "where": f"{op['file']}:{op['line']}",
                "called_from": f"{caller['func']} ({caller['file']}:{caller['line']})" if caller else None,
            }
    top = main[0] if main else None
    return {
        "waiting_in": None,
        "detail": f"innermost frame {top['func']} ({top['file']}:{top['line']})" if top else "empty stack",
    }


def diagnose(directory: str | os.PathLike[str], wait: float = 2.0) -> dict[int, dict]:
    """Signal every rank for a stack dump and summarize it, per TP rank."""
    d = Path(directory)
    pids = rank_pids(d)
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass
    time.sleep(wait)
    out: dict[int, dict] = {}
    for rank, pid in sorted(pids.items()):
        f = d / f"rank{rank}.stack"
        text = f.read_text(errors="replace") if f.exists() else ""
        out[rank] = {"pid": pid, **summarize_stack(text)}
    return out


def describe(diag: dict[int, dict]) -> str:
    if not diag:
        return "no scheduler process had started"
    parts = []
    for rank, d in sorted(diag.items()):
        if d.get("waiting_in"):
            parts.append(f"rank {rank} waits in {d['waiting_in']} ({d['where']}), called from {d.get('called_from')}")
        else:
            parts.append(f"rank {rank}: {d.get('detail')}")
    return "; ".join(parts)
