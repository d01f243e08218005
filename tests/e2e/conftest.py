"""The e2e suite runs on the fixtures of tests/k8s/fixtures.py (shared with the chaos suite): each test on the API
emulator and on a real kube-apiserver."""

from tests.k8s.fixtures import (  # noqa: F401  (fixtures are found by name in a conftest's namespace)
    apiserver_factory,
    cluster,
    cluster_factory,
    emulated,
    emulator_factory,
)

# envtest_environment and apiserver_bed, the session's real API server, come from tests/conftest.py.
