"""global.imageRegistry and the operator-wide ServiceMonitor labels, from the chart's values to what the operator
renders.

global.imageRegistry replaces the registry of the operator image and of the default runtime and stock SGLang images
the chart hands the operator, as Docker reads an image reference (the first path part is a registry when it has a
'.' or ':' or is localhost; else the image is Docker Hub's and the registry goes in front). The operator configured
from the chart's own environment then renders SpecDecodeDeployments that name no image with the mirrored one, and
one that names an image with that image as written. runtime.serviceMonitor.labels reach every per-deployment
ServiceMonitor, under a deployment's own spec.monitoring.labels.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specdecode_operator import images
from specdecode_operator.api.validate import parse
from specdecode_operator.config import OperatorConfig
from specdecode_operator.reconcile.reconciler import Reconciler
from specdecode_operator.render import render as render_sdd
from tests.chart.chartlib import CHART, RELEASE, chart, one, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pcie8-glm5-eagle3.yaml"
DIGEST = "@sha256:" + "a" * 64

# global.imageRegistry, image values -> (operator image, default runtime image, default SGLang image)
REGISTRIES = {
    "unset": (
        {},
        (images.OPERATOR_IMAGE, images.RUNTIME_IMAGE, images.SGLANG_IMAGE),
    ),
    "mirror host": (
        {"global": {"imageRegistry": "mirror.example.com"}},
        (
            "mirror.example.com/specdecode/specdecode-operator:0.1.0",
            "mirror.example.com/specdecode/specdecode-runtime:0.1.0",
            "mirror.example.com/" + images.SGLANG_IMAGE,  # Docker Hub's: the registry goes in front
        ),
    ),
    "host, port and path": (
        {"global": {"imageRegistry": "harbor.corp:8443/proxy"}},
        (
            "harbor.corp:8443/proxy/specdecode/specdecode-operator:0.1.0",
            "harbor.corp:8443/proxy/specdecode/specdecode-runtime:0.1.0",
            "harbor.corp:8443/proxy/" + images.SGLANG_IMAGE,
        ),
    ),
    "own images with ports, localhost, digests and single names": (
        {
            "global": {"imageRegistry": "mirror.local"},
            "image": {"repository": "registry.example.com:5000/sd/op", "tag": "1.2.3"},
            "runtime": {"image": "localhost/sd/runtime" + DIGEST, "sglangImage": "sglang:v9"},
        },
        ("mirror.local/sd/op:1.2.3", "mirror.local/sd/runtime" + DIGEST, "mirror.local/sglang:v9"),
    ),
    "empty string": ({"global": {"imageRegistry": ""}}, (images.OPERATOR_IMAGE, images.RUNTIME_IMAGE, images.SGLANG_IMAGE)),
    "other global values only": ({"global": {"storageClass": "x"}}, (images.OPERATOR_IMAGE, images.RUNTIME_IMAGE, images.SGLANG_IMAGE)),
}  # fmt: skip


def operator_container(values: dict) -> dict:
    return one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]


def operator_config(values: dict) -> OperatorConfig:
    """The operator as the chart configures it (its SPECDECODE_* environment)."""
    env = {e["name"]: e["value"] for e in operator_container(values)["env"] if "value" in e}
    return OperatorConfig.from_env(env)


class NoClient:
    """The reconciler's API client, never called by ``options``."""


def rendered_by_operator(config: OperatorConfig, doc: dict) -> list[dict]:
    rec = Reconciler(config, None, NoClient())  # type: ignore[arg-type]
    return render_sdd(parse(doc), rec.options(None))


def runtime_image(manifests: list[dict]) -> str:
    (workload,) = [m for m in manifests if m["kind"] == "Deployment"]
    return workload["spec"]["template"]["spec"]["containers"][0]["image"]


def example(**spec) -> dict:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].update(spec)
    return doc


@pytest.mark.parametrize("case", list(REGISTRIES))
def test_global_image_registry_reaches_the_operator_image_and_every_default_runtime_image(case):
    values, (operator, runtime, sglang) = REGISTRIES[case]
    assert operator_container(values)["image"] == operator
    config = operator_config(values)
    assert (config.default_image, config.default_sglang_image) == (runtime, sglang)
    assert runtime_image(rendered_by_operator(config, example())) == runtime
    stock = example(
        runtime={"launcher": "sglang"},
        draft={"model": "/models/d", "tensorParallelSize": 8},
        speculative={"autotune": {"mode": "Off"}},
    )
    assert runtime_image(rendered_by_operator(config, stock)) == sglang
    # an image a deployment names is used as written
    named = example(runtime={"image": "registry.tenant.example/runtime:2"})
    assert runtime_image(rendered_by_operator(config, named)) == "registry.tenant.example/runtime:2"


def test_the_charts_default_images_are_the_operators():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["runtime"]["sglangImage"] == images.SGLANG_IMAGE
    assert values["runtime"]["image"] == images.RUNTIME_IMAGE
    assert values["global"]["imageRegistry"] == ""


def test_service_monitor_labels_reach_every_deployments_monitor_under_its_own():
    values = {"runtime": {"serviceMonitor": {"labels": {"release": "kube-prometheus-stack", "team": "platform"}}}}
    config = operator_config(values)
    assert dict(config.service_monitor_labels) == {"release": "kube-prometheus-stack", "team": "platform"}
    doc = example(monitoring={"serviceMonitor": True, "labels": {"team": "ml"}})
    (monitor,) = [m for m in rendered_by_operator(config, doc) if m["kind"] == "ServiceMonitor"]
    labels = monitor["metadata"]["labels"]
    assert (labels["release"], labels["team"], labels["app.kubernetes.io/component"]) == (
        "kube-prometheus-stack",
        "ml",
        "metrics",
    )
    # unset: no environment variable, no labels
    assert "SPECDECODE_SERVICE_MONITOR_LABELS" not in {e["name"] for e in operator_container({})["env"]}
    assert operator_config({}).service_monitor_labels == ()


BAD = {
    "registry with a scheme": ({"global": {"imageRegistry": "https://mirror.example.com"}}, "/global/imageRegistry"),
    "registry with a space": ({"global": {"imageRegistry": "mirror example"}}, "/global/imageRegistry"),
    "registry with a trailing slash": ({"global": {"imageRegistry": "mirror.example.com/"}}, "/global/imageRegistry"),
    "untagged sglang image": ({"runtime": {"sglangImage": "lmsysorg/sglang"}}, "/runtime/sglangImage"),
    # Helm names a refused key, not its path
    "operator label": (
        {"runtime": {"serviceMonitor": {"labels": {"app.kubernetes.io/instance": "x"}}}},
        "invalid propertyName 'app.kubernetes.io/instance'",
    ),
    "operator domain label": (
        {"runtime": {"serviceMonitor": {"labels": {"specdecode.io/x": "y"}}}},
        "invalid propertyName 'specdecode.io/x'",
    ),
    "bad label key": ({"runtime": {"serviceMonitor": {"labels": {"a b": "y"}}}}, "invalid propertyName 'a b'"),
    "bad label value": (
        {"runtime": {"serviceMonitor": {"labels": {"release": "a/b"}}}},
        "/runtime/serviceMonitor/labels/release",
    ),
    "unknown runtime.serviceMonitor key": (
        {"runtime": {"serviceMonitor": {"enabled": True}}},
        "enabled",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values_fail_with_the_path(case):
    values, needle = BAD[case]
    with pytest.raises(Exception) as err:
        chart().render(values, name=RELEASE, namespace="ns", is_install=True)
    assert needle in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ('{"app.kubernetes.io/name": "x"}', "operator's own label"),
        ('{"a b": "x"}', "is not a label key"),
        ('{"release": "a/b"}', "is not a label value"),
        ('{"release": 1}', "string labels"),
        ('["release"]', "string labels"),
        ("release=kps", "JSON object"),
    ],
)
def test_the_operator_refuses_a_bad_service_monitor_label_default_naming_the_variable(text, fragment):
    """An operator started without the chart (or with extraEnv) checks the same rules as admission."""
    with pytest.raises(ValueError) as err:
        OperatorConfig.from_env({"SPECDECODE_SERVICE_MONITOR_LABELS": text})
    assert "SPECDECODE_SERVICE_MONITOR_LABELS" in str(err.value) and fragment in str(err.value), str(err.value)
