"""The lab's one pipeline: a campaign YAML -> points (bench/campaign.py, bench/points.py) -> tables
(bench/renderer.py), and every committed GPU summary regenerated from its raw files by the same renderer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "runtime")]
import campaign  # noqa: E402
import points  # noqa: E402
import renderer  # noqa: E402
import reports  # noqa: E402

COMMITTED = [n for n, r in reports.REPORTS.items() if r.committed]
SMOKE = ROOT / "bench" / "campaigns" / "sim_smoke.yaml"


@pytest.mark.parametrize("name", COMMITTED)
def test_every_committed_summary_regenerates_from_its_raw_files(name):
    assert renderer.check([name]) == []


def test_a_planted_fault_in_a_view_is_caught(monkeypatch):
    """A wrong column header in one report's view: the check names the markdown it no longer reproduces."""
    mod = renderer.report_module(reports.REPORTS["gpu_h200_tp1"])
    real = mod.markdown
    monkeypatch.setattr(mod, "markdown", lambda s: real(s).replace("| probe / served |", "| served / probe |"))
    assert renderer.check(["gpu_h200_tp1"]) == ["bench/results/gpu_h200_tp1.md"]


def test_a_planted_fault_in_an_extractor_is_caught(monkeypatch):
    mod = renderer.report_module(reports.REPORTS["gpu_h200_trained_load"])
    real = mod.summarize

    def wrong(raw):
        s = real(raw)
        s["speedup_over_nospec"]["b1_k7"] += 0.001
        return s

    monkeypatch.setattr(mod, "summarize", wrong)
    assert "bench/results/gpu_h200_trained_load.json" in renderer.check(["gpu_h200_trained_load"])


def test_a_sim_campaign_runs_end_to_end_into_points_and_tables(tmp_path, capsys):
    assert campaign.main(["run", str(SMOKE), "--out", str(tmp_path)]) == 0
    got = points.load(tmp_path / "points.jsonl")
    c = campaign.load(SMOKE)
    # every configuration of the YAML, once per round and batch, in the plan's order
    assert [(p.mode, p.steps, p.batch, p.round) for p in got] == [
        (s.mode, s.steps, s.batch, s.round) for s in campaign.plan(c)
    ]
    assert len(got) == c.repeats * len(c.batches) * (2 + len(c.steps))
    for p in got:
        assert p.campaign == "sim-smoke" and p.shape == "llama3-8b" and p.tp == 1
        assert p.commit and p.date and p.device.startswith("simulated") and "campaign.py run" in p.command
        assert p.metrics["tok_s"] > 0 and p.metrics["cycle_ms"] > 0
    s = json.loads((tmp_path / "points_summary.json").read_text())
    b1 = s["batches"]["1"]
    assert b1["nospec"]["over_nospec"] == 1.0 and b1["tier0"]["accept_len"] == 1.0  # steps 0: plain decoding
    assert b1["static k3"]["accept_len"] > b1["static k1"]["accept_len"] > 1.0
    assert b1["static k3"]["rounds"] == c.repeats
    md = (tmp_path / "points_summary.md").read_text()
    assert "| static k3 |" in md and "## Provenance" in md and "campaign.py run" in md
    # the same file renders again through the renderer's command line
    assert renderer.cli(["points", str(tmp_path / "points.jsonl"), "--name", "again"]) == 0
    assert (tmp_path / "again.md").read_text() == md


@pytest.mark.parametrize(
    "edit, field",
    [
        ({"colour": "red"}, "colour"),
        ({"batches": [0]}, "batches"),
        ({"modes": ["nospec", "warp"]}, "modes.1"),
        ({"modes": ["live"]}, "modes"),
        ({"steps": []}, "steps"),
        ({"sim": {"scenario": "x.yaml", "secs": 3}}, "sim.secs"),
        ({"repeats": 0}, "repeats"),
        ({"backend": "gpu"}, "gpu"),
    ],
)
def test_a_bad_campaign_exits_2_naming_the_field(tmp_path, capsys, edit, field):
    import yaml

    doc = {**yaml.safe_load(SMOKE.read_text()), **edit}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SystemExit) as exc:
        campaign.main(["plan", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f": {field}:" in err and "Traceback" not in err


def _line(**over):
    d = {
        "campaign": "c",
        "device": "d",
        "shape": "s",
        "tp": 1,
        "mode": "static",
        "steps": 3,
        "batch": 1,
        "round": 0,
        "metrics": {"tok_s": 1.0},
        "commit": "abc",
        "date": "2026-12-06",
        "command": "x",
    }
    return json.dumps({**d, **over})


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"mode": "fast"}, "mode"),
        ({"steps": None}, "steps"),
        ({"mode": "nospec"}, "steps"),  # nospec has no step count
        ({"batch": 0}, "batch"),
        ({"metrics": {"tok_s": -1}}, "metrics.tok_s"),
        ({"metrics": {"speed": 1}}, "metrics.speed"),
        ({"commit": ""}, "commit"),
        ({"extra": 1}, "extra"),
    ],
)
def test_a_bad_point_is_refused_naming_its_line_and_field(tmp_path, bad, field):
    path = tmp_path / "p.jsonl"
    path.write_text(_line() + "\n\n" + _line(**bad) + "\n")
    with pytest.raises(points.PointsError, match=rf"p\.jsonl:3: {field}:"):
        points.load(path)


def test_points_files_are_bounded(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(_line() + "\n" + _line(command="x" * (points.MAX_LINE + 1)) + "\n")
    with pytest.raises(points.PointsError, match=r"p\.jsonl:2: a line of"):
        points.load(path)
    with pytest.raises(points.PointsError, match="over the 10 a file"):
        points.load(path, max_bytes=10)


def test_a_bad_points_file_is_exit_2_from_the_renderer(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(SystemExit) as exc:
        renderer.cli(["points", str(path)])
    assert exc.value.code == 2 and "p.jsonl:1: not JSON" in capsys.readouterr().err


def test_a_live_tune_run_extracts_to_the_points_its_summary_reports(tmp_path):
    """The committed replay run as points: every static point's tok/s and decode figures are the summary's."""
    assert renderer.cli(["extract", "gpu_h200_trained_replay", "--out", str(tmp_path / "p.jsonl")]) == 0
    got = points.load(tmp_path / "p.jsonl")
    summary = json.loads((renderer.RESULTS / "gpu_h200_trained_replay.json").read_text())
    static = {f"b{p.batch}_k{p.steps}": p for p in got if p.mode in ("static", "tier0")}
    assert set(static) == set(summary["points"])
    for key, p in static.items():
        assert p.metrics["tok_s"] == summary["points"][key]["served_tokens_per_s"], key
        assert p.metrics["cycle_ms"] == summary["points"][key]["cycle_ms"], key
    nospec = {p.batch: p.metrics["tok_s"] for p in got if p.mode == "nospec"}
    assert {str(b): v for b, v in nospec.items()} == summary["nospec_tokens_per_s"]


def test_the_gpu_backend_measures_each_mode_on_its_server_with_live_tunes_pieces(tmp_path, monkeypatch):
    """Without a GPU: live_tune's server, table and replay functions stubbed, the backend starts one server per kind
    once, sets a one-tier table before each static point and replays the fixed set for every point."""
    lt = campaign.live_tune
    calls = []
    monkeypatch.setattr(lt, "prompts_from", lambda path, n, chars: ["p"] * n)

    def start_server(a, work, kind):
        calls.append(("start", kind, a.tp))
        return None, kind, {}

    monkeypatch.setattr(lt, "start_server", start_server)
    monkeypatch.setattr(lt, "wait_ready", lambda url, proc, t: 1.0)
    monkeypatch.setattr(lt, "put_table", lambda control, body: calls.append(("table", body)) or 200)
    monkeypatch.setattr(lt, "Observer", lambda url, sampler: lambda m: (m(), {"pod_counters": {}, "wall_s": 1.0}))
    monkeypatch.setattr(lt, "replay", lambda url, prompts, b, n, mnt: 100.0 * b if url == "live" else 50.0 * b)
    monkeypatch.setattr(campaign, "gpu_name", lambda tp: f"{tp}x stub GPU")
    c = campaign.Campaign.model_validate(
        {
            "name": "stub",
            "backend": "gpu",
            "shape": "llama3-8b",
            "tp": 2,
            "steps": [3],
            "batches": [1, 8],
            "modes": ["nospec", "static"],
            "gpu": {"target": "t", "draft": "d", "heldout": str(tmp_path / "h.txt")},
        }
    )
    backend = campaign.GpuBackend(c)
    monkeypatch.setattr(backend, "close", lambda: None)
    got = campaign.run(c, tmp_path, "python bench/campaign.py run stub.yaml", backend)
    assert [(p.mode, p.batch, p.metrics["tok_s"]) for p in got] == [
        ("nospec", 1, 50.0),
        ("static", 1, 100.0),
        ("nospec", 8, 400.0),
        ("static", 8, 800.0),
    ]
    assert [x for x in calls if x[0] == "start"] == [("start", "nospec", 2), ("start", "live", 2)]
    assert sum(x[0] == "table" for x in calls) == 2 and all(p.device == "2x stub GPU" for p in got)
    assert points.load(tmp_path / "points.jsonl") == got
