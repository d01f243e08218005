"""The one command line of the GPU summarizers: raw reports in, ``bench/results/NAME.{json,md}`` out.

Each summarizer (``summarize_tp1.py``, ``trained/summarize_trained.py``, ``trained/summarize_load.py``) is a pure
``summarize(raw_dir) -> dict`` and ``markdown(dict) -> str``; this writes both files and prints the keys a reader
checks first, so every GPU result is regenerated the same way from its committed raw files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]


def main(
    doc: str | None,
    name: str,
    default_raw: str,
    summarize: Callable[[Path], dict],
    markdown: Callable[[dict], str],
    show: Sequence[str],
) -> int:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", default=str(ROOT / default_raw), help="folder of the run's raw reports")
    ap.add_argument("--out", default=str(ROOT / "bench/results"), help=f"folder for {name}.json and {name}.md")
    ap.add_argument("--name", default=name, help=f"the results' file name (default {name}; another device's run)")
    args = ap.parse_args()
    name = args.name
    s = summarize(Path(args.raw))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(s, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown(s))
    print(json.dumps({k: s[k] for k in show}, indent=1))
    return 0
