"""``specdecode validate`` refuses every SpecDecodeDeployment whose pods ``specdecode-runtime launch`` would refuse.

One case per refusal rule of ``contract.capabilities`` (a test checks none is missing): the SDD goes through
``specdecode validate``; its rendered ``runtime.yaml`` (rendered from the typed object, past admission, as a
cluster without the CRD's rules would) goes through ``specdecode-runtime launch --dry-run``. Both must exit 2, and
where admission's own rules do not already refuse the object, validate reports launch's message on the spec field
it comes from.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from specdecode_operator.api.models import SpecDecodeDeployment
from specdecode_operator.api.validate import apply_defaults
from specdecode_operator.cli import main as specdecode
from specdecode_operator.render.runtime_config import runtime_config, spec_field
from specdecode_runtime import SGLANG_VERSION
from specdecode_runtime import cli as runtime_cli
from specdecode_runtime.contract.capabilities import (
    ALWAYS_REFUSED,
    LIVE_REFUSED,
    OWNED_FLAGS,
    SPLIT_REFUSED,
    rule_names,
    serving_problems,
)
from tests.cli.clitest import EXAMPLE

BASE = yaml.safe_load(EXAMPLE.read_text())  # target TP 8, draft TP 1 (split), EAGLE3, autotune Live


def _sdd(
    *, extra: list[str] = (), draft: dict | None = None, speculative: dict | None = None, autotune: dict | None = None
) -> dict:
    obj = copy.deepcopy(BASE)
    spec = obj["spec"]
    spec.setdefault("runtime", {})["extraArgs"] = list(extra)
    spec["draft"].update(draft or {})
    spec["speculative"].update(speculative or {})
    spec["speculative"].setdefault("autotune", {}).update(autotune or {})
    return obj


FULL_TP = {"tensorParallelSize": 8}
OFF = {"mode": "Off"}

# rule -> the SpecDecodeDeployment that trips it
CASES: dict[str, dict] = {
    **{f"always:{flag}": _sdd(extra=[flag]) for flag in ALWAYS_REFUSED},
    **{f"split:{flag}": _sdd(extra=[flag], autotune=OFF) for flag in SPLIT_REFUSED},
    **{f"live:{flag}": _sdd(extra=[flag], draft=FULL_TP) for flag in LIVE_REFUSED},
    **{f"owned:{flag}": _sdd(extra=[flag, "/tmp/x"] if flag.endswith("config") else [flag]) for flag in OWNED_FLAGS},
    "draft-tp": _sdd(draft={"tensorParallelSize": 3}),
    "split-pp": _sdd(extra=["--pp-size", "2"]),
    "split-dp": _sdd(extra=["--dp-size", "2"]),
    "split-algorithm": _sdd(draft={"algorithm": "STANDALONE"}, autotune=OFF),
    "algorithm-flag": _sdd(extra=["--speculative-algorithm", "NEXTN"]),
    "live-algorithm": _sdd(draft={"algorithm": "NEXTN", **FULL_TP}),
    "live-top-k": _sdd(speculative={"eagleTopK": 4}, draft=FULL_TP),
}
CASES["served-warmup"] = _sdd(extra=["--skip-server-warmup"])
CASES["served-warmup"]["spec"]["runtime"]["servedCalibration"] = {"batches": [1, 8]}
# Only a hand-written runtime.yaml can trip these: the renderer always writes numSteps among the Live candidates.
RENDERER_NEVER_WRITES = {"live-num-steps"}


def test_every_refusal_rule_has_a_case():
    assert set(CASES) | RENDERER_NEVER_WRITES == set(rule_names())


@pytest.fixture
def installed_sglang(monkeypatch):
    """launch's dry run checks the installed SGLang too; the parity is about the config, so pin it to the one
    the runtime supports."""
    import specdecode_runtime.sglang_patch as sp

    monkeypatch.setattr(sp, "installed_sglang_version", lambda: SGLANG_VERSION)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_validate_refuses_what_launch_refuses(rule, tmp_path, capsys, installed_sglang):
    obj = CASES[rule]
    sdd_file = tmp_path / "sdd.yaml"
    sdd_file.write_text(yaml.safe_dump(obj))
    cfg = runtime_config(SpecDecodeDeployment.model_validate(apply_defaults(obj)))
    config_file = tmp_path / "runtime.yaml"
    config_file.write_text(cfg.to_yaml())
    problems = [p for p in serving_problems(cfg) if p.rule == rule]
    assert problems, f"the case for {rule} does not trip it: {serving_problems(cfg)}"

    assert runtime_cli.main(["launch", "--config", str(config_file), "--dry-run"]) == 2
    launch_err = capsys.readouterr().err
    for p in problems:
        assert f"refused: {p}" in launch_err

    assert specdecode(["validate", "-f", str(sdd_file)]) == 2
    validate_err = capsys.readouterr().err
    assert "Traceback" not in validate_err and "spec." in validate_err, validate_err
    from specdecode_operator.api.validate import validate_object

    if not validate_object(obj):  # admission accepts it: validate must say what launch says, on the spec field
        for p in problems:
            field = spec_field(p.field)  # the renderer's map of runtime.yaml fields to spec fields
            assert f"{field}: {p.message}" in validate_err, validate_err


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_the_renderer_never_writes_a_live_start_outside_the_captured_tiers(steps):
    obj = _sdd(speculative={"numSteps": steps}, autotune={"minSteps": 1, "maxSteps": 7})
    cfg = runtime_config(SpecDecodeDeployment.model_validate(apply_defaults(obj)))
    assert cfg.speculative.num_steps in cfg.speculative.candidate_steps
    assert serving_problems(cfg) == []


def test_launch_refuses_a_live_start_outside_the_captured_tiers(tmp_path, capsys, installed_sglang):
    cfg = runtime_config(SpecDecodeDeployment.model_validate(apply_defaults(_sdd())))
    text = cfg.to_yaml().replace(f"numSteps: {cfg.speculative.num_steps}", "numSteps: 9")
    (tmp_path / "runtime.yaml").write_text(text)
    assert runtime_cli.main(["launch", "--config", str(tmp_path / "runtime.yaml"), "--dry-run"]) == 2
    assert "speculative.numSteps: numSteps 9 is not in candidateSteps" in capsys.readouterr().err


def test_the_operator_reports_a_refused_spec_as_spec_valid_false():
    """The operator's once-per-generation validation carries the same problem, so the reconciler sets SpecValid
    False with it and posts an InvalidSpec Event instead of rolling out pods that exit 2."""
    from specdecode_operator.object_state import ObjectState, validated

    obj = CASES["split-algorithm"]
    body = {**obj, "metadata": {**obj["metadata"], "generation": 1, "uid": "u"}}
    sdd, problems = validated(body, ObjectState())
    assert sdd is None
    assert any(p.startswith("spec.draft.algorithm: STANDALONE with a split draft") for p in problems), problems
