"""`specdecode render --control-auth MODE` prints what an operator in that step-control mode applies: the same
manifests the reconciler renders (pod parts included) and, in Secret mode, the control-token Secret it creates, but
for the token and the owner reference."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.config import OperatorConfig
from specdecode_operator.object_state import ObjectState
from specdecode_operator.reconcile.reconciler import Reconciler, _Pass
from specdecode_operator.render import render
from specdecode_operator.status.conditions import Observation
from tests.cli.clitest import EXAMPLE, refused, specdecode

ISSUER = "https://kubernetes.default.svc.cluster.local"
UID = "0b5c6f0e-4a8e-4b8a-9d7e-2f1c3a4b5c6d"


class NothingThere:
    """The reconciler's API client in a namespace without the control-token Secret yet."""

    async def get(self, api_version, plural, namespace, name):
        return None


def sdd_file(tmp_path, launcher: str = "specdecode") -> tuple[dict, str]:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["uid"] = UID
    body["metadata"]["generation"] = 1
    if launcher == "sglang":
        body["spec"]["runtime"] = {"launcher": "sglang"}
        body["spec"]["draft"].update(tensorParallelSize=body["spec"]["target"]["tensorParallelSize"], ranks=None)
        del body["spec"]["draft"]["ranks"]
        body["spec"]["speculative"]["autotune"] = {"mode": "Off"}
    path = tmp_path / "sdd.yaml"
    path.write_text(yaml.safe_dump(body))
    return body, str(path)


def printed(*args: str) -> list[dict]:
    r = specdecode("render", *args)
    assert r.returncode == 0, r.stderr
    return list(yaml.safe_load_all(r.stdout))


def reconciler(config: OperatorConfig) -> Reconciler:
    rec = Reconciler(config, None, NothingThere())  # type: ignore[arg-type]
    if rec.identity is not None:
        rec.identity.issuer = ISSUER  # what the operator reads once from the API server's discovery document
    return rec


@pytest.mark.parametrize("launcher", ["specdecode", "sglang"])
def test_service_account_mode_prints_exactly_what_the_reconciler_renders(tmp_path, launcher):
    body, path = sdd_file(tmp_path, launcher)
    config = OperatorConfig(
        control_auth="ServiceAccount",
        operator_namespace="ops",
        control_service_account="sd-operator",
        control_audience="sd-runtime",
    )
    expected = render(parse(body), reconciler(config).options(None))
    got = printed(
        "-f",
        path,
        "--control-auth",
        "ServiceAccount",
        "--control-issuer",
        ISSUER,
        "--operator-namespace",
        "ops",
        "--control-service-account",
        "sd-operator",
        "--control-audience",
        "sd-runtime",
    )
    assert got == expected
    assert not [m for m in got if m["kind"] == "Secret"]
    if launcher == "specdecode":
        (pod,) = [m["spec"]["template"]["spec"] for m in got if m["kind"] in ("Deployment", "LeaderWorkerSet")]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["SPECDECODE_CONTROL_AUDIENCE"] == f"sd-runtime/llm/glm5-pcie/{UID}"
        assert env["SPECDECODE_CONTROL_SUBJECTS"] == "system:serviceaccount:ops:sd-operator"
        assert "control-token" not in {v["name"] for v in pod["volumes"]}
    # the defaults are the operator's
    defaults = reconciler(OperatorConfig(control_auth="ServiceAccount")).options(None)
    assert printed("-f", path, "--control-auth", "ServiceAccount", "--control-issuer", ISSUER) == render(
        parse(body), defaults
    )


@pytest.mark.parametrize("launcher", ["specdecode", "sglang"])
def test_secret_mode_prints_the_reconcilers_manifests_and_its_secret_without_the_token(tmp_path, launcher):
    body, path = sdd_file(tmp_path, launcher)
    rec = reconciler(OperatorConfig(control_auth="Secret"))
    sdd = parse(body)
    (secret,) = asyncio.run(
        rec._control_secret(_Pass(body, ObjectState(), {}, Observation(generation=1)))  # the operator's Secret
    )
    assert secret["data"]["token"] and secret["metadata"]["ownerReferences"][0]["uid"] == UID
    del secret["data"], secret["metadata"]["ownerReferences"]
    got = printed("-f", path, "--control-auth", "Secret")
    assert got == [*render(sdd, rec.options(None)), secret]
    # without the flag: the same pods, no Secret (the render before the flag existed)
    assert printed("-f", path) == got[:-1]


def test_control_auth_settings_are_checked(tmp_path):
    _, path = sdd_file(tmp_path)
    refused(specdecode("render", "-f", path, "--control-auth", "ServiceAccount"), "needs --control-issuer")
    refused(specdecode("render", "-f", path, "--control-auth", "ServiceAccount", "--control-issuer", " "), "needs")
    refused(specdecode("render", "-f", path, "--control-issuer", ISSUER), "--control-issuer only with --control-auth")
    refused(
        specdecode("render", "-f", path, "--control-auth", "Secret", "--control-audience", "x"),
        "--control-audience only with --control-auth ServiceAccount",
    )
    refused(
        specdecode(
            "render",
            "-f",
            path,
            "--control-auth",
            "ServiceAccount",
            "--control-issuer",
            ISSUER,
            "--control-service-account",
            "Not_A_Name",
        ),
        "--control-service-account: 'Not_A_Name' is not a ServiceAccount name",
    )
    refused(specdecode("render", "-f", path, "--control-auth", "Token"), "invalid choice: 'Token'")
