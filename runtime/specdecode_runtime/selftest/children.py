"""Noticing a dead SGLang child at once: a scheduler that dies while the engine starts (a failed import, a model
it cannot build) can leave the parent waiting for a ready message that never comes, which on a GPU wastes the whole
``--timeout``. The self-test polls its child processes twice a second and reports the first that exits, with its
exit code and the last lines of every rank's log."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Callable

POLL_S = 0.5
LOG_LINES = 12


def last_log_lines(rank_dir: Path, n: int = LOG_LINES) -> dict[str, list[str]]:
    """The last ``n`` lines of every ``rank<r>.log`` (read from the end, at most 64 KiB per file)."""
    out: dict[str, list[str]] = {}
    for f in sorted(Path(rank_dir).glob("rank*.log")):
        try:
            with f.open("rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(size - 65536, 0))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        out[f.stem] = [ln for ln in text.splitlines() if ln.strip()][-n:]
    return out


class ChildWatch:
    """Calls ``on_death(description)`` from a daemon thread when a child process this process started exits while
    the watch runs (``stop()`` ends it before a clean shutdown)."""

    def __init__(self, rank_dir: Path, on_death: Callable[[str], None], poll_s: float = POLL_S) -> None:
        self.rank_dir = Path(rank_dir)
        self.on_death = on_death
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._seen: dict[int, multiprocessing.process.BaseProcess] = {}
        self._ignored: set[int] = set()
        self._thread = threading.Thread(target=self._run, name="selftest-child-watch", daemon=True)

    def start(self) -> ChildWatch:
        # Children alive now are not the ones to watch (a previous engine's, still shutting down): only children
        # started after this call are reported.
        self._ignored = {p.pid for p in multiprocessing.active_children() if p.pid is not None}
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def dead(self) -> list[multiprocessing.process.BaseProcess]:
        """Children seen before that are no longer alive (``active_children`` reaps them). Every child this process
        started and has not reaped yet counts as seen, dead or alive: one that dies between two polls (a scheduler
        failing on an import within ``poll_s``) would otherwise be reaped before it was ever seen, and never
        reported. multiprocessing keeps that set in ``multiprocessing.process._children`` (CPython 3.8-3.13)."""
        started = list(getattr(multiprocessing.process, "_children", ()))
        self._seen.update({p.pid: p for p in started if p.pid is not None and p.pid not in self._ignored})
        alive = {p.pid: p for p in multiprocessing.active_children() if p.pid is not None}
        gone = [p for pid, p in self._seen.items() if pid not in alive]
        self._seen.update({pid: p for pid, p in alive.items() if pid not in self._ignored})
        for p in gone:
            if p.pid is not None:
                self._seen.pop(p.pid, None)
        return gone

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            gone = self.dead()
            if gone and not self._stop.is_set():
                self.on_death(describe(gone, self.rank_dir))
                return


def describe(gone: list, rank_dir: Path) -> str:
    parts = [f"SGLang child process {p.name} (pid {p.pid}) exited with code {p.exitcode}" for p in gone]
    logs = last_log_lines(rank_dir)
    for name, lines in logs.items():
        if lines:
            parts.append(f"last lines of {name}.log:\n    " + "\n    ".join(lines))
    return "; ".join(parts[: len(gone)]) + ("\n" + "\n".join(parts[len(gone) :]) if logs else "")
