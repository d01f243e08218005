"""The step endpoint's ServiceAccount-token check against hostile tokens and hostile issuer documents: every one is
a 4xx with a body that says no more than its status, never a 5xx; an issuer that cannot be read is a fast 503.

The real control app and the real verifier (PyJWT), with an issuer served over HTTP from this process: its
discovery document and JWKS are whatever a case sets, its keys are real RSA and EC keys. The tokens are signed the
way an attacker would sign them: the other key type than the key id names, HMAC with the public key, ``none``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from specdecode_runtime.contract.step_table import STEPS_PATH, StepTable
from specdecode_runtime.control import add_step_routes
from specdecode_runtime.sa_token_auth import ServiceAccountVerifier, Settings

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCE = "specdecode-runtime/team-a/model-a/0a1b"
OPERATOR = "system:serviceaccount:specdecode-system:specdecode-operator"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk(key, kid: str, alg: str) -> dict:
    return {**json.loads(jwt.get_algorithm_by_name(alg).to_jwk(key.public_key())), "kid": kid, "alg": alg, "use": "sig"}


GOOD_JWKS = {"keys": [jwk(RSA_KEY, "rsa1", "RS256"), jwk(EC_KEY, "ec1", "ES256")]}


def claims(**over) -> dict:
    now = int(time.time())
    return {"iss": ISSUER, "aud": [AUDIENCE], "sub": OPERATOR, "iat": now, "nbf": now, "exp": now + 600, **over}


def sign(key, alg: str, kid, **over) -> str:
    return jwt.encode(claims(**over), key, algorithm=alg, headers={"kid": kid} if kid is not ... else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw(header, payload, signature: bytes = b"sig") -> str:
    return ".".join((b64(json.dumps(header).encode()), b64(json.dumps(payload).encode()), b64(signature)))


class Issuer:
    """The API server's two discovery routes; ``docs[path] = (status, body bytes, delay seconds)``."""

    def __init__(self):
        self.docs: dict[str, tuple[int, bytes, float]] = {}
        self.reads = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                issuer.reads += 1
                status, body, delay = issuer.docs.get(self.path, (404, b"{}", 0.0))
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.serve(discovery(), GOOD_JWKS)

    def serve(self, disc, jwks, *, disc_status=200, jwks_status=200, delay=0.0):
        enc = lambda d: d if isinstance(d, bytes) else json.dumps(d).encode()  # noqa: E731
        self.docs = {
            "/.well-known/openid-configuration": (disc_status, enc(disc), 0.0),
            "/openid/v1/jwks": (jwks_status, enc(jwks), delay),
        }

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def discovery(**over) -> dict:
    return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}:443/openid/v1/jwks", **over}


class Sink:
    candidates = [1, 3]

    def current_table(self):
        return StepTable.single(3)

    def apply_table(self, table):
        return {"queued": 1}


@pytest.fixture
def issuer():
    i = Issuer()
    yield i
    i.close()


async def control_client(api_server: str, **settings) -> tuple[TestClient, ServiceAccountVerifier]:
    verifier = ServiceAccountVerifier(
        Settings(issuer=ISSUER, audience=AUDIENCE, subjects=(OPERATOR,), api_server=api_server, **settings)
    )
    app = web.Application()
    add_step_routes(app, Sink(), None, verifier)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client, verifier


async def answer(client: TestClient, token: str) -> tuple[int, str]:
    r = await client.get(STEPS_PATH, headers={"Authorization": f"Bearer {token}"})
    return r.status, await r.text()


def assert_generic(status: int, body: str) -> None:
    """Nothing about the configuration or the failure in the answer: no issuer, audience, caller or traceback."""
    for secret in (ISSUER, AUDIENCE, OPERATOR, "Traceback", "Error", "kid", "rsa1"):
        assert secret not in body, (status, body)


HMAC_SECRET = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.PKCS1)
TOKENS = {  # name -> (token, expected status)
    "valid RS256": (lambda: sign(RSA_KEY, "RS256", "rsa1"), 200),
    "valid ES256": (lambda: sign(EC_KEY, "ES256", "ec1"), 200),
    "ES256 under an RSA key id": (lambda: sign(EC_KEY, "ES256", "rsa1"), 401),
    "RS256 under an EC key id": (lambda: sign(RSA_KEY, "RS256", "ec1"), 401),
    "HS256 keyed with the RSA public key": (
        lambda: raw({"alg": "HS256", "kid": "rsa1"}, claims(), b"x" * 32),
        401,
    ),
    "alg none": (lambda: raw({"alg": "none", "kid": "rsa1"}, claims(), b""), 401),
    "alg missing": (lambda: raw({"kid": "rsa1"}, claims()), 401),
    "kid a number": (lambda: raw({"alg": "RS256", "kid": 7}, claims()), 401),
    "kid an object": (lambda: raw({"alg": "RS256", "kid": {"a": 1}}, claims()), 401),
    "kid a list": (lambda: raw({"alg": "RS256", "kid": ["rsa1"]}, claims()), 401),
    "no kid": (lambda: sign(RSA_KEY, "RS256", ...), 401),
    "unknown kid": (lambda: sign(RSA_KEY, "RS256", "rotated-away"), 401),
    "header a JSON list": (lambda: b64(b"[1,2]") + "." + b64(b"{}") + ".c2ln", 401),
    "header not JSON": (lambda: b64(b"\xff\xfe") + "." + b64(b"{}") + ".c2ln", 401),
    "payload a JSON list": (lambda: raw({"alg": "RS256", "kid": "rsa1"}, [1, 2]), 401),
    "one segment": (lambda: "abc", 401),
    "five segments": (lambda: "a.b.c.d.e", 401),
    "dots only": (lambda: "....", 401),
    "not base64": (lambda: "!!!.###.$$$", 401),
    "long": (lambda: "a" * 8000, 401),
    "beyond the header limit": (lambda: "a" * 20000, 400),  # the HTTP parser's own 400
    "forged signature": (
        lambda: sign(rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256", "rsa1"),
        401,
    ),
    "expired": (lambda: sign(RSA_KEY, "RS256", "rsa1", exp=int(time.time()) - 3600), 401),
    "exp a string": (lambda: sign(RSA_KEY, "RS256", "rsa1", exp="tomorrow"), 401),
    "another deployment's audience": (lambda: sign(RSA_KEY, "RS256", "rsa1", aud=["specdecode-runtime/b/x/1"]), 401),
    "audience an object": (lambda: sign(RSA_KEY, "RS256", "rsa1", aud={"a": AUDIENCE}), 401),
    "other issuer": (lambda: sign(RSA_KEY, "RS256", "rsa1", iss="https://evil.example"), 401),
    "no subject": (lambda: sign(RSA_KEY, "RS256", "rsa1", sub=None), 401),
    "subject a number": (lambda: sign(RSA_KEY, "RS256", "rsa1", sub=5), 401),
    "another ServiceAccount": (lambda: sign(RSA_KEY, "RS256", "rsa1", sub="system:serviceaccount:x:intruder"), 403),
}


async def test_every_malformed_token_is_a_4xx_with_a_generic_body(issuer):
    client, _ = await control_client(issuer.url)
    try:
        for name, (make, expected) in TOKENS.items():
            status, body = await answer(client, make())
            assert status == expected, (name, status, body)
            if status != 200:
                assert_generic(status, body)
    finally:
        await client.close()


DOCUMENTS = {  # name -> (discovery, jwks, extra serve() arguments)
    "discovery a JSON list": ([discovery()], GOOD_JWKS, {}),
    "discovery a string": ("issuer", GOOD_JWKS, {}),
    "discovery not JSON": (b"<html>", GOOD_JWKS, {}),
    "discovery not UTF-8": (b"\xff\xfe\x00", GOOD_JWKS, {}),
    "discovery of another issuer": (discovery(issuer="https://evil.example"), GOOD_JWKS, {}),
    "jwks_uri a number": (discovery(jwks_uri=5), GOOD_JWKS, {}),
    "jwks_uri missing": ({"issuer": ISSUER}, GOOD_JWKS, {}),
    "jwks_uri without a path": (discovery(jwks_uri="https://x"), GOOD_JWKS, {}),
    "discovery too large": (discovery(pad="x" * 100_000), GOOD_JWKS, {}),
    "JWKS without keys": (discovery(), {"keys": []}, {}),
    "JWKS keys an object": (discovery(), {"keys": {"rsa1": GOOD_JWKS["keys"][0]}}, {}),
    "JWKS a list": (discovery(), GOOD_JWKS["keys"], {}),
    "JWKS key without n and e": (
        discovery(),
        {"keys": [{k: v for k, v in GOOD_JWKS["keys"][0].items() if k not in ("n", "e")}]},
        {},
    ),
    "JWKS key of an unknown type": (discovery(), {"keys": [{"kty": "XYZ", "kid": "rsa1"}]}, {}),
    "JWKS entries not objects": (discovery(), {"keys": [None, "rsa1", 5, []]}, {}),
    "JWKS key with a numeric kid": (discovery(), {"keys": [{**GOOD_JWKS["keys"][0], "kid": 1}]}, {}),
    "JWKS key with n not base64": (discovery(), {"keys": [{**GOOD_JWKS["keys"][0], "n": "!!"}]}, {}),
    "JWKS HMAC key under the RSA key id": (discovery(), {"keys": [{"kty": "oct", "kid": "rsa1", "k": "c2VjcmV0"}]}, {}),
}


@pytest.mark.parametrize("case", sorted(DOCUMENTS))
async def test_malformed_issuer_documents_are_a_401(issuer, case):
    disc, jwks, extra = DOCUMENTS[case]
    issuer.serve(disc, jwks, **extra)
    client, _ = await control_client(issuer.url)
    try:
        status, body = await answer(client, sign(RSA_KEY, "RS256", "rsa1"))
        assert status == 401, (case, status, body)
        assert_generic(status, body)
    finally:
        await client.close()


@pytest.mark.parametrize("case", ["discovery 500", "JWKS 503", "discovery 403", "nothing listening"])
async def test_an_issuer_that_cannot_be_read_is_a_503(issuer, case):
    api = issuer.url
    if case == "discovery 500":
        issuer.serve(discovery(), GOOD_JWKS, disc_status=500)
    elif case == "JWKS 503":
        issuer.serve(discovery(), GOOD_JWKS, jwks_status=503)
    elif case == "discovery 403":
        issuer.serve(discovery(), GOOD_JWKS, disc_status=403)
    else:
        api = "http://127.0.0.1:9"  # discard port: connection refused
    client, _ = await control_client(api)
    try:
        r = await client.get(STEPS_PATH, headers={"Authorization": f"Bearer {sign(RSA_KEY, 'RS256', 'rsa1')}"})
        assert r.status == 503 and r.headers["Retry-After"], (case, r.status)
        assert_generic(r.status, await r.text())
        # a bad token is still the caller's fault, outage or not
        assert (await answer(client, "not-a-jwt"))[0] == 401
    finally:
        await client.close()


async def test_a_hanging_key_endpoint_holds_no_request_past_the_deadline(issuer):
    """One refresh in flight (single flight); 16 concurrent requests wait at most the deadline each, together,
    then get 503; the hanging read never grows into a queue. When the endpoint answers again, keys load."""
    issuer.serve(discovery(), GOOD_JWKS, delay=4.0)
    client, verifier = await control_client(issuer.url, refresh_deadline=0.5, timeout=3.0, failure_cooldown=0.0)
    token = sign(RSA_KEY, "RS256", "rsa1")
    try:
        started = time.monotonic()
        answers = await asyncio.gather(*(answer(client, token) for _ in range(16)))
        took = time.monotonic() - started
        assert {s for s, _ in answers} == {503}, answers
        assert took < 2.0, f"16 requests behind a hanging key endpoint took {took:.1f} s"
        assert verifier.refreshes == 1
        # the endpoint comes back: the read in flight times out (3 s), the next one succeeds
        issuer.serve(discovery(), GOOD_JWKS)

        async def accepted() -> bool:
            return (await answer(client, token))[0] == 200

        deadline = time.monotonic() + 10
        while not await accepted():
            assert time.monotonic() < deadline, "keys never loaded after the endpoint recovered"
            await asyncio.sleep(0.2)
    finally:
        await client.close()


async def test_known_keys_need_no_read_and_unknown_ones_are_read_at_most_once_per_cooldown(issuer):
    client, verifier = await control_client(issuer.url, cooldown=30.0)
    try:
        assert (await answer(client, sign(RSA_KEY, "RS256", "rsa1")))[0] == 200
        reads = issuer.reads
        for _ in range(5):
            assert (await answer(client, sign(RSA_KEY, "RS256", "rsa1")))[0] == 200
            assert (await answer(client, sign(RSA_KEY, "RS256", "unknown")))[0] == 401
        assert issuer.reads == reads and verifier.refreshes == 1
    finally:
        await client.close()
