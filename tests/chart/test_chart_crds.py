"""The chart's crds/ carries the repository's CRD byte for byte, and both match the models."""

from specdecode_operator.api.crd import crd_yaml
from tests.chart.chartlib import CHART, ROOT

NAME = "specdecode.io_specdecodedeployments.yaml"


def test_chart_crd_is_identical_to_the_repository_crd():
    assert (CHART / "crds" / NAME).read_bytes() == (ROOT / "crds" / NAME).read_bytes(), (
        "charts/specdecode-operator/crds/ is stale: run `python tests/chart/regen.py`"
    )


def test_chart_crd_matches_the_generator():
    assert (CHART / "crds" / NAME).read_text() == crd_yaml()


def test_chart_ships_only_the_specdecode_crd():
    """Leader election uses a built-in Lease: no third-party CRD (kopf's peering) is installed."""
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == [NAME]
