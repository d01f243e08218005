"""The step-control endpoint authenticating callers by ServiceAccount token, on a real kube-apiserver: its issuer,
its discovery document and JWKS, and tokens from its TokenRequest API.

The operator's token bound to the runtime's audience -> 200; another ServiceAccount's (same issuer, same audience)
-> 403; the operator's token for another audience, an expired one, a forged one and none -> 401. The runtime reads
the issuer's keys with its own ServiceAccount token (the default ``system:service-account-issuer-discovery``
binding), once, and again on a key id it has not seen. The shared-Secret token keeps working beside it.
"""

from __future__ import annotations

import datetime

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from specdecode_runtime.contract.step_table import STEPS_PATH, StepTable
from specdecode_runtime.control import add_step_routes
from specdecode_runtime.sa_token_auth import ServiceAccountVerifier, Settings

ISSUER = "https://kubernetes.default.svc"  # the envtest API server's --service-account-issuer
AUDIENCE = "specdecode-runtime"
NS = "sa-auth"
OPERATOR = f"system:serviceaccount:{NS}:specdecode-operator"


class Sink:
    candidates = [1, 3]

    def __init__(self):
        self.table = StepTable.single(3)

    def current_table(self):
        return self.table

    def apply_table(self, table):
        self.table = table
        return {"queued": 1}


def token_request(env, name: str, audiences: list[str] | None, seconds: int = 600) -> str:
    env.service_account_kubeconfig(NS, name)  # the namespace and ServiceAccount
    spec = {"expirationSeconds": seconds, **({"audiences": audiences} if audiences else {})}
    status, out = env.request(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    assert status == 201, out
    return out["status"]["token"]


@pytest.fixture
def verifier(envtest_environment, tmp_path):
    env = envtest_environment
    own = tmp_path / "runtime-token"  # the runtime pod's own mounted token (default audience: the API server)
    own.write_text(token_request(env, "runtime", None))
    return ServiceAccountVerifier(
        Settings(
            issuer=ISSUER,
            audience=AUDIENCE,
            subjects=(OPERATOR,),
            api_server=env.server,
            ca_file=str(env.ca_file),
            token_file=str(own),
        )
    )


async def test_service_account_tokens_get_200_403_401(envtest_environment, verifier, tmp_path):
    env = envtest_environment
    shared = tmp_path / "shared-token"
    shared.write_text("s3cret")
    app = web.Application()
    add_step_routes(app, Sink(), shared, verifier)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:

        async def status(token: str | None) -> int:
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            r = await client.get(STEPS_PATH, headers=headers)
            return r.status

        operator = token_request(env, "specdecode-operator", [AUDIENCE])
        assert await status(operator) == 200
        r = await client.put(
            STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 1}]}, headers={"Authorization": f"Bearer {operator}"}
        )
        assert r.status == 200 and (await r.json())["table"] == [{"minBatch": 1, "steps": 1}]
        assert await status(token_request(env, "intruder", [AUDIENCE])) == 403
        r = await client.get(
            STEPS_PATH, headers={"Authorization": f"Bearer {token_request(env, 'intruder', [AUDIENCE])}"}
        )
        assert "system:serviceaccount:sa-auth:intruder may not" in (await r.json())["error"]
        wrong_audience = token_request(env, "specdecode-operator", ["someone-else"])
        assert await status(wrong_audience) == 401
        # expired: the operator's own claims, signed with the issuer's real key, an hour in the past
        claims = jwt.decode(operator, options={"verify_signature": False})
        past = int((datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)).timestamp())
        expired = jwt.encode(
            {**claims, "iat": past - 600, "nbf": past - 600, "exp": past},
            (env.workdir / "pki" / "sa.key").read_bytes(),
            algorithm="RS256",
            headers={"kid": jwt.get_unverified_header(operator)["kid"]},
        )
        r = await client.get(STEPS_PATH, headers={"Authorization": f"Bearer {expired}"})
        assert r.status == 401 and "expired" in (await r.json())["error"]
        # forged: the same claims, signed by a key the issuer never published
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode(claims, other, algorithm="RS256", headers={"kid": "not-a-published-key"})
        assert await status(forged) == 401
        assert await status(None) == 401
        assert await status("s3cret") == 200  # the shared-Secret mode still works
    finally:
        await client.close()


async def test_the_operators_token_and_the_pod_settings_it_renders_work_together(envtest_environment, tmp_path):
    """The operator side (its projected token, as kubelet would write it, and the pod settings rendered from it)
    against the runtime side, with the real API server's issuer: no Secret anywhere."""
    from specdecode_operator import control_identity
    from specdecode_operator.api.validate import parse
    from specdecode_operator.config import OperatorConfig
    from specdecode_operator.render import RenderOptions, render
    from specdecode_runtime.sa_token_auth import settings_from_env
    from tests.k8s.fixtures import ROOT

    env = envtest_environment
    (tmp_path / "operator-token").write_text(token_request(env, "specdecode-operator", [AUDIENCE]))
    config = OperatorConfig(
        control_auth="ServiceAccount", control_token_file=str(tmp_path / "operator-token"), control_audience=AUDIENCE
    )
    auth = control_identity.control_auth(config)
    assert auth.issuer == ISSUER and auth.subjects == (OPERATOR,)
    import yaml

    sdd = parse(yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text()))
    (dep,) = [m for m in render(sdd, RenderOptions(control_auth=auth)) if m["kind"] == "Deployment"]
    pod_env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    (tmp_path / "runtime-token").write_text(token_request(env, "default", None))  # the pod's projected token
    # what kubelet would mount at the rendered paths, and the API server's address outside a cluster
    pod_env.update(
        SPECDECODE_CONTROL_TOKEN_FILE=str(tmp_path / "runtime-token"),
        SPECDECODE_CONTROL_CA_FILE=str(env.ca_file),
        SPECDECODE_CONTROL_API_SERVER=env.server,
    )
    verifier = ServiceAccountVerifier(settings_from_env(pod_env))
    app = web.Application()
    add_step_routes(app, Sink(), None, verifier)  # no Secret token at all
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        headers = {"Authorization": f"Bearer {control_identity.bearer(config)}"}
        r = await client.put(STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 3}]}, headers=headers)
        assert r.status == 200
        r = await client.get(STEPS_PATH, headers={"Authorization": f"Bearer {token_request(env, 'other', [AUDIENCE])}"})
        assert r.status == 403
    finally:
        await client.close()
