"""The one renderer of bench results: raw reports or measured points in, ``bench/results/NAME.{json,md}`` out.

    python bench/renderer.py list                          # the reports and their committed raw folders
    python bench/renderer.py report NAME [--raw DIR] [--out DIR] [--name NAME]
    python bench/renderer.py check [NAME ...]              # every committed summary regenerated and compared
    python bench/renderer.py points FILE.jsonl [--out DIR] [--name NAME]   # a campaign's points as tables
    python bench/renderer.py extract NAME [--raw DIR] --out FILE.jsonl     # a live_tune.py run's points

A report (``bench/reports/``, registered in ``reports.REPORTS``) is a pure ``summarize(raw_dir) -> dict`` and
``markdown(dict) -> str``; points (``bench/points.py``, what ``bench/campaign.py`` writes) render to one table per
batch: every configuration's median over its rounds with a bootstrap interval, over no speculation at that batch.
This module holds what every summary shares:

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
import filecmp
import importlib
import json
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "runtime", ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
import points as pts  # noqa: E402
import reports  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PROVENANCE = ("commit", "device", "date", "commands")
BOOTSTRAP = 2000


class ProvenanceError(ValueError):
    """A run's meta.json lacks what every summary records."""


class RawError(ValueError):
    """A raw report that is missing or unreadable: the message names it."""


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


# ---------------------------------------------------------------------------------------------------------- reports


def report_module(r: reports.Report) -> Any:
    return importlib.import_module(f"reports.{r.module}")


def render(r: reports.Report, raw: Path, out: Path, name: str | None = None) -> dict:
    """One report from its raw folder into ``out``: the whole results file, or its own section of one."""
    mod = report_module(r)
    s = mod.summarize(raw)
    md = mod.markdown(s)
    if r.section:
        heading, title = r.section
        if "provenance" not in s and not all(s.get("gpu_meta", {}).get(k) for k in PROVENANCE):
            raise ProvenanceError(f"{r.name}: the section records no provenance")
        write_section(out, name or r.name, s, heading, md, title)
    else:
        # a report named by its device (reports/adaptation.py) says its own name when none is given
        write(out, name or getattr(mod, "default_name", lambda _s: r.name)(s), s, md, r.indent)
    return s


def check(names: Sequence[str]) -> list[str]:
    """Every named committed summary regenerated from its committed raw folder into a scratch folder (the results
    file copied first where the report fills one section of it): the files that differ from the committed ones."""
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            r = reports.REPORTS[n]
            out = Path(tmp) / n
            out.mkdir()
            if r.section:
                for ext in ("json", "md"):
                    shutil.copy(RESULTS / f"{r.name}.{ext}", out / f"{r.name}.{ext}")
            render(r, ROOT / r.raw, out)
            for ext in ("json", "md"):
                if not filecmp.cmp(out / f"{r.name}.{ext}", RESULTS / f"{r.name}.{ext}", shallow=False):
                    differ.append(f"bench/results/{r.name}.{ext}")
    return differ


# ----------------------------------------------------------------------------------------------------------- points


def points_provenance(points: Sequence[pts.Point]) -> dict[str, Any]:
    """The provenance section of a summary of points: every commit, device and date they record, and their
    commands."""

    def uniq(xs: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(xs))

    return {
        "commit": ", ".join(uniq(p.commit for p in points)),
        "device": ", ".join(uniq(p.device for p in points)),
        "date": ", ".join(uniq(p.date for p in points)),
        "commands": uniq(p.command for p in points),
    }


def config_label(mode: str, steps: int | None) -> str:
    return mode if steps is None or mode == "tier0" else f"{mode} k{steps}"


def summarize_points(points: Sequence[pts.Point]) -> dict:
    """Per batch, per configuration (mode and steps): the median of each metric over the rounds, tok/s with its
    bootstrap interval, and tok/s over no speculation at that batch (the medians' ratio)."""
    if not points:
        raise RawError("no points")
    groups: dict[int, dict[tuple[str, int | None], list[pts.Point]]] = {}
    for p in points:
        groups.setdefault(p.batch, {}).setdefault((p.mode, p.steps), []).append(p)
    order = {m: i for i, m in enumerate(pts.MODES)}
    by_batch: dict[str, dict] = {}
    for b in sorted(groups):
        rows: dict[str, dict] = {}
        for (mode, steps), ps in sorted(groups[b].items(), key=lambda kv: (order[kv[0][0]], kv[0][1] or 0)):
            row: dict[str, Any] = {"mode": mode, "steps": steps, "rounds": len(ps)}
            for m in pts.METRICS:
                vals = [float(v) for p in ps if (v := p.metrics.get(m)) is not None]
                if not vals:
                    continue
                if m == "tok_s":
                    med, lo, hi = median_ci(vals)
                    row["tok_s"] = round(med, 1)
                    row["tok_s_ci95"] = [round(lo, 1), round(hi, 1)]
                else:
                    row[m] = round(statistics.median(vals), 3)
            rows[config_label(mode, steps)] = row
        base = rows.get("nospec", {}).get("tok_s")
        for row in rows.values():
            if base and row.get("tok_s") is not None:
                row["over_nospec"] = round(row["tok_s"] / base, 3)
        by_batch[str(b)] = rows
    return {
        "provenance": points_provenance(points),
        "campaigns": list(dict.fromkeys(p.campaign for p in points)),
        "shapes": list(dict.fromkeys(f"{p.shape} TP {p.tp}" for p in points)),
        "batches": by_batch,
    }


POINT_COLUMNS = (
    ("tok/s (95% CI)", lambda r: f"{r['tok_s']} [{r['tok_s_ci95'][0]}, {r['tok_s_ci95'][1]}]" if "tok_s" in r else "-"),
    ("over no spec", lambda r: f"{r['over_nospec']}x" if "over_nospec" in r else "-"),
    ("cycle ms", lambda r: r.get("cycle_ms", "-")),
    ("accept len", lambda r: r.get("accept_len", "-")),
    ("rounds", lambda r: r["rounds"]),
)


def points_markdown(s: dict) -> str:
    lines = [f"# {', '.join(s['campaigns'])}", "", f"{s['provenance']['device']}; model {', '.join(s['shapes'])}.", ""]
    for b, rows in s["batches"].items():
        lines += [f"## Batch {b}", ""]
        lines += table(
            ("configuration", *(h for h, _ in POINT_COLUMNS)),
            ((k, *(f(r) for _, f in POINT_COLUMNS)) for k, r in rows.items()),
        )
        lines.append("")
    return "\n".join(lines) + "\n" + provenance_md(s["provenance"])


# -------------------------------------------------------------------------------------------------- command line


def cli(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="renderer.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the reports and their raw folders")
    rep = sub.add_parser("report", help="one report from its raw folder")
    rep.add_argument("report", choices=sorted(reports.REPORTS))
    rep.add_argument("--raw", help="folder of the run's raw reports (default: the committed one)")
    rep.add_argument("--out", default=str(RESULTS), help="folder of the results files")
    rep.add_argument("--name", help="the results' file name (another device's run)")
    chk = sub.add_parser("check", help="regenerate committed summaries and compare")
    chk.add_argument("reports", nargs="*", metavar="NAME", help="default: every committed one")
    pnt = sub.add_parser("points", help="a file of points as tables")
    pnt.add_argument("file", type=Path)
    pnt.add_argument("--out", type=Path, help="folder of NAME.json and NAME.md (default: next to the file)")
    pnt.add_argument("--name", default="points_summary")
    ext = sub.add_parser("extract", help="the measured points of a live_tune.py run")
    ext.add_argument("report", choices=sorted(n for n, r in reports.REPORTS.items() if r.campaign))
    ext.add_argument("--raw")
    ext.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "list":
            for n, r in reports.REPORTS.items():
                print(f"{n:28} reports/{r.module}.py  raw {r.raw}{'' if r.committed else ' (none committed)'}")
        elif a.cmd == "report":
            r = reports.REPORTS[a.report]
            s = render(r, Path(a.raw) if a.raw else ROOT / r.raw, Path(a.out), a.name)
            print(json.dumps({k: s[k] for k in r.show}, indent=1))
        elif a.cmd == "check":
            committed = [n for n, r in reports.REPORTS.items() if r.committed]
            unknown = [n for n in a.reports if n not in committed]
            if unknown:
                ap.exit(2, f"{ap.prog}: check: {unknown[0]!r} is no committed summary ({', '.join(committed)})\n")
            differ = check(a.reports or committed)
            if differ:
                print("differs from what its raw files render to: " + ", ".join(differ), file=sys.stderr)
                return 1
            print("every summary regenerates from its raw files")
        elif a.cmd == "points":
            s = summarize_points(pts.load(a.file))
            write(a.out or a.file.parent, a.name, s, points_markdown(s))
            print(json.dumps(s["batches"], indent=1))
        elif a.cmd == "extract":
            r = reports.REPORTS[a.report]
            live_runs = importlib.import_module("reports.live_runs")
            found = live_runs.folder_points(Path(a.raw) if a.raw else ROOT / r.raw, r.campaign, r.shape)
            pts.write(a.out, found)
            print(f"{len(found)} points -> {a.out}")
    except (ProvenanceError, RawError, pts.PointsError) as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
    except (FileNotFoundError, ValueError) as exc:  # a raw folder without a file its report reads, or a bad one
        ap.exit(2, f"{ap.prog}: --raw: {exc}\n")
    return 0


if __name__ == "__main__":
    import renderer  # noqa: E402  # the module the reports import, not a second copy named __main__

    sys.exit(renderer.cli())
