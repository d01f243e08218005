"""The simulated runtime over HTTP and its CLI (exit code 2 and a clear message on bad input)."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.contract.step_table import STEPS_PATH, StepTable
from specdecode_runtime.preflight import CollectiveTiming, export, summary
from specdecode_runtime.simulate import cli
from specdecode_runtime.simulate.engine import SimEngine
from specdecode_runtime.simulate.server import create_app

SCEN = Path(__file__).resolve().parents[2] / "bench" / "scenarios"
AUTH = {"Authorization": "Bearer tok"}


@pytest.fixture
async def client(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok")
    engine = SimEngine(load_scenario(SCEN / "h200-nvlink.yaml"))
    engine.set_step_table(StepTable.single(3))
    c = TestClient(TestServer(create_app(engine, [0, 1, 3, 5], str(token), speed=500, tick=0.01)))
    await c.start_server()
    c.engine = engine
    yield c
    await c.close()


def parse(text):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


async def test_health_model_info_and_clock(client):
    assert (await client.get("/health")).status == 200
    assert (await client.get("/health_generate")).status == 200
    info = await (await client.get("/model_info")).json()
    assert info["simulated"] is True and info["scenario"] == "h200-nvlink"
    await asyncio.sleep(0.1)
    status = await (await client.get("/specdecode/v1/sim")).json()
    assert status["simulated"] is True and status["simSeconds"] > 5  # 500x for ~0.1 s of wall time


async def test_metrics_carry_the_contract_and_the_simulated_label(client):
    await asyncio.sleep(0.05)
    r = await client.get("/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    vals = parse(await r.text())
    names = {n for n, _ in vals}
    for required in (
        "specdecode_verify_cycles_total",
        "specdecode_position_attempts_total",
        "specdecode_position_accepted_total",
        "specdecode_cycle_seconds_sum",
        "specdecode_cycle_seconds_count",
        "specdecode_num_steps",
        "specdecode_candidate_steps",
        "specdecode_draft_tp",
        "specdecode_tokens_generated_total",
        "sglang:spec_accept_length",
        "sglang:gen_throughput",
    ):
        assert required in names, required
    assert all(dict(labels).get("simulated") == "true" for _, labels in vals)


async def test_put_changes_the_simulated_runtime(client):
    r = await client.put(
        STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 5}, {"minBatch": 4, "steps": 1}]}, headers=AUTH
    )
    assert r.status == 200, await r.text()
    assert client.engine.table.lookup(2) == 5 and client.engine.table.lookup(8) == 1
    vals = parse(await (await client.get("/metrics")).text())
    assert vals[("specdecode_num_steps", (("bucket", "8-31"), ("simulated", "true")))] == 1
    r = await client.put(STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 7}]}, headers=AUTH)
    assert r.status == 422 and (await r.json())["allowed"] == [0, 1, 3, 5]
    assert (await client.put(STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 1}]})).status == 401


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "specdecode_runtime.simulate", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_offline_prints_simulated_json():
    r = run_cli("--scenario", str(SCEN / "pcie8-seed.yaml"), "--offline", "--steps", "0", "--duration", "60")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["simulated"] is True and out["tokensPerSecond"] == pytest.approx(90.0, abs=1)


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--scenario", "/nonexistent.yaml"], "cannot read file"),
        (
            ["--scenario", str(SCEN / "pcie8-seed.yaml"), "--candidates", "0,1,3,4,7", "--steps", "6"],
            "allowed: [0, 1, 3, 4, 7]",
        ),
        (["--scenario", str(SCEN / "pcie8-seed.yaml"), "--steps", "9"], "allowed: [0, 1, 2, 3, 4, 5, 6, 7]"),
        (["--scenario", str(SCEN / "pcie8-seed.yaml"), "--draft-tp", "3"], "allowed: [1, 2, 4, 8]"),
        (["--scenario", str(SCEN / "pcie8-seed.yaml"), "--speed", "0"], "--speed: must be > 0"),
        (["--scenario", str(SCEN / "pcie8-seed.yaml"), "--candidates", "a,b"], "comma-separated integers"),
    ],
)
def test_cli_bad_input_exits_2_without_traceback(args, expect, capsys):
    with pytest.raises(SystemExit) as exc:
        code = cli.main(args)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


def test_cli_field_path_error(tmp_path, capsys):
    bad = tmp_path / "s.yaml"
    bad.write_text((SCEN / "pcie8-seed.yaml").read_text().replace("restartSeconds: 300", "restartSeconds: -5"))
    assert cli.main(["--scenario", str(bad), "--offline"]) == 2
    assert "restartSeconds: Input should be greater than or equal to 0" in capsys.readouterr().err


def test_add_parser_registers_simulate():
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["simulate", "--scenario", "x.yaml", "--port", "31000", "--speed", "10"])
    assert args.func is cli.run and args.port == 31000 and args.speed == 10


def test_preflight_export_and_summary():
    from prometheus_client import CollectorRegistry, generate_latest

    from specdecode_runtime.metrics import SpecMetrics

    reg = CollectorRegistry()
    res = [CollectiveTiming("all_reduce", 4096, 41.5e-6, 200), CollectiveTiming("broadcast", 48, 12e-6, 200)]
    export(res, SpecMetrics(reg))
    vals = parse(generate_latest(reg).decode())
    assert vals[("specdecode_nccl_latency_seconds", (("bytes", "4096"), ("op", "all_reduce")))] == pytest.approx(
        41.5e-6
    )
    assert summary(res) == {"all_reduce": {"4096": 41.5}, "broadcast": {"48": 12.0}}
