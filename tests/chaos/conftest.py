import pytest

from tests.chaos.chaoslib import Bed


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
