"""``check-sglang`` checks behaviour as well as names: SGLang's own tree code and call order, on a CPU."""

from __future__ import annotations

from runtime_testlib import sglang_or_skip


def test_behaviour_checks_hold_for_the_installed_sglang():
    sglang_or_skip()
    from specdecode_runtime.sglang_patch.behaviour import check_behaviour

    results = check_behaviour()
    assert len(results) == 7
    assert all(r.ok for r in results), [(r.name, r.detail) for r in results if not r.ok]


def test_width_check_fails_for_the_old_single_step_tree_width(monkeypatch):
    sglang_or_skip()
    from specdecode_runtime.draft_group import ProposalLayout
    from specdecode_runtime.sglang_patch.behaviour import check_behaviour

    old = property(lambda self: 0 if self.topk == 1 else self.topk * (self.steps - 1) + 1)
    monkeypatch.setattr(ProposalLayout, "parent_cols", old)
    widths = next(r for r in check_behaviour() if r.name.startswith("proposal widths"))
    assert not widths.ok and "steps 1 topk 2" in widths.detail


def test_order_check_reports_a_reordered_scheduler(monkeypatch):
    sglang_or_skip()
    from sglang.srt.managers.scheduler import Scheduler

    from specdecode_runtime.sglang_patch.behaviour import _in_order

    ok, detail = _in_order(Scheduler.init_model_worker, "init_memory_pools()", "maybe_init_draft_worker()")
    assert not ok and "another order" in detail


def test_check_sglang_cli_prints_behaviour(capsys):
    sglang_or_skip()
    from specdecode_runtime.cli import main

    assert main(["check-sglang"]) == 0
    out = capsys.readouterr().out
    assert "ok   behave proposal widths match SGLang's tree code" in out
    assert "FAIL" not in out
