"""Capture of served traffic: finished requests (prompt and output token ids) appended to JSON-lines files on a
volume, within a byte budget and a retention time (``runtime.yaml`` ``capture``, docs/runtime.md "Capturing served
traffic").

The scheduler thread only offers a record: sampling and a bounded queue decide at once (a full queue drops the
record and counts it), and the record itself is built only once it is taken. A daemon thread serialises, writes,
rotates and removes files, so the scheduler loop never waits on the disk.

Files are ``<pod>-<YYYYMMDD>T<HH>Z-<seq>.jsonl``: one per pod per UTC hour, or sooner once a file reaches
``rotate_bytes``. The budget covers this pod's files (its name is the host name, which Kubernetes sets to the pod
name): before a record is written the oldest of them are removed until it fits, so the directory's share of this
pod never exceeds ``max_bytes``; a record larger than the whole budget is refused (dropped). Retention covers every
capture file in the directory whatever pod wrote it (the pods of one deployment share the policy, and a replaced
pod's files have no other owner left): a file whose last record is older than ``retention_seconds`` is removed.

Every record is a JSON object of one line: ``time`` (UNIX seconds, when the request finished), ``prompt_ids``,
``output_ids`` (the tokens the client received, stop token included), ``finish`` (SGLang's finish reason) and,
where known, ``draft`` (the served draft's source and digest).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from .contract.config import CaptureConfig

log = logging.getLogger("specdecode.capture")

WRITTEN, DROPPED, SAMPLED_OUT = "written", "dropped", "sampled_out"
QUEUE_SIZE = 4096  # records waiting for the writer; beyond it the scheduler drops rather than waits
MAX_FILE_BYTES = 64 << 20  # a file is closed at this size (or at the hour), whichever comes first
SWEEP_SECONDS = 60.0  # retention is checked at least this often, traffic or not
FILE_PATTERN = re.compile(r"^(?P<pod>.+)-(?P<hour>\d{8}T\d{2}Z)-(?P<seq>\d{6})\.jsonl$")


def pod_name() -> str:
    """The pod's name as Kubernetes sets the host name (``HOSTNAME`` first: what a container's shell sees)."""
    name = os.environ.get("HOSTNAME") or socket.gethostname() or "pod"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


@dataclass(frozen=True)
class CaptureSettings:
    """What the writer needs from ``runtime.yaml`` (plain data)."""

    directory: str
    max_bytes: int
    retention_seconds: float
    sample_ratio: float = 1.0

    @classmethod
    def from_config(cls, cfg: CaptureConfig) -> CaptureSettings:
        return cls(cfg.dir, int(cfg.max_bytes), float(cfg.retention_seconds), float(cfg.sample_ratio))


class CaptureWriter:
    """One per pod (TP rank 0's scheduler process). ``offer`` from the scheduler thread; everything on the disk
    happens in the writer thread. ``on_result(result, count)`` and ``on_bytes(total)`` feed the metrics."""

    def __init__(
        self,
        settings: CaptureSettings,
        *,
        pod: str | None = None,
        queue_size: int = QUEUE_SIZE,
        rotate_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
        on_result: Callable[[str, int], None] | None = None,
        on_bytes: Callable[[int], None] | None = None,
        sweep_seconds: float = SWEEP_SECONDS,
    ) -> None:
        self.settings = settings
        self.pod = pod or pod_name()
        self.rotate_bytes = max(1, rotate_bytes or min(MAX_FILE_BYTES, settings.max_bytes // 8))
        self._clock, self._rng = clock, rng
        self._on_result, self._on_bytes = on_result, on_bytes
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._sweep_seconds = min(sweep_seconds, max(settings.retention_seconds / 4, 1.0))
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.counts = {WRITTEN: 0, DROPPED: 0, SAMPLED_OUT: 0}
        self._count_lock = threading.Lock()
        # writer thread only
        self._own: dict[str, int] = {}  # this pod's files: name -> bytes
        self._current: Any = None  # open file object
        self._current_name: str | None = None
        self._current_hour: str | None = None
        self._seq = 0
        self._last_sweep = 0.0
        self._warned_large = False

    # ---- scheduler thread ------------------------------------------------------------------------------------------
    def offer(self, build: Callable[[], dict[str, Any]]) -> str:
        """Sample, then queue ``build()`` (called only when the record is kept); never blocks. The result:
        ``sampled_out``, ``dropped`` (queue full, or the writer stopped) or ``queued``."""
        ratio = self.settings.sample_ratio
        if ratio < 1.0 and not self._rng() < ratio:
            self._count(SAMPLED_OUT)
            return SAMPLED_OUT
        if self._stopping.is_set() or self._queue.full():
            self._count(DROPPED)
            return DROPPED
        record = build()
        record.setdefault("time", self._clock())
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._count(DROPPED)
            return DROPPED
        return "queued"

    def _count(self, result: str, n: int = 1) -> None:
        with self._count_lock:
            self.counts[result] += n
        if self._on_result is not None:
            try:
                self._on_result(result, n)
            except Exception:  # noqa: BLE001 - metrics never stop the capture
                log.exception("specdecode: capture metrics")

    # ---- life cycle ------------------------------------------------------------------------------------------------
    def start(self) -> CaptureWriter:
        os.makedirs(self.settings.directory, exist_ok=True)
        self._scan()
        self._sweep(self._clock())
        self._thread = threading.Thread(target=self._run, name="specdecode-capture", daemon=True)
        self._thread.start()
        log.info(
            "specdecode: capturing finished requests to %s (pod %s, budget %d bytes, retention %.0f s, sample %.3g)",
            self.settings.directory,
            self.pod,
            self.settings.max_bytes,
            self.settings.retention_seconds,
            self.settings.sample_ratio,
        )
        return self

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every queued record is on the disk (tests, and a clean stop)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._queue.put(None)  # wakes the writer; it drains what was queued before
            self._thread.join(timeout)
            self._thread = None
        self._close_current()

    @property
    def total_bytes(self) -> int:
        return sum(self._own.values())

    # ---- writer thread ---------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                record = self._queue.get(timeout=self._sweep_seconds)
            except queue.Empty:
                self._guarded(self._sweep, self._clock())
                continue
            try:
                if record is None:
                    return
                self._guarded(self._write, record)
            finally:
                self._queue.task_done()
            now = self._clock()
            if now - self._last_sweep >= self._sweep_seconds:
                self._guarded(self._sweep, now)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except OSError as e:  # a full or lost volume: count the record lost, keep serving
            log.warning("specdecode: capture: %s", e)
            if fn == self._write:
                self._count(DROPPED)
            self._close_current()

    def _write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        size = len(line)
        if size > self.settings.max_bytes:
            if not self._warned_large:
                log.warning(
                    "specdecode: capture: a record of %d bytes exceeds the whole budget (%d bytes): dropped",
                    size,
                    self.settings.max_bytes,
                )
                self._warned_large = True
            self._count(DROPPED)
            return
        hour = time.strftime("%Y%m%dT%HZ", time.gmtime(float(record.get("time") or self._clock())))
        if (
            self._current is None
            or hour != self._current_hour
            or self._own.get(self._current_name or "", 0) + size > self.rotate_bytes
        ):
            self._open(hour)
        self._make_room(size)
        if self._current is None:  # the open file was the oldest and had to go
            self._open(hour)
        assert self._current_name is not None
        self._current.write(line)
        self._current.flush()
        self._own[self._current_name] += size
        self._count(WRITTEN)
        self._report_bytes()

    def _make_room(self, size: int) -> None:
        """Remove this pod's oldest files until ``size`` more bytes fit the budget."""
        while self._own and self.total_bytes + size > self.settings.max_bytes:
            oldest = min(self._own)  # names sort by hour, then sequence
            if oldest == self._current_name:
                self._close_current()
            self._remove(oldest)

    def _open(self, hour: str) -> None:
        self._close_current()
        self._seq += 1
        name = f"{self.pod}-{hour}-{self._seq:06d}.jsonl"
        self._current = open(os.path.join(self.settings.directory, name), "ab")  # noqa: SIM115 - kept open
        self._current_name, self._current_hour = name, hour
        self._own.setdefault(name, 0)

    def _close_current(self) -> None:
        if self._current is not None:
            try:
                self._current.close()
            except OSError:
                pass
        self._current = self._current_name = self._current_hour = None

    def _remove(self, name: str) -> None:
        try:
            os.remove(os.path.join(self.settings.directory, name))
        except FileNotFoundError:
            pass
        self._own.pop(name, None)

    def _scan(self) -> None:
        """This pod's files already on the volume (a restarted pod of the same name keeps its budget)."""
        for entry in os.scandir(self.settings.directory):
            m = FILE_PATTERN.match(entry.name)
            if m and m.group("pod") == self.pod and entry.is_file():
                self._own[entry.name] = entry.stat().st_size
                self._seq = max(self._seq, int(m.group("seq")))
        self._report_bytes()

    def _sweep(self, now: float) -> None:
        """Remove every capture file (any pod's) whose last write is older than the retention."""
        self._last_sweep = now
        horizon = now - self.settings.retention_seconds
        seen = set()
        for entry in os.scandir(self.settings.directory):
            if not FILE_PATTERN.match(entry.name) or not entry.is_file():
                continue
            try:
                expired = entry.stat().st_mtime < horizon
            except FileNotFoundError:
                continue
            if expired:
                if entry.name == self._current_name:
                    self._close_current()
                self._remove(entry.name)
            else:
                seen.add(entry.name)
        for name in [n for n in self._own if n not in seen and n != self._current_name]:
            self._own.pop(name)  # removed by someone else (another pod's retention sweep, an operator's hand)
        self._report_bytes()

    def _report_bytes(self) -> None:
        if self._on_bytes is not None:
            try:
                self._on_bytes(self.total_bytes)
            except Exception:  # noqa: BLE001 - metrics never stop the capture
                log.exception("specdecode: capture metrics")
