"""How fast the host's CPU is, minute to minute, apart from the server, and what the server's scheduler process did.

Why: on the lent GPU machine one configuration of a small target measured again and again ran 1.58x apart with the
GPU's SM clock fixed, and the server's host launch time per cycle moved by the same factor. Either the machine's CPU
speed wanders (a virtual machine's neighbours, frequency scaling) or the server slows itself (a structure growing
per cycle, garbage collection). A fixed pure-Python workload timed in a process of its own tells them apart: if it
slows with the server, the host moved; if it does not, the server did. ``/proc/stat``'s steal time says whether the
hypervisor took the CPU away.

    python3 host_probe.py sample FILE [--period 0.2]   # a sampler process: one line per sample, until killed

``HostSampler`` starts and stops that process; ``window(t0, t1)`` summarises the samples inside a measurement.
``scheduler_stats()`` reads SGLang's scheduler process(es) (named ``sglang::scheduler`` by SGLang) from ``/proc``:
CPU seconds, involuntary context switches and the CPU it last ran on; ``pin(core)`` binds its main thread.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORK = 20000  # iterations of the fixed workload: about 1-2 ms of one core


def _steal_jiffies() -> float:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return float(fields[8]) if len(fields) > 8 else 0.0
    except OSError:
        return 0.0


def sample_forever(path: Path, period: float) -> None:
    with path.open("a", buffering=1) as out:
        while True:
            t0 = time.perf_counter()
            acc = 0
            for i in range(WORK):
                acc += i * i
            dt = time.perf_counter() - t0
            out.write(f"{time.time():.4f} {dt * 1000.0:.4f} {_steal_jiffies():.0f}\n")
            time.sleep(period)


class HostSampler:
    def __init__(self, path: Path, period: float = 0.2):
        self.path, self.period = path, period
        self.proc: subprocess.Popen | None = None

    def start(self) -> HostSampler:
        self.path.write_text("")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "sample", str(self.path), "--period", str(self.period)],
            start_new_session=True,
        )
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)

    def samples(self) -> list[tuple[float, float, float]]:
        rows = []
        for line in self.path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                rows.append((float(parts[0]), float(parts[1]), float(parts[2])))
        return rows

    def window(self, t0: float, t1: float) -> dict:
        """Median workload time (ms) and steal jiffies per second between two ``time.time()`` stamps."""
        rows = [r for r in self.samples() if t0 <= r[0] <= t1]
        if not rows:
            return {}
        steal = (rows[-1][2] - rows[0][2]) / max(rows[-1][0] - rows[0][0], 1e-9) if len(rows) > 1 else 0.0
        return {
            "workload_ms": round(statistics.median(r[1] for r in rows), 4),
            "samples": len(rows),
            "steal_per_s": round(steal, 2),
        }


def scheduler_pids(pgid: int | None = None) -> list[int]:
    """The SGLang scheduler processes on this machine, or only those of process group ``pgid`` (one server's: another
    server beside it, or an engine of another program, is not the one being pinned)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if b"sglang::scheduler" in (d / "cmdline").read_bytes() and (
                pgid is None or os.getpgid(int(d.name)) == pgid
            ):
                out.append(int(d.name))
        except (OSError, ValueError):
            continue
    return sorted(out)


def scheduler_stats() -> dict:
    """CPU seconds (user + system), involuntary context switches and last CPU of the scheduler process(es)."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, invol, last = 0.0, 0, []
    for pid in scheduler_pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            last.append(int(fields[36]))
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches"):
                    invol += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return {"cpu_s": round(cpu, 3), "involuntary_switches": invol, "last_cpu": last}


def stats_delta(before: dict, after: dict) -> dict:
    return {
        "cpu_s": round(after.get("cpu_s", 0.0) - before.get("cpu_s", 0.0), 3),
        "involuntary_switches": after.get("involuntary_switches", 0) - before.get("involuntary_switches", 0),
        "last_cpu": after.get("last_cpu"),
    }


def _siblings(core: int) -> set[int]:
    path = Path(f"/sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list")
    out = {core}
    try:
        for part in path.read_text().strip().split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except (OSError, ValueError):
        pass
    return out


def pin(core: int, server_pgid: int, also: tuple[int, ...] = ()) -> dict:
    """Bind each scheduler process's main thread to ``core`` and keep everything else of the server (its other
    threads and processes), this process and its children off that core and its hyperthread siblings: the
    scheduler's loop then never waits for a core nor shares one."""
    everything = os.sched_getaffinity(0)
    reserved = _siblings(core)
    rest = everything - reserved
    sched = scheduler_pids(server_pgid)
    moved = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        try:
            if os.getpgid(pid) != server_pgid and pid != os.getpid() and pid not in also:
                continue
            for task in (d / "task").iterdir():
                tid = int(task.name)
                os.sched_setaffinity(tid, {core} if (pid in sched and tid == pid) else rest)
                moved.append(tid)
        except (OSError, ValueError):
            continue
    return {"core": core, "reserved": sorted(reserved), "scheduler_pids": sched, "threads_bound": len(moved)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("file", type=Path)
    s.add_argument("--period", type=float, default=0.2)
    a = p.parse_args()
    sample_forever(a.file, a.period)
    return 0


if __name__ == "__main__":
    sys.exit(main())
