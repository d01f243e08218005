"""The one renderer of bench results: raw reports in, ``bench/results/NAME.{json,md}`` out.

Each summarizer (``bench/gpu/campaigns/summarize_*.py``) is a pure ``summarize(raw_dir) -> dict`` and
``markdown(dict) -> str``; this module holds what they share:

- provenance: every summary records the run's ``commit``, ``device``, ``date`` and ``commands`` from the raw
  folder's ``meta.json`` (:func:`provenance`; a meta without one of them is refused, naming the key) and ends its
  markdown with the same section (:func:`provenance_md`); :func:`write` refuses a summary without it;
- the statistics the summaries print (:func:`median_ci`, a median with a bootstrap interval);
- markdown tables (:func:`table`);
- the command line (:func:`main`) and the writer of one section of a results file filled by several commands
  (:func:`write_section`).

A committed summary regenerates byte for byte from its committed raw files (tests/bench).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PROVENANCE = ("commit", "device", "date", "commands")
BOOTSTRAP = 2000


class ProvenanceError(ValueError):
    """A run's meta.json lacks what every summary records."""


def provenance(meta_path: Path) -> dict[str, Any]:
    """``commit``, ``device``, ``date`` and ``commands`` (a list of the command lines that produced the raw
    reports) from a run's meta file; a missing file or key, or an empty value, raises naming it."""
    if not meta_path.is_file():
        raise ProvenanceError(f"{meta_path}: missing (a summary records {', '.join(PROVENANCE)} from it)")
    meta = json.loads(meta_path.read_text())
    for key in PROVENANCE:
        if not meta.get(key):
            raise ProvenanceError(f"{meta_path}: no {key!r} (a summary records {', '.join(PROVENANCE)})")
    if not isinstance(meta["commands"], list) or not all(isinstance(c, str) for c in meta["commands"]):
        raise ProvenanceError(f"{meta_path}: 'commands' must be a list of command lines")
    return {key: meta[key] for key in PROVENANCE}


def provenance_md(p: dict[str, Any]) -> str:
    """The closing section of every summary's markdown."""
    lines = ["## Provenance", "", f"- commit: {p['commit']}", f"- device: {p['device']}", f"- date: {p['date']}"]
    lines += ["- commands (as recorded; bench/README.md gives today's paths):"]
    lines += [f"  - `{c}`" for c in p["commands"]]
    return "\n".join(lines) + "\n"


def median_ci(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Median and a 95 % bootstrap interval of the median (resampling the rounds, fixed seed)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP))
    return statistics.median(values), meds[int(0.025 * BOOTSTRAP)], meds[int(0.975 * BOOTSTRAP) - 1]


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table's lines."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def write(out: Path, name: str, s: dict, md: str, indent: int = 2) -> None:
    """``out/NAME.json`` and ``out/NAME.md``; a summary without its provenance is refused."""
    missing = [k for k in PROVENANCE if k not in s.get("provenance", {})]
    if missing:
        raise ProvenanceError(f"{name}: the summary records no {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(s, indent=indent) + "\n")
    (out / f"{name}.md").write_text(md)


def main(
    doc: str | None,
    name: str,
    default_raw: str,
    summarize: Callable[[Path], dict],
    markdown: Callable[[dict], str],
    show: Sequence[str],
    indent: int = 2,
) -> int:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", default=str(ROOT / default_raw), help="folder of the run's raw reports")
    ap.add_argument("--out", default=str(RESULTS), help=f"folder for {name}.json and {name}.md")
    ap.add_argument("--name", default=name, help=f"the results' file name (default {name}; another device's run)")
    args = ap.parse_args()
    try:
        s = summarize(Path(args.raw))
        write(Path(args.out), args.name, s, markdown(s), indent)
    except ProvenanceError as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
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
