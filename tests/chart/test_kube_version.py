"""The chart's `kubeVersion` floor is at least what the pods the operator renders need: each pod feature with a
minimum Kubernetes version is listed here, found in the rendered examples, and the floor must cover it. The chart's
strict schema validation runs at that floor (tests/chart/test_chart_render.py), and so do the rendered children."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.chart.chartlib import CHART
from tests.chart.test_chart_render import K8S_VERSIONS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _prestop_sleep(pod: dict) -> bool:
    return any(
        "sleep" in ((c.get("lifecycle") or {}).get("preStop") or {})
        for c in [*pod.get("containers", []), *pod.get("initContainers", [])]
    )


# (feature, check over a pod spec, the first Kubernetes version that serves it to every cluster by default)
FEATURES = [
    ("lifecycle.preStop.sleep (PodLifecycleSleepAction, beta and on by default)", _prestop_sleep, (1, 30)),
]


def chart_floor() -> tuple[int, int]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    found = re.fullmatch(r">=\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:-0)?", chart["kubeVersion"].strip())
    assert found, f"kubeVersion {chart['kubeVersion']!r} is not a plain floor (>=MAJOR.MINOR.PATCH-0)"
    return int(found.group(1)), int(found.group(2))


def rendered_pods() -> list[tuple[str, dict]]:
    from specdecode_operator.api.validate import parse
    from specdecode_operator.render import render

    pods = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            for m in render(parse(doc)):
                if m["kind"] == "Deployment":
                    pods.append((f"{path.name}: Deployment", m["spec"]["template"]["spec"]))
                elif m["kind"] == "LeaderWorkerSet":
                    lws = m["spec"]["leaderWorkerTemplate"]
                    pods.append((f"{path.name}: leader", lws["leaderTemplate"]["spec"]))
                    pods.append((f"{path.name}: worker", lws["workerTemplate"]["spec"]))
    return pods


def test_the_chart_floor_covers_every_feature_the_rendered_pods_use():
    pods = rendered_pods()
    kinds = {where.split(": ")[1] for where, _ in pods}
    assert kinds == {"Deployment", "leader", "worker"}, kinds  # both workload kinds are looked at
    floor = chart_floor()
    used = []
    for feature, check, minimum in FEATURES:
        where = [w for w, pod in pods if check(pod)]
        if where:
            used.append(feature)
            assert floor >= minimum, (
                f"{feature} needs Kubernetes >= {minimum[0]}.{minimum[1]} (used by {where[0]}), "
                f"but Chart.yaml kubeVersion allows {floor[0]}.{floor[1]}"
            )
    assert used, "no listed feature is rendered: the table no longer describes the pods"


def test_schema_validation_runs_at_the_floor():
    floor = chart_floor()
    assert K8S_VERSIONS[0] == f"{floor[0]}.{floor[1]}", (K8S_VERSIONS, floor)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_rendered_children_validate_strictly_at_the_floor(path):
    from specdecode_operator.api.validate import parse
    from specdecode_operator.render import render

    floor = "{}.{}".format(*chart_floor())
    for doc in yaml.safe_load_all(path.read_text()):
        for m in render(parse(doc)):
            if m["apiVersion"].split("/")[0] in ("leaderworkerset.x-k8s.io", "monitoring.coreos.com"):
                continue  # custom kinds: tests/chart/test_upstream_schemas.py
            kubernetes_validate.validate(m, floor, strict=True)
