"""`specdecode demo` end to end, as a user runs it (faster simulated clock so CI stays quick)."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_the_whole_loop_and_reports_simulated_results(tmp_path):
    out = tmp_path / "demo-out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdecode_operator.cli",
            "demo",
            "--speed",
            "40",
            "--out",
            str(out),
            "--max-seconds",
            "100",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    summary = yaml.safe_load((out / "summary.yaml").read_text())
    assert summary["simulated"] is True
    assert summary["conditions"]["Ready"] == "True" and summary["conditions"]["SpecValid"] == "True"
    assert summary["tuner_decisions"] >= 2, summary  # chat -> code -> chat needs more than one step count
    rates = summary["tokens_per_s"]
    tuned = rates["tuned, draft on rank 0 (this run)"]
    assert abs(rates["no speculation"] - 90) < 3  # the seed's calibration
    assert tuned > rates["draft on all 8 ranks, steps=5 (the seed)"] > 0
    assert tuned > rates["no speculation"]
    assert tuned >= 0.97 * rates["draft on rank 0, steps=3 fixed (untuned)"]
    assert (out / "tokens_and_steps.png").stat().st_size > 10_000
    assert "SIMULATED" in r.stdout and "ConfigMap" in r.stdout and "Deployment" in r.stdout
