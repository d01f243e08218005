"""The step-control endpoint authenticating callers by ServiceAccount token, on a real kube-apiserver: its issuer,
its discovery document and JWKS, and tokens from its TokenRequest API.

The operator's token bound to the runtime's audience -> 200; another ServiceAccount's (same issuer, same audience)
-> 403; the operator's token for another audience, an expired one, a forged one and none -> 401. The operator's
per-deployment tokens (TokenRequest, one audience per deployment) open their own deployment's pods and no other's. The runtime reads
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
        assert r.status == 403 and "intruder" not in await r.text()  # the answer names no caller
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
        assert r.status == 401 and "expired" not in await r.text()  # why is logged, not answered
        # forged: the same claims, signed by a key the issuer never published
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = jwt.encode(claims, other, algorithm="RS256", headers={"kid": "not-a-published-key"})
        assert await status(forged) == 401
        assert await status(None) == 401
        assert await status("s3cret") == 200  # the shared-Secret mode still works
    finally:
        await client.close()


def rendered_pod_env(auth, namespace: str, name: str, uid: str) -> dict[str, str]:
    """The step-control environment of the runtime pods the operator renders for one deployment."""
    import yaml

    from specdecode_operator.api.validate import parse
    from specdecode_operator.render import RenderOptions, render
    from tests.k8s.fixtures import ROOT

    doc = yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace, "uid": uid}
    (dep,) = [m for m in render(parse(doc), RenderOptions(control_auth=auth)) if m["kind"] == "Deployment"]
    return {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}


async def test_a_token_for_one_deployment_opens_no_other(envtest_environment, tmp_path):
    """The operator side (ControlIdentity: TokenRequest per deployment on the real API server, under a
    ServiceAccount kubeconfig) against two deployments' runtime pods configured from their rendered Deployments:
    each accepts its own token and refuses (401) the other's, so a token captured by one tenant's pod is worth
    nothing to another's. No Secret anywhere."""
    import kubernetes

    from specdecode_operator import control_identity
    from specdecode_operator.config import OperatorConfig
    from specdecode_operator.kube_client import KubeClient
    from specdecode_runtime.sa_token_auth import settings_from_env

    env = envtest_environment
    config = OperatorConfig(
        control_auth="ServiceAccount",
        operator_namespace=NS,
        control_service_account="specdecode-operator",
        control_audience=AUDIENCE,
    )
    from specdecode_operator import rbac

    kubeconfig = env.service_account_kubeconfig(NS, "specdecode-operator")
    # the chart's grant: TokenRequest on this ServiceAccount only, by name (templates/rbac.yaml)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "token-request", "namespace": NS},
        "rules": [{**r, "resourceNames": ["specdecode-operator"]} for r in rbac.by_scope("control-serviceaccount")],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "token-request", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "token-request"},
        "subjects": [{"kind": "ServiceAccount", "name": "specdecode-operator", "namespace": NS}],
    }
    for path, obj in (("roles", role), ("rolebindings", binding)):
        status, out = env.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{path}", obj)
        assert status in (201, 409), out
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    client = KubeClient(cfg)
    identity = control_identity.ControlIdentity(client, config)
    auth = await identity.auth()
    assert auth.issuer == ISSUER and auth.subjects == (OPERATOR,)
    (tmp_path / "runtime-token").write_text(token_request(env, "default", None))  # the pods' projected token
    deployments = {"a": ("team-a", "model", "uid-a"), "b": ("team-b", "model", "uid-b")}
    clients: dict[str, TestClient] = {}
    try:
        for key, (ns, name, uid) in deployments.items():
            pod_env = rendered_pod_env(auth, ns, name, uid)
            assert pod_env["SPECDECODE_CONTROL_AUDIENCE"] == f"{AUDIENCE}/{ns}/{name}/{uid}"
            pod_env.update(
                SPECDECODE_CONTROL_TOKEN_FILE=str(tmp_path / "runtime-token"),
                SPECDECODE_CONTROL_CA_FILE=str(env.ca_file),
                SPECDECODE_CONTROL_API_SERVER=env.server,
            )
            app = web.Application()
            add_step_routes(app, Sink(), None, ServiceAccountVerifier(settings_from_env(pod_env)))
            clients[key] = TestClient(TestServer(app))
            await clients[key].start_server()
        tokens = {key: await identity.token_for(*d) for key, d in deployments.items()}
        assert tokens["a"] and tokens["b"] and tokens["a"] != tokens["b"]
        assert await identity.token_for(*deployments["a"]) == tokens["a"]  # reused until half its life is gone
        assert identity.requests == 2
        claims = jwt.decode(tokens["a"], options={"verify_signature": False})
        assert claims["aud"] == [f"{AUDIENCE}/team-a/model/uid-a"] and claims["exp"] - claims["iat"] <= 600

        async def put(pod: str, token: str) -> int:
            r = await clients[pod].put(
                STEPS_PATH, json={"table": [{"minBatch": 1, "steps": 1}]}, headers={"Authorization": f"Bearer {token}"}
            )
            return r.status

        assert await put("a", tokens["a"]) == 200 and await put("b", tokens["b"]) == 200
        assert await put("b", tokens["a"]) == 401  # replayed by deployment A's pod against B
        assert await put("a", tokens["b"]) == 401
        # a deleted and re-created deployment of the same name is another audience
        assert await put("a", await identity.token_for("team-a", "model", "uid-a2")) == 401
    finally:
        for c in clients.values():
            await c.close()
        await client.close()


def test_the_operator_sends_no_token_bound_to_anything_else():
    """What ``token_for`` checks before a token leaves the operator: exactly the one audience, our subject, and an
    expiry within the life asked for."""
    import time

    from specdecode_operator.control_identity import token_problem

    now = time.time()
    aud = f"{AUDIENCE}/team-a/model/uid-a"

    def tok(**over) -> str:
        return jwt.encode({"aud": [aud], "sub": OPERATOR, "exp": int(now) + 600, **over}, "k" * 32, algorithm="HS256")

    assert token_problem(tok(), aud, OPERATOR, now) is None
    assert token_problem(tok(aud=aud), aud, OPERATOR, now) is None  # a single audience as a string
    for bad in (
        tok(aud=[AUDIENCE]),  # the shared prefix
        tok(aud=[aud, "https://kubernetes.default.svc"]),  # also good for the API server
        tok(aud=[]),
        tok(sub="system:serviceaccount:x:y"),
        tok(exp=int(now) + 3600),  # longer than asked
        tok(exp=int(now) - 1),
        tok(exp="soon"),
        "not-a-jwt",
    ):
        assert token_problem(bad, aud, OPERATOR, now) is not None, bad
