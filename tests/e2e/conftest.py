# The e2e suite's fixtures live in tests/k8s/fixtures.py (shared with the emulator's own tests).
from k8s.fixtures import cluster, cluster_factory, emulated  # noqa: F401
