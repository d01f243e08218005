"""The table of bench/results/chaos.md, from the rows the chaos suite appends to bench/results/chaos.jsonl.

rm -f bench/results/chaos.jsonl
SPECDECODE_CHAOS_RECORD=1 .venv/bin/python -m pytest tests/chaos -q
.venv/bin/python tests/chaos/report.py
"""

from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def table(rows: list[dict]) -> str:
    lines = [
        "| scenario | fault | converged (s) | lost | duplicated | crashed | peak RSS (MB) | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        notes = ", ".join(f"{k} {v}" for k, v in (r.get("notes") or {}).items())
        lines.append(
            f"| {r['scenario']} | {r['fault']} | {r['converged_s']} | {r['lost']} | {r['duplicated']} | "
            f"{r['crashed']} | {r['peak_rss_mb']} | {notes} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the table (pasted into chaos.md with the run's conditions)."""
    rows = [json.loads(line) for line in (RESULTS / "chaos.jsonl").read_text().splitlines() if line.strip()]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
