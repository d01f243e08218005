"""values.schema.json rejects bad values with a message naming the offending value (install and template alike)."""

import helm_python as helm
import pytest

from tests.chart.chartlib import CHART, RELEASE, chart

BAD = {
    "replicas-as-string": ({"replicaCount": "two"}, "/replicaCount"),
    "zero-replicas": ({"replicaCount": 0}, "/replicaCount"),
    "unknown-top-level-key": ({"replicas": 2}, "replicas"),
    "typo-in-nested-key": (
        {"metrics": {"enabled": True, "port": 8080, "serviceMonitr": {"enabled": True}}},
        "serviceMonitr",
    ),
    "bad-log-level": ({"logLevel": "verbose"}, "/logLevel"),
    "namespaced-without-namespaces": ({"watch": {"allNamespaces": False, "namespaces": []}}, "/watch/namespaces"),
    "namespaces-while-all": ({"watch": {"allNamespaces": True, "namespaces": ["a"]}}, "/watch/namespaces"),
    "invalid-namespace-name": ({"watch": {"allNamespaces": False, "namespaces": ["Team_A"]}}, "/watch/namespaces/0"),
    "privileged-port": ({"metrics": {"enabled": True, "port": 80}}, "/metrics/port"),
    "untagged-runtime-image": ({"runtime": {"image": "ghcr.io/x/runtime"}}, "/runtime/image"),
    "bad-pull-policy": ({"image": {"repository": "r", "pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "servicemonitor-without-metrics": (
        {"metrics": {"enabled": False, "port": 8080, "serviceMonitor": {"enabled": True}}},
        "/metrics/enabled",
    ),
    "bad-duration": (
        {"metrics": {"enabled": True, "port": 8080, "serviceMonitor": {"interval": "30 seconds"}}},
        "/metrics/serviceMonitor/interval",
    ),
    "accept-floor-below-one": (
        {"metrics": {"enabled": True, "port": 8080, "prometheusRule": {"acceptLengthFloor": 0.5}}},
        "/metrics/prometheusRule/acceptLengthFloor",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values_fail_template_with_the_path(case):
    values, needle = BAD[case]
    with pytest.raises(Exception) as err:
        chart().render(values, name=RELEASE, namespace="ns", is_install=True)
    assert needle in str(err.value), str(err.value)


@pytest.mark.parametrize("case", ["replicas-as-string", "namespaced-without-namespaces", "unknown-top-level-key"])
def test_bad_values_fail_install_dry_run(case):
    values, needle = BAD[case]
    with helm.Config(namespace="ns") as cfg, pytest.raises(Exception) as err:
        cfg.install(str(CHART), RELEASE, values, dry_run="client")
    assert needle in str(err.value)


def test_good_values_pass_install_dry_run():
    with helm.Config(namespace="ns") as cfg:
        rel = cfg.install(str(CHART), RELEASE, {"replicaCount": 3}, dry_run="client")
    assert "kind: Deployment" in rel["manifest"] and "replicas: 3" in rel["manifest"]
