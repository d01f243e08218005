"""The operator's step-control identity (control_identity.py); its tokens on the real API server are tested in
tests/e2e/test_control_sa_auth.py."""

import jwt

from specdecode_operator import control_identity
from specdecode_operator.config import OperatorConfig

SUB = "system:serviceaccount:specdecode-system:specdecode-operator"


def token(**claims) -> str:
    return jwt.encode(
        {"iss": "https://issuer.example", "sub": SUB, "aud": ["specdecode-runtime"], **claims},
        "k" * 32,
        algorithm="HS256",
    )


def test_service_account_mode_has_one_identity_per_client_and_secret_mode_none():
    config = OperatorConfig(control_auth="ServiceAccount", operator_namespace="ops", control_service_account="op")
    client = object.__new__(type("Client", (), {}))
    found = control_identity.identity(client, config)
    assert found is control_identity.identity(client, config) and found.subject == "system:serviceaccount:ops:op"
    assert control_identity.identity(client, OperatorConfig()) is None
    assert found.cached_auth() is None  # the issuer is unknown until read from the API server


def test_the_service_account_comes_from_the_environment():
    config = OperatorConfig.from_env({"SPECDECODE_CONTROL_SERVICE_ACCOUNT": "sd-operator"})
    assert config.control_service_account == "sd-operator"


def test_an_unknown_mode_is_refused_naming_the_variable():
    import pytest

    with pytest.raises(ValueError, match="SPECDECODE_CONTROL_AUTH must be ServiceAccount or Secret"):
        OperatorConfig.from_env({"SPECDECODE_CONTROL_AUTH": "Token"})


def test_the_claims_are_read_as_pyjwt_reads_them_without_verifying():
    """control_identity decodes its own token with the standard library (PyJWT and cryptography stay out of the
    operator process): the same claims as ``jwt.decode`` without verification, and a ValueError where it refuses."""
    import pytest

    for t in (token(), token(iss="https://rotated.example", exp=1), jwt.encode({"sub": "x" * 301}, "k" * 32)):
        assert control_identity.unverified_claims(t) == jwt.decode(t, options={"verify_signature": False})
    header, payload, signature = token().split(".")
    for bad in ("not a jwt", "a.b", f"{header}.!!!.{signature}", f"{header}.{header[:-2]}.{signature}", "e30.WzFd.x"):
        with pytest.raises(jwt.InvalidTokenError):
            jwt.decode(bad, options={"verify_signature": False})
        with pytest.raises(ValueError):
            control_identity.unverified_claims(bad)
