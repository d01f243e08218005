"""``specdecode-runtime selftest`` without starting SGLang: flag validation (exit 2 with the flag named), the
hang report from a real stuck gloo collective, and the checks that judge what every rank recorded."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from runtime_testlib import RUNTIME  # noqa: F401 - puts the runtime package on sys.path

from specdecode_runtime.selftest import hang, report  # noqa: E402
from specdecode_runtime.selftest.options import Options  # noqa: E402
from specdecode_runtime.selftest.runner import RunResult  # noqa: E402


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--device", "tpu"], "--device must be cpu or cuda"),
        (["--tp", "4", "--draft-ranks", "5"], "--draft-ranks"),
        (["--tp", "4", "--draft-ranks", "1,x"], "--draft-ranks must be comma-separated integers"),
        (["--tp", "4", "--draft-tp", "4"], "--draft-tp must be within 1..3"),
        (["--tp", "1"], "the split layout needs --tp 2"),
        (["--algorithm", "MEDUSA"], "--algorithm must be EAGLE or EAGLE3"),
        (["--steps", "0"], "--steps must be within 1..16"),
        (["--topk", "2", "--live-steps", "1,5"], "--live-steps needs --topk 1"),
        (["--live-steps", "1,99"], "--live-steps values must be within 0..16"),
        (["--layouts", "nospec,bogus"], "--layouts must list"),
        (["--layouts", "split"], "--layouts with split must include sharded"),
        (["--layouts", "nospec,split"], "--layouts with split must include sharded"),
        (["--layouts", "nospec,sharded", "--corrupt-draft"], "--corrupt-draft corrupts the split run's draft"),
        (["--timeout", "1"], "--timeout must be within"),
        (["--model-config", "/nonexistent/shape.yaml"], "--model-config /nonexistent/shape.yaml"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(argv, needle, capsys):
    from specdecode_runtime.cli import main

    assert main(["selftest", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_bad_model_config_names_the_key(tmp_path, capsys):
    from specdecode_runtime.cli import main

    f = tmp_path / "shape.yaml"
    f.write_text("hidden_size: 64\nnum_attention_heads: 5\n")
    assert main(["selftest", "--model-config", str(f)]) == 2
    assert "num_attention_heads" in capsys.readouterr().err
    f.write_text("hidden_size: [1, 2]\n")
    assert main(["selftest", "--model-config", str(f)]) == 2
    assert "hidden_size must be a positive integer" in capsys.readouterr().err


def test_unparseable_flag_value_is_argparse_exit_2():
    out = subprocess.run(
        [sys.executable, "-m", "specdecode_runtime", "selftest", "--tp", "four"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(RUNTIME)},
        timeout=120,
    )
    assert out.returncode == 2 and "--tp" in out.stderr


# ---- a real hang: rank 1 never joins rank 0's all_reduce ------------------------------------------------------

_HANG_CHILD = r"""
import sys, time, torch, torch.distributed as dist
from specdecode_runtime.selftest.rank_probe import register_stack_dump
rank, port, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
register_stack_dump(d, rank)
def proposals():
    t = torch.zeros(4)
    dist.all_reduce(t)  # rank 1 never calls it
if rank == 0:
    proposals()
else:
    time.sleep(600)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.engine  # 2 gloo processes
def test_hang_report_names_rank_and_collective(tmp_path):
    port = str(_free_port())
    env = {**os.environ, "PYTHONPATH": str(RUNTIME), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", _HANG_CHILD, str(r), port, str(tmp_path)], env=env) for r in range(2)
    ]
    try:
        deadline = time.time() + 120
        while len(hang.rank_pids(tmp_path)) < 2 and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # rank 0 is inside all_reduce by now
        diag = hang.diagnose(tmp_path, wait=1.5)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert set(diag) == {0, 1}
    assert diag[0]["waiting_in"] == "all_reduce", diag[0]
    assert "distributed_c10d.py" in diag[0]["where"]
    assert diag[1]["waiting_in"] is None and "innermost frame" in diag[1]["detail"]  # asleep, in no collective
    text = hang.describe(diag)
    assert "rank 0 waits in all_reduce" in text


# ---- judging the rank records ------------------------------------------------------------------------------


def _verify(rank: int, loc: list[int]) -> dict:
    return {
        "event": "verify",
        "rank": rank,
        "round": 1,
        "bs": 1,
        "out_cache_loc": loc,
        "positions": [5, 6],
        "input_ids": [9, 10],
    }


def _result(ranks: dict[int, list[dict]], layout: str = "split") -> RunResult:
    r = RunResult(layout=layout, tokens=[[1, 2, 3]], draft_ranks=[1])
    r.ranks = ranks
    return r


def test_checks_catch_target_built_in_the_draft_group_and_diverging_kv_slots():
    opts = Options(tp=2, draft_tp=1, draft_ranks=(1,))
    good = {
        rk: [{"event": "target_backend", "tier": t, "steps": 1, "tp_group": 2, "tp_size": 2} for t in (0, 1)]
        + [{"event": "kv_profile", "gathered_bytes": 512 if rk == 1 else 0, "head_gathered": True}]
        + [_verify(rk, [40, 41])]
        for rk in (0, 1)
    }
    checks = {c.name: c for c in report.rank_checks(opts, _result(good))}
    assert all(c.ok for c in checks.values()), checks
    bad = {rk: [dict(e) for e in evs] for rk, evs in good.items()}
    bad[1][1]["tp_group"] = 1  # rank 1 built a step tier's target backend inside its one-rank draft group
    bad[0][3]["out_cache_loc"] = [40, 42]
    bad[1][2]["gathered_bytes"] = 0
    checks = {c.name: c for c in report.rank_checks(opts, _result(bad))}
    assert not checks["target state built with the target TP group"].ok
    assert "(1, 1, 1)" in checks["target state built with the target TP group"].detail
    assert not checks["verify KV slots identical on every rank"].ok
    assert "out_cache_loc" in checks["verify KV slots identical on every rank"].detail
    assert not checks["KV pool sized with the draft's gathered vocabulary resident"].ok


def test_first_divergence_and_overall_verdict():
    assert report.first_divergence([[1, 2, 3]], [[1, 2, 3]]) is None
    assert report.first_divergence([[1, 2, 3], [4]], [[1, 2, 3], [5]]) == {
        "prompt": 1,
        "position": 0,
        "reference": 4,
        "got": 5,
    }
    opts = Options(tp=2, layouts=("nospec", "sharded"))
    ref = RunResult(layout="nospec", tokens=[[1, 2]])
    same = RunResult(layout="sharded", tokens=[[1, 2]])
    assert report.build(opts, [ref, same]).ok
    rep = report.build(opts, [ref, RunResult(layout="sharded", tokens=[[1, 3]])])
    assert not rep.ok and rep.runs[1]["first_divergence"]["position"] == 1
    assert "tokens differ" in report.to_text(rep)
    assert not report.build(opts, [ref]).ok  # a layout that never ran is a failure


@pytest.mark.parametrize(
    "heads,kv,tp,device,ok",
    [
        (4, 2, 4, "cuda", True),  # fewer KV heads than ranks: each replicated on 2 ranks (SGLang's LlamaAttention)
        (8, 1, 8, "cuda", True),
        (4, 2, 4, "cpu", False),  # on a CPU SGLang pads instead, and the padded heads do not load
        (4, 4, 2, "cpu", True),
        (8, 4, 4, "cpu", True),
        (6, 3, 2, "cuda", False),  # 3 KV heads cannot be split over 2 ranks
        (12, 3, 4, "cuda", False),  # nor replicated evenly over 4
        (6, 2, 4, "cuda", False),  # attention heads must split evenly
    ],
)
def test_model_config_head_rule_is_sglangs(heads, kv, tp, device, ok, tmp_path):
    import argparse

    from specdecode_runtime.selftest.options import OptionError, add_arguments, from_namespace, head_split_problem

    assert (head_split_problem(heads, kv, tp, device) is None) == ok
    f = tmp_path / "shape.yaml"
    f.write_text(f"hidden_size: {16 * heads}\nnum_attention_heads: {heads}\nnum_key_value_heads: {kv}\n")
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    ns = ap.parse_args(["--device", device, "--tp", str(tp), "--model-config", str(f), "--layouts", "nospec,sharded"])
    if ok:
        assert from_namespace(ns).model_config["num_key_value_heads"] == kv
    else:
        with pytest.raises(OptionError, match="num_"):
            from_namespace(ns)
