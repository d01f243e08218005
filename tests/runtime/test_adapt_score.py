"""``specdecode-runtime adapt score`` on the tiny models and their captured traffic: the draft that agrees with the
target beats the one that does not, a damaged candidate is refused (exit 3), one that a pod could not load in place
or input that cannot be scored is bad input (exit 2, naming the argument)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdecode_runtime.adapt.score import verdict
from specdecode_runtime.cli import main
from tests.cli.clitest import refused, runtime
from tests.runtime import adapt_testlib
from tests.runtime.adapt_testlib import write_lines


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return adapt_testlib.world(tmp_path_factory)


STEPS = "5"


def _score(world, serving, candidate, *extra, capture=None):
    return main(
        [
            "adapt",
            "score",
            "--capture",
            str(capture or world.capture),
            "--target",
            world.models.target,
            "--drafts",
            str(serving),
            str(candidate),
            "--steps",
            STEPS,
            "--threads",
            "1",
            *extra,
        ]
    )


def test_the_agreeing_draft_beats_the_other(world, tmp_path, capsys):
    """The two tiny drafts differ in layers (the agreeing one copies the target's two), so a pod could not swap
    one for the other in place: scored with --any-layout."""
    m = world.models
    out = tmp_path / "verdict.json"
    assert _score(world, m.eagle3, m.eagle3_agree, "--any-layout", "--out", str(out)) == 0
    printed = json.loads(capsys.readouterr().out)
    result = json.loads(out.read_text())
    assert printed == result
    serving, candidate = result["serving"], result["candidate"]
    assert result["better"] is True and result["ratio"] > 1.2
    assert candidate["accept_length"] > 0.2 > 0.02 > serving["accept_length"]
    assert len(candidate["conditional_acceptance"]) == int(STEPS)
    assert candidate["chains"] == serving["chains"] > 500  # the same held-out chains for both
    assert candidate["sequences_scored"] == result["heldout_records"] > 20
    assert candidate["digest"].startswith("sha256:") and candidate["digest"] != serving["digest"]
    assert result["in_place"] == {"ok": False, "cause": "config", "message": result["in_place"]["message"]}
    # and the other way round the serving draft keeps its place
    assert _score(world, m.eagle3_agree, m.eagle3, "--any-layout", "--max-prompts", "8") == 3
    assert json.loads(capsys.readouterr().out)["better"] is False


def test_a_damaged_candidate_is_refused(world, tmp_path, capsys):
    from specdecode_runtime.cpu.tiny_models import noisy_copy

    m = world.models
    noisy = noisy_copy(m.eagle3_agree, tmp_path / "noisy", scale=1.0)
    assert _score(world, m.eagle3_agree, noisy) == 3
    result = json.loads(capsys.readouterr().out)
    assert result["better"] is False and result["ratio"] < 0.9
    # the same candidate against itself is no improvement either (a tie keeps the serving draft)
    assert _score(world, m.eagle3_agree, m.eagle3_agree, "--max-prompts", "8") == 3
    assert json.loads(capsys.readouterr().out)["ratio"] == 1.0
    # a required margin the candidate does not reach
    assert _score(world, m.eagle3, m.eagle3_agree, "--any-layout", "--min-ratio", "5", "--max-prompts", "8") == 3


def test_a_candidate_of_another_shape_is_bad_input(world, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    m = world.models
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text((Path(m.eagle3) / "config.json").read_text())
    tensors = load_file(str(Path(m.eagle3) / "model.safetensors"))
    tensors["fc.weight"] = tensors["fc.weight"][:, :96].contiguous()
    save_file(tensors, str(other / "model.safetensors"))
    assert _score(world, m.eagle3, other) == 2
    err = capsys.readouterr().err
    assert "--drafts CANDIDATE" in err and "(shape)" in err and "fc.weight [64, 96] (served [64, 128])" in err
    # another config (the agreeing draft has two layers)
    assert _score(world, m.eagle3, m.eagle3_agree) == 2
    err = capsys.readouterr().err
    assert "(config)" in err and "num_hidden_layers (1 -> 2)" in err and "--any-layout" in err
    # and a checkpoint this head cannot represent at all, even with --any-layout (an EAGLE draft)
    assert _score(world, m.eagle3, m.eagle, "--any-layout") == 2
    assert "--drafts CANDIDATE" in capsys.readouterr().err


def test_nothing_to_score_is_bad_input(world, tmp_path, capsys):
    from specdecode_runtime.cpu.tiny_models import noisy_copy

    m = world.models
    aborted = tmp_path / "aborted"
    aborted.mkdir()
    write_lines(
        aborted / "a.jsonl",
        [dict(r, finish={"type": "abort"}) for r in world.records],
    )
    assert _score(world, m.eagle3, noisy_copy(m.eagle3, tmp_path / "n"), capture=aborted) == 2
    err = capsys.readouterr().err
    assert "--capture" in err and "no held-out records" in err and "not finished by length or stop" in err


def test_bad_arguments_exit_2_in_a_fresh_process(world, tmp_path):
    m = world.models
    base = ["adapt", "score", "--target", m.target, "--drafts", m.eagle3, m.eagle3_agree]
    refused(runtime(*base, "--capture", tmp_path / "none"), "--capture", "no such directory")
    r = runtime("adapt", "score", "--capture", world.capture, "--target", m.target, "--drafts", m.eagle3, tmp_path)
    refused(r, "--drafts CANDIDATE", "no config.json")
    refused(runtime(*base, "--capture", world.capture, "--steps", "0"), "--steps", "within 1..16")


def test_verdict_needs_more_than_a_tie():
    a = {"accept_length": 1.0, "tokens_per_verify": 2.0}
    b = {"accept_length": 1.2, "tokens_per_verify": 2.2}
    assert verdict(a, b)["better"] is True and verdict(a, b)["ratio"] == pytest.approx(1.1)
    assert verdict(a, a)["better"] is False
    assert verdict(a, b, min_ratio=1.2)["better"] is False
    assert verdict(b, a)["better"] is False
