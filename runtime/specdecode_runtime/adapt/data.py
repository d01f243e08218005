"""Captured traffic as training and held-out data (docs/runtime.md "Training a draft from captured traffic").

:func:`read_capture` reads the JSON-lines files the capture writes (:mod:`specdecode_runtime.capture`: one object per
line with ``prompt_ids``, ``output_ids``, ``finish``, ``time``, ``draft``), newest file first, within a byte and a
record limit; a line that is not such a record is skipped and counted, never raised. :func:`split_of` puts a record
in ``train`` or ``heldout`` by a hash of its prompt ids alone: the same record lands in the same split whichever files
were read and however they grew, and the requests of one prompt (a retry, a sampled variant) never straddle the
split. :func:`token_windows` cuts training records (prompt + output) into windows; :func:`heldout_pairs` gives the
held-out (prompt, served output) pairs the scorer drafts over, in a stable order.

Standard library only: the command validates its input before torch is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ..contract.cli_common import UsageError

DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_MAX_RECORDS = 200_000
MAX_LINE_BYTES = 16 << 20  # one record; longer lines are skipped (and counted) without being held in memory
MAX_FILES = 100_000
DEFAULT_HELDOUT_PERCENT = 10.0
SCORED_FINISHES = ("length", "stop")  # a continuation the target chose to the end (not an abort)
TRAIN, HELDOUT = "train", "heldout"
FILE_SUFFIX = ".jsonl"


class CaptureError(UsageError):
    """A capture directory that cannot be read at all (missing, not a directory, unreadable)."""


@dataclass(frozen=True)
class Record:
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    finish: str | None  # SGLang's finish reason type: length, stop, abort
    time: float | None = None
    draft_digest: str | None = None

    @property
    def key(self) -> str:
        """What the split is decided by: sha256 of the prompt ids."""
        return record_key(self.prompt_ids)


@dataclass
class ReadStats:
    """What :func:`read_capture` read and skipped; ``limit`` names the bound that stopped it (``bytes``,
    ``records``) or is None when every file was read whole."""

    files: int = 0
    bytes_read: int = 0
    records: int = 0
    malformed: int = 0
    incomplete: int = 0  # a last line without its newline: a file still being written
    out_of_vocab: int = 0
    unreadable_files: list[str] = field(default_factory=list)
    limit: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "bytes_read": self.bytes_read,
            "records": self.records,
            "malformed": self.malformed,
            "incomplete": self.incomplete,
            "out_of_vocab": self.out_of_vocab,
            "unreadable_files": self.unreadable_files[:8],
            "limit": self.limit,
        }


def record_key(prompt_ids: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(prompt_ids), separators=(",", ":")).encode()).hexdigest()


def split_of(record: Record, heldout_percent: float = DEFAULT_HELDOUT_PERCENT) -> str:
    """``heldout`` for the records whose key falls in the first ``heldout_percent`` of the hash space."""
    return HELDOUT if int(record.key[:16], 16) < heldout_percent / 100.0 * 2**64 else TRAIN


def capture_files(directory: Path, flag: str = "--capture") -> list[Path]:
    """The directory's ``*.jsonl`` files, newest first: by the capture's ``<pod>-<hour>-<seq>`` name (hour, then
    sequence, then pod), other names after them by modification time."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        raise CaptureError(f"{flag} {directory}: no such directory") from None
    except NotADirectoryError:
        raise CaptureError(f"{flag} {directory}: not a directory (the capture directory is expected)") from None
    except OSError as e:
        raise CaptureError(f"{flag} {directory}: {e.strerror or e}") from None

    def order(e: os.DirEntry) -> tuple:
        stem = e.name[: -len(FILE_SUFFIX)]
        parts = stem.rsplit("-", 2)
        if len(parts) == 3 and parts[2].isdigit() and len(parts[1]) == 12 and parts[1][8] == "T":
            return (1, parts[1], int(parts[2]), parts[0])
        try:
            return (0, e.stat().st_mtime, 0, e.name)
        except OSError:
            return (0, 0.0, 0, e.name)

    files = [e for e in entries if e.name.endswith(FILE_SUFFIX) and e.is_file()]
    files.sort(key=order, reverse=True)
    return [Path(e.path) for e in files[:MAX_FILES]]


def _lines(f: Any, limit: int) -> Iterator[tuple[bytes | None, int]]:
    """(line, bytes) per line; None for a line longer than ``limit`` (consumed in chunks, never held whole)."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            size = len(line)
            while True:
                rest = f.readline(1 << 20)
                size += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None, size
            continue
        yield line, len(line)


def _ids(value: Any, vocab_size: int | None) -> tuple[int, ...] | None | bool:
    """The token ids of a list, None when it is not a list of non-negative ints, False when one is past the
    vocabulary."""
    if not isinstance(value, list):
        return None
    for v in value:
        if type(v) is not int or v < 0:
            return None
    if vocab_size is not None and value and max(value) >= vocab_size:
        return False
    return tuple(value)


def parse_record(raw: bytes, vocab_size: int | None = None) -> Record | None | bool:
    """A record from one line; None when malformed, False when a token id is outside ``vocab_size``."""
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    prompt, output = _ids(obj.get("prompt_ids"), vocab_size), _ids(obj.get("output_ids"), vocab_size)
    if prompt is None or output is None:
        return None
    if prompt is False or output is False:
        return False
    if not prompt:
        return None
    finish = obj.get("finish")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    when = obj.get("time")
    draft = obj.get("draft")
    digest = draft.get("digest") if isinstance(draft, dict) else None
    return Record(
        prompt_ids=prompt,  # type: ignore[arg-type]  # checked above: a tuple
        output_ids=output,  # type: ignore[arg-type]
        finish=kind if isinstance(kind, str) else None,
        time=float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None,
        draft_digest=digest if isinstance(digest, str) else None,
    )


def read_capture(
    directory: str | Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_records: int = DEFAULT_MAX_RECORDS,
    vocab_size: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    flag: str = "--capture",
) -> tuple[list[Record], ReadStats]:
    """Records of the capture directory, newest file first, until ``max_bytes`` bytes or ``max_records`` records
    have been read. A file that cannot be opened is listed in the stats and skipped."""
    stats = ReadStats()
    records: list[Record] = []
    for path in capture_files(Path(directory), flag):
        if stats.limit:
            break
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            stats.unreadable_files.append(f"{path.name}: {e.strerror or e}")
            continue
        stats.files += 1
        with f:
            try:
                for line, size in _lines(f, max_line_bytes):
                    if stats.bytes_read + size > max_bytes:
                        stats.limit = "bytes"
                        break
                    stats.bytes_read += size
                    if line is None:
                        stats.malformed += 1
                        continue
                    if not line.endswith(b"\n"):
                        stats.incomplete += 1
                        continue
                    rec = parse_record(line, vocab_size)
                    if rec is None:
                        stats.malformed += 1
                    elif rec is False:
                        stats.out_of_vocab += 1
                    else:
                        assert isinstance(rec, Record)
                        records.append(rec)
                        stats.records += 1
                        if stats.records >= max_records:
                            stats.limit = "records"
                            break
            except OSError as e:
                stats.unreadable_files.append(f"{path.name}: {e.strerror or e}")
    return records, stats


def split(records: Iterable[Record], heldout_percent: float = DEFAULT_HELDOUT_PERCENT) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {TRAIN: [], HELDOUT: []}
    for r in records:
        out[split_of(r, heldout_percent)].append(r)
    return out


def token_windows(records: Iterable[Record], length: int, min_length: int = 8) -> list[list[int]]:
    """Each record's prompt + output ids, cut into windows of at most ``length`` tokens: consecutive windows from
    the start, the last one ending at the record's end; sequences shorter than ``min_length`` are left out."""
    out: list[list[int]] = []
    for r in records:
        ids = list(r.prompt_ids) + list(r.output_ids)
        if len(ids) < min_length:
            continue
        if len(ids) <= length:
            out.append(ids)
            continue
        starts = list(range(0, len(ids) - length + 1, length))
        if starts[-1] + length < len(ids):
            starts.append(len(ids) - length)
        out.extend(ids[s : s + length] for s in starts)
    return out


def heldout_pairs(
    records: Iterable[Record], *, max_pairs: int, min_output: int, max_len: int
) -> tuple[list[tuple[list[int], list[int]]], dict[str, int]]:
    """(prompt ids, served output ids) of the records whose finish was ``length`` or ``stop`` and whose output has
    more than ``min_output`` tokens, ordered by record key (a stable sample as the capture grows), at most
    ``max_pairs``; each cut to ``max_len`` tokens (the prompt's tail, the output's head). Also the counts left out."""
    skipped = {"finish": 0, "short": 0}
    eligible = []
    for r in records:
        if r.finish not in SCORED_FINISHES:
            skipped["finish"] += 1
        elif len(r.output_ids) <= min_output:
            skipped["short"] += 1
        else:
            eligible.append(r)
    eligible.sort(key=lambda r: (r.key, r.output_ids))
    pairs = []
    for r in eligible[:max_pairs]:
        out = list(r.output_ids[: max(max_len // 2, max_len - len(r.prompt_ids))])
        prompt = list(r.prompt_ids[-(max_len - len(out)) :])
        pairs.append((prompt, out))
    return pairs, skipped
