# The e2e suite's fixtures live in tests/k8s/fixtures.py (shared with the emulator's own tests).
from k8s.fixtures import (  # noqa: F401
    apiserver_bed, apiserver_factory, cluster, cluster_factory, emulated, emulator_factory, envtest_environment,
)
