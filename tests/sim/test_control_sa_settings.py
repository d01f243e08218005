"""ServiceAccount-token step control as the pod's environment configures it (sa_token_auth.settings_from_env)."""

import pytest

from specdecode_runtime.sa_token_auth import settings_from_env

OPERATOR = "system:serviceaccount:specdecode-system:specdecode-operator"


def test_off_unless_an_issuer_is_set():
    assert settings_from_env({}) is None
    assert settings_from_env({"SPECDECODE_CONTROL_ISSUER": "  "}) is None


def test_an_issuer_needs_an_audience_and_allowed_subjects():
    with pytest.raises(ValueError, match="SPECDECODE_CONTROL_AUDIENCE and SPECDECODE_CONTROL_SUBJECTS"):
        settings_from_env(
            {"SPECDECODE_CONTROL_ISSUER": "https://kubernetes.default.svc", "SPECDECODE_CONTROL_SUBJECTS": OPERATOR}
        )


def test_in_a_pod_discovery_goes_to_the_api_server_service():
    s = settings_from_env(
        {
            "SPECDECODE_CONTROL_ISSUER": "https://kubernetes.default.svc.cluster.local",
            "SPECDECODE_CONTROL_AUDIENCE": "specdecode-runtime",
            "SPECDECODE_CONTROL_SUBJECTS": f"{OPERATOR}, system:serviceaccount:b:c",
            "KUBERNETES_SERVICE_HOST": "fd00::1",
            "KUBERNETES_SERVICE_PORT": "6443",
        }
    )
    assert s.api_server == "https://[fd00::1]:6443"
    assert s.subjects == (OPERATOR, "system:serviceaccount:b:c")
    assert s.ca_file.endswith("serviceaccount/ca.crt") and s.token_file.endswith("serviceaccount/token")
