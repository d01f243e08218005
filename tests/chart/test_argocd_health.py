"""The Argo CD health check (Lua) maps SpecDecodeDeployment conditions to Argo CD health, run through lupa."""

import lupa
import pytest

from tests.chart.chartlib import CHART
from tests.chart.sdd_samples import CASES, READY, cond, sdd

SCRIPT = (CHART / "argocd" / "health.lua").read_text()


def to_lua(lua, value):
    if isinstance(value, dict):
        return lua.table_from({k: to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return lua.table_from([to_lua(lua, v) for v in value])  # 1-indexed, as Argo CD's gopher-lua gives arrays
    return value


def health(obj) -> tuple[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = to_lua(lua, obj)
    hs = lua.execute(SCRIPT)
    assert set(hs.keys()) <= {"status", "message"}
    return hs["status"], hs["message"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_health_of_each_state(case):
    obj, expected, _ = CASES[case]
    status, message = health(obj)
    assert status == expected
    assert isinstance(message, str) and message


def test_messages_carry_the_condition_message():
    assert health(CASES["invalid-spec"][0])[1] == "draft TP 3 does not divide target TP 4"
    assert health(CASES["rolling-out"][0])[1] == "rolling out revision 3"
    assert "generation 3" in health(CASES["ready-but-stale-generation"][0])[1]


def test_invalid_spec_wins_over_paused_and_ready():
    obj = sdd(conditions=[cond("SpecValid", "False", message="bad"), cond("Paused", "True"), cond("Ready", "True")])
    assert health(obj) == ("Degraded", "bad")


def test_only_argo_cd_health_values_are_returned():
    allowed = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
    for obj, _, _ in CASES.values():
        assert health(obj)[0] in allowed
    assert health(sdd(conditions=READY[:1]))[0] == "Progressing"  # no Ready condition yet
