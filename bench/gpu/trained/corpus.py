#!/usr/bin/env python3
"""A Python-source text corpus from the machine's own installed packages, split into training and held-out text
(or, with ``--suffix``, any other text files: C headers under /usr/include, licence texts).

The GPU machine has no network, but its site-packages hold hundreds of megabytes of real Python: enough to give a
few-hundred-million-parameter code model real structure in minutes. Files are read in sorted path order (the corpus
is the same on every run of the same image), each bounded in size, the whole bounded in bytes. A file goes to the
held-out split when a hash of its path says so, so no held-out text is ever trained on, whatever the byte limit.

Writes ``train.txt`` and ``heldout.txt`` (documents joined by ``<|endoftext|>``) and ``corpus.json`` (counts).

Usage:  python3 bench/gpu/trained/corpus.py --out DIR [--max-bytes 200000000] [--root DIR ...] [--suffix .py ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

EOT = "<|endoftext|>"
DEFAULT_MAX_BYTES = 200_000_000
DEFAULT_MAX_FILE_BYTES = 200_000
DEFAULT_HELDOUT_PERCENT = 2


def default_roots() -> list[str]:
    """This interpreter's purelib plus the site-packages that holds torch (another venv on some images)."""
    roots = [sysconfig.get_paths()["purelib"]]
    try:
        import torch

        roots.append(str(Path(torch.__file__).resolve().parent.parent))
    except ImportError:
        pass
    return list(dict.fromkeys(str(Path(r).resolve()) for r in roots))


def python_files(roots: list[str], suffixes: tuple[str, ...] = (".py",)) -> list[Path]:
    """Every file under ``roots`` whose name ends with one of ``suffixes`` (``*``: any name; default ``*.py``),
    resolved, deduplicated, in sorted order."""
    seen: set[Path] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in filenames:
                if "*" in suffixes or name.endswith(suffixes):
                    seen.add(Path(dirpath, name).resolve())
    return sorted(seen)


def is_heldout(path: Path, root_of: dict[Path, str], percent: int) -> bool:
    """Held out when the hash of the path (relative to its root, so the split is the same in any install prefix)
    falls in the lowest ``percent`` of 100 buckets."""
    rel = root_of.get(path, str(path))
    bucket = int.from_bytes(hashlib.sha256(rel.encode()).digest()[:8], "big") % 100
    return bucket < percent


def read_bounded(path: Path, max_file_bytes: int) -> str | None:
    """The file's text, or None when it is too large, unreadable, not UTF-8, or holds the separator itself."""
    try:
        if path.stat().st_size > max_file_bytes:
            return None
        with open(path, "rb") as f:
            data = f.read(max_file_bytes + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.strip() or EOT in text:
        return None
    return text


def build(
    out: Path,
    roots: list[str],
    max_bytes: int,
    max_file_bytes: int,
    heldout_percent: int,
    suffixes: tuple[str, ...] = (".py",),
) -> dict:
    """Write train.txt / heldout.txt / corpus.json under ``out``; returns the counts."""
    t0 = time.monotonic()
    files = python_files(roots, suffixes)
    root_of: dict[Path, str] = {}
    for root in sorted({str(Path(r).resolve()) for r in roots}, key=len):
        for p in files:
            if str(p).startswith(root + os.sep) and p not in root_of:
                root_of[p] = os.path.relpath(p, root)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"train": [0, 0], "heldout": [0, 0]}  # [files, bytes]
    skipped = 0
    total = 0
    with (
        open(out / "train.txt", "w", encoding="utf-8") as ftrain,
        open(out / "heldout.txt", "w", encoding="utf-8") as fheld,
    ):
        for p in files:
            if total >= max_bytes:
                break
            text = read_bounded(p, max_file_bytes)
            if text is None:
                skipped += 1
                continue
            split = "heldout" if is_heldout(p, root_of, heldout_percent) else "train"
            f = fheld if split == "heldout" else ftrain
            if counts[split][0]:
                f.write(EOT)
            f.write(text)
            n = len(text.encode("utf-8"))
            counts[split][0] += 1
            counts[split][1] += n
            total += n
    report = {
        "roots": roots,
        "suffixes": list(suffixes),
        "files_seen": len(files),
        "files_skipped": skipped,
        "train_files": counts["train"][0],
        "train_bytes": counts["train"][1],
        "heldout_files": counts["heldout"][0],
        "heldout_bytes": counts["heldout"][1],
        "max_bytes": max_bytes,
        "max_file_bytes": max_file_bytes,
        "heldout_percent": heldout_percent,
        "wall_s": round(time.monotonic() - t0, 2),
    }
    (out / "corpus.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _positive(name: str):
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            v = 0
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {s!r}")
        return v

    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for train.txt / heldout.txt / corpus.json")
    ap.add_argument(
        "--root",
        action="append",
        default=None,
        help="directory to collect *.py files from (repeatable; default: site-packages)",
    )
    ap.add_argument(
        "--suffix",
        action="append",
        default=None,
        help="file name ending to collect (repeatable; '*' for every file; default .py)",
    )
    ap.add_argument("--max-bytes", type=_positive("--max-bytes"), default=DEFAULT_MAX_BYTES)
    ap.add_argument("--max-file-bytes", type=_positive("--max-file-bytes"), default=DEFAULT_MAX_FILE_BYTES)
    ap.add_argument(
        "--heldout-percent", type=int, default=DEFAULT_HELDOUT_PERCENT, choices=range(1, 51), metavar="1..50"
    )
    args = ap.parse_args(argv)
    roots = args.root or default_roots()
    for r in roots:
        if not Path(r).is_dir():
            ap.error(f"--root {r!r} is not a directory")
    suffixes = tuple(args.suffix or [".py"])
    if any(not x for x in suffixes):
        ap.error("--suffix must not be empty (use '*' for every file)")
    report = build(args.out, roots, args.max_bytes, args.max_file_bytes, args.heldout_percent, suffixes)
    if not report["train_files"] or not report["heldout_files"]:
        print(f"corpus: too few files for both splits under {roots}: {report}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
