"""Launcher, CLI and argument translation: pure Python, no sglang needed (the version is injected)."""

from __future__ import annotations

import io

import pytest
from runtime_testlib import RUNTIME_YAML

from specdecode_runtime import cli
from specdecode_runtime.contract.config import RuntimeConfig
from specdecode_runtime.contract.server_args import (
    DIST_INIT_ADDR_ENV,
    NODE_RANK_ENV,
    expand_env_refs,
    flag_value,
    sglang_cli_args,
)
from specdecode_runtime.contract.versions import SGLANG_VERSION
from specdecode_runtime.launch import EXIT_UNSUPPORTED, launch, plan_launch


def _cfg(**replace: str) -> RuntimeConfig:
    text = RUNTIME_YAML
    for a, b in replace.items():
        text = text.replace(a, b)
    return RuntimeConfig.from_yaml(text)


def test_sglang_cli_args_golden():
    assert sglang_cli_args(_cfg(), ["--mem-fraction-static", "0.8"]) == [
        "--model-path",
        "/models/llama-70b",
        "--tp-size",
        "8",
        "--quantization",
        "fp8",
        "--context-length",
        "8192",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "/models/eagle3",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--enable-metrics",
        "--mem-fraction-static",
        "0.8",
    ]
    assert sglang_cli_args(_cfg()) == sglang_cli_args(_cfg())  # deterministic


def test_tree_and_multinode_args():
    cfg = _cfg(**{"eagleTopK: 1": "eagleTopK: 4, numDraftTokens: 8", "nodes: 1": "nodes: 2"})
    args = sglang_cli_args(cfg)
    assert flag_value(args, "--speculative-eagle-topk") == "4"
    assert flag_value(args, "--speculative-num-draft-tokens") == "8"
    assert flag_value(args, "--nnodes") == "2"
    assert flag_value(args, "--node-rank") == f"$({NODE_RANK_ENV})"
    expanded = expand_env_refs(args, {NODE_RANK_ENV: "1", DIST_INIT_ADDR_ENV: "sd-0.sd:5000"})
    assert flag_value(expanded, "--node-rank") == "1" and flag_value(expanded, "--dist-init-addr") == "sd-0.sd:5000"


def test_dry_run_prints_env_and_args(runtime_yaml, capsys):
    path = runtime_yaml()
    out = io.StringIO()
    plan = plan_launch(path, ["--mem-fraction-static", "0.8"], sglang_version=SGLANG_VERSION)
    assert plan.reasons == [] and plan.split and plan.draft_ranks == (0,)
    assert plan.env["NCCL_PROTO"] == "^LL128" and plan.env["NCCL_NVLS_ENABLE"] == "0"
    assert plan.env["NCCL_DEBUG"] == "WARN"  # nccl.env overrides are carried
    assert plan.env["SPECDECODE_RUNTIME_CONFIG"].endswith("runtime.yaml")
    rc = launch(path, ["--mem-fraction-static", "0.8"], dry_run=True, out=out)
    text = out.getvalue()
    # The installed sglang decides rc; either way the plan is printed.
    assert "NCCL_P2P_LEVEL=SYS" in text and "--tp-size 8" in text
    assert rc in (0, EXIT_UNSUPPORTED)


@pytest.mark.parametrize(
    "extra,replace,needle",
    [
        (["--speculative-use-rejection-sampling"], {}, "rejection sampling"),
        (["--enable-dp-attention"], {}, "DP attention"),
        (["--enable-multi-layer-eagle"], {}, "multi-layer EAGLE"),
        (["--pp-size", "2"], {}, "pipeline parallelism"),
        (["--enable-nccl-nvls"], {}, "multicast"),
        ([], {"tensorParallelSize: 1}": "tensorParallelSize: 2, ranks: [0, 9]}"}, "not inside the target TP group"),
        ([], {"tensorParallelSize: 1}": "tensorParallelSize: 3}"}, "must divide"),
        ([], {"nodes: 1": "nodes: 2"}, "SPECDECODE_NODE_RANK"),
    ],
)
def test_unsupported_configs_refused(runtime_yaml, extra, replace, needle):
    plan = plan_launch(runtime_yaml(**replace), extra, environ={}, sglang_version=SGLANG_VERSION)
    assert any(needle in r for r in plan.reasons), plan.reasons


def test_draft_group_outside_target_refused(runtime_yaml):
    path = runtime_yaml(
        **{
            "tensorParallelSize: 8, quantization": "tensorParallelSize: 2, quantization",
            "tensorParallelSize: 1}": "tensorParallelSize: 4}",
        }
    )
    plan = plan_launch(path, [], sglang_version=SGLANG_VERSION)
    assert any("inside the target group" in r for r in plan.reasons)


def test_split_only_refusals_do_not_apply_on_full_tp(runtime_yaml):
    path = runtime_yaml(**{"tensorParallelSize: 1}": "tensorParallelSize: 8}"})
    plan = plan_launch(path, ["--enable-dp-attention"], sglang_version=SGLANG_VERSION)
    assert plan.reasons == [] and not plan.split


def test_wrong_sglang_version_refused(runtime_yaml):
    other = "0.0.1"
    assert any(
        f"unsupported sglang {other}" in r for r in plan_launch(runtime_yaml(), [], sglang_version=other).reasons
    )
    assert any("not installed" in r for r in plan_launch(runtime_yaml(), [], sglang_version=None).reasons)


def test_cli_exit_codes(runtime_yaml, capsys, monkeypatch):
    import specdecode_runtime.sglang_patch as sp

    monkeypatch.setattr(sp, "installed_sglang_version", lambda: SGLANG_VERSION)
    path = runtime_yaml()
    assert cli.main(["launch", "--config", path, "--dry-run", "--", "--mem-fraction-static", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "--mem-fraction-static 0.8" in out and "# environment" in out
    assert cli.main(["launch", "--config", path, "--dry-run", "--", "--speculative-use-rejection-sampling"]) == 2
    assert "rejection sampling" in capsys.readouterr().err
    assert cli.main(["launch", "--config", str(path) + ".missing", "--dry-run"]) == 2
    monkeypatch.setattr(sp, "installed_sglang_version", lambda: "0.5.10")
    assert cli.main(["launch", "--config", path, "--dry-run"]) == 2
    assert cli.main(["check-sglang"]) == 2


def test_cli_registers_simulate_when_present(monkeypatch):
    import sys
    import types

    mod = types.ModuleType("specdecode_runtime.simulate.cli")
    mod.add_parser = lambda sub: sub.add_parser("simulate").set_defaults(func=lambda ns: 0)
    pkg = types.ModuleType("specdecode_runtime.simulate")
    monkeypatch.setitem(sys.modules, "specdecode_runtime.simulate", pkg)
    monkeypatch.setitem(sys.modules, "specdecode_runtime.simulate.cli", mod)
    assert cli.main(["simulate"]) == 0


def test_importing_runtime_pulls_no_sglang():
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'runtime'); import specdecode_runtime.cli, specdecode_runtime.launch, "
        "specdecode_runtime.contract.server_args; assert 'sglang' not in sys.modules and 'torch' not in sys.modules"
    )
    from pathlib import Path

    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_bench_smoke_cpu(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [
            sys.executable,
            "bench/gpu/micro/draft_head_gpu.py",
            "--tiny",
            "--device",
            "cpu",
            "--iters",
            "2",
            "--ctx",
            "16",
            "--batches",
            "1,4",
            "--out",
            str(tmp_path),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "draft_head_tiny.json").exists()
