"""controlAuth: by default the operator gets a projected ServiceAccount token bound to the runtime's audience and is
told to use it (no Secret grants needed for Live step control); mode Secret leaves both out."""

from specdecode_operator.config import OperatorConfig
from tests.chart.chartlib import one, render


def operator_pod(values=None) -> dict:
    return one(render(values or {}), "Deployment")["spec"]["template"]["spec"]


def test_default_projects_the_operators_token_for_the_runtime_audience():
    pod = operator_pod()
    (volume,) = [v for v in pod["volumes"] if v["name"] == "control-token"]
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "specdecode-runtime"
    container = pod["containers"][0]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "control-token"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = OperatorConfig.from_env(env)
    assert config.control_auth == "ServiceAccount" and config.control_audience == "specdecode-runtime"
    assert config.control_token_file == f"{mount['mountPath']}/{source['serviceAccountToken']['path']}"


def test_secret_mode_projects_nothing():
    pod = operator_pod({"controlAuth": {"mode": "Secret"}})
    assert not [v for v in pod["volumes"] if v["name"] == "control-token"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}
    assert OperatorConfig.from_env(env).control_auth == "Secret"
