import sys
from pathlib import Path

import pytest

# tests/ (k8s.cluster, upstream helpers) and tests/chart (chartlib) as plain modules
for p in (Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[1] / "chart"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from chaos.chaoslib import Bed  # noqa: E402
from k8s.fixtures import apiserver_bed, envtest_environment  # noqa: E402,F401  (the real API server, once per session)


@pytest.fixture
def bed(tmp_path):
    b = Bed(tmp_path)
    yield b
    b.close()


@pytest.fixture
def replicas():
    """Operator processes started by a test; stopped (SIGTERM, then SIGKILL) at its end."""
    started = []
    yield started
    for r in started:
        r.close()
