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


def write_section(results: Path, name: str, keys: dict, heading: str, section: str, title: str) -> None:
    """Merge ``keys`` into ``results/NAME.json`` (the other keys kept) and put ``section`` in ``results/NAME.md`` in
    place of the one under ``heading`` (appended when there is none): one results file filled by several commands,
    each regenerating only its own part (bench/results/draft_swap.*: the CPU canary and the GPU swap)."""
    path = results / f"{name}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(keys)
    path.write_text(json.dumps(data, indent=2) + "\n")
    md = results / f"{name}.md"
    text = md.read_text() if md.exists() else f"# {title}\n\n"
    if heading + "\n" in text:
        head, _, rest = text.partition(heading + "\n")
        nxt = rest.find("\n## ")
        text = head + (section.rstrip("\n") + "\n\n" + rest[nxt + 1 :] if nxt >= 0 else section)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    md.write_text(text)
