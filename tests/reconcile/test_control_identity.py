"""The operator's step-control identity from its projected ServiceAccount token (control_identity.py)."""

import dataclasses
import logging

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


def test_service_account_mode_reads_issuer_and_subject_from_the_operators_own_token(tmp_path):
    path = tmp_path / "token"
    path.write_text(token() + "\n")
    config = OperatorConfig(control_auth="ServiceAccount", control_token_file=str(path))
    auth = control_identity.control_auth(config)
    assert (auth.issuer, auth.audience, auth.subjects) == ("https://issuer.example", "specdecode-runtime", (SUB,))
    assert control_identity.bearer(config) == token()
    path.write_text(token(iss="https://rotated.example") + "\n")  # kubelet rotates the file in place
    assert control_identity.control_auth(config).issuer == "https://rotated.example"


def test_secret_mode_or_an_unusable_file_falls_back_to_the_secret(tmp_path, caplog):
    assert control_identity.control_auth(OperatorConfig()) is None
    missing = OperatorConfig(control_auth="ServiceAccount", control_token_file=str(tmp_path / "absent"))
    with caplog.at_level(logging.WARNING, "specdecode.operator"):
        assert control_identity.control_auth(missing) is None
    assert "falls back to the control-token Secret" in caplog.text
    (tmp_path / "garbage").write_text("not a jwt")
    garbage = dataclasses.replace(missing, control_token_file=str(tmp_path / "garbage"))
    assert control_identity.control_auth(garbage) is None


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
