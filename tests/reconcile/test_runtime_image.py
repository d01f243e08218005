"""A change of the operator's default runtime image restarts no runtime pod unless the deployment adopts it (the
annotation specdecode.io/adopt-default-image, or the operator's Follow policy); status.runtimeImage records it."""

from __future__ import annotations

import asyncio
import copy

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.config import OperatorConfig
from specdecode_operator.object_state import ObjectState, validated
from specdecode_operator.reconcile import children, events, runtime_image
from specdecode_operator.reconcile.reconciler import Reconciler, _Pass
from specdecode_operator.render import RenderOptions, render
from specdecode_operator.status import conditions
from tests.cli.clitest import EXAMPLE
from tests.k8s.cluster import minimal_sdd

OLD, NEW = "registry.example.com/specdecode-runtime:0.1.0", "registry.example.com/specdecode-runtime:0.2.0"
ADOPT = "specdecode.io/adopt-default-image"


def body(annotations: dict | None = None, status: dict | None = None, image: str = "") -> dict:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"].update(uid="u-1", generation=1, namespace="llm", annotations=dict(annotations or {}))
    doc["spec"].setdefault("runtime", {})["image"] = image
    if status is not None:
        doc["status"] = copy.deepcopy(status)
    return doc


def record(image: str = OLD, **extra) -> dict:
    return {"runtimeImage": {"launcher": "specdecode", "image": image, **extra}}


class Client:
    """Answers the one GET the reconciler may make: the serving workload whose cache record lacks its fields."""

    def __init__(self, workload: dict | None = None):
        self.workload, self.gets = workload, 0

    async def get(self, api_version, plural, namespace, name):
        self.gets += 1
        return self.workload


@pytest.fixture(autouse=True)
def posted(monkeypatch) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    monkeypatch.setattr(events, "emit", lambda _body, reason, message: out.append((reason, message)))
    return out


def served_image(manifests) -> str:
    (workload,) = [m for m in manifests if m["kind"] in ("Deployment", "LeaderWorkerSet")]
    found = runtime_image.running_image(workload)
    assert found is not None
    return found


def workload_of(image: str) -> dict:
    """The serving workload an operator with default ``image`` rendered (what a cluster holds before an upgrade)."""
    sdd = parse(body())
    (workload,) = [m for m in render(sdd, RenderOptions(default_image=image)) if m["kind"] == "Deployment"]
    return children.with_owner(workload, body())


def reconcile_image(doc: dict, *, default: str = NEW, policy: str = "Pinned", live=(), client=None) -> tuple:
    """(image of the rendered runtime container, status.runtimeImage) of one pass of an operator whose default is
    ``default``, over ``doc`` (its status as stored) and the live children ``live`` from the watch cache."""
    rec = Reconciler(OperatorConfig(default_image=default, runtime_image_policy=policy), None, client or Client())
    state = ObjectState()
    sdd, problems = validated(doc, state)
    assert not problems
    obs = conditions.Observation(generation=1, runtime_image=runtime_image.recorded(doc.get("status")))
    p = _Pass(doc, state, {children.key_of(o): o for o in live}, obs)
    image = asyncio.run(rec._runtime_image(p, sdd))
    _, full = rec._desired(doc, sdd, state, image)
    return served_image(full().values()), conditions.compute(obs)["runtimeImage"]


def test_a_new_deployment_records_the_current_default():
    image, rec = reconcile_image(body())
    assert image == NEW
    assert rec == {"launcher": "specdecode", "image": NEW}


def test_a_changed_default_leaves_the_rendered_pods_alone_and_says_a_newer_one_is_available(posted):
    image, rec = reconcile_image(body(status=record(OLD)))
    assert image == OLD
    assert rec == {"launcher": "specdecode", "image": OLD, "available": NEW}
    assert [r for r, _ in posted] == ["DefaultImageAvailable"]
    assert ADOPT in posted[0][1] and NEW in posted[0][1]


def test_the_pod_template_is_byte_identical_to_the_one_rendered_before_the_upgrade():
    before = render(parse(body()), RenderOptions(default_image=OLD))
    rec = Reconciler(OperatorConfig(default_image=NEW), None, Client())  # type: ignore[arg-type]
    after = render(parse(body()), rec.options(None, OLD))
    assert [m for m in after if m["kind"] == "Deployment"] == [m for m in before if m["kind"] == "Deployment"]


def test_the_annotation_adopts_the_new_default_once_per_value(posted):
    image, rec = reconcile_image(body({ADOPT: "2025-06-01"}, record(OLD)))
    assert image == NEW
    assert rec == {"launcher": "specdecode", "image": NEW, "adoptedToken": "2025-06-01"}
    assert ("DefaultImageAdopted", f"runtime image {OLD} -> {NEW}: pods roll") in posted
    # the same value, acted on already, adopts nothing newer: a later default is offered, not rolled out
    later = "registry.example.com/specdecode-runtime:0.3.0"
    image, rec = reconcile_image(body({ADOPT: "2025-06-01"}, {"runtimeImage": rec}), default=later)
    assert (image, rec["available"], rec["adoptedToken"]) == (NEW, later, "2025-06-01")
    # a new value adopts again
    image, rec = reconcile_image(body({ADOPT: "2025-09-01"}, {"runtimeImage": rec}), default=later)
    assert image == later and "available" not in rec


def test_the_follow_policy_renders_every_deployment_on_the_current_default():
    image, rec = reconcile_image(body(status=record(OLD)), policy="Follow")
    assert image == NEW
    assert rec == {"launcher": "specdecode", "image": NEW}


def test_an_explicit_image_wins_and_nothing_is_offered():
    image, rec = reconcile_image(body(status=record(OLD), image="mine/runtime:dev"))
    assert image == "mine/runtime:dev"
    assert rec == {"launcher": "specdecode", "image": OLD}


def test_a_changed_launcher_takes_that_launchers_current_default():
    doc = {**minimal_sdd("stock", tp=2, draft_tp=2), "status": record(OLD)}
    doc["spec"]["runtime"] = {"launcher": "sglang"}
    doc["spec"]["speculative"] = {"autotune": {"mode": "Off"}}
    rec = runtime_image.choose(parse(doc), "lmsysorg/sglang:v9", runtime_image.recorded(doc["status"]))
    assert rec == {"launcher": "sglang", "image": "lmsysorg/sglang:v9"}


def test_a_deployment_that_predates_the_record_keeps_what_its_pods_run():
    """The upgrade that introduces the record: no status.runtimeImage yet, the workload runs the old default."""
    watched = children.cache_record(workload_of(OLD))  # as the watch cache holds it: fields compressed
    image, rec = reconcile_image(body(), live=[watched])
    assert image == OLD
    assert rec == {"launcher": "specdecode", "image": OLD, "available": NEW}


def test_a_workload_record_without_its_fields_is_read_once():
    client = Client(workload_of(OLD))
    ours = children.cache_record(workload_of(OLD), fields=False)
    image, _ = reconcile_image(body(), live=[ours], client=client)
    assert (image, client.gets) == (OLD, 1)


def test_the_record_survives_passes_that_render_nothing():
    """An invalid or paused pass still writes status: it carries the record, and the writer compares it."""
    rec = record(OLD, available=NEW)["runtimeImage"]
    status = conditions.compute(conditions.Observation(generation=2, paused=True, runtime_image=rec))
    assert status["runtimeImage"] == rec
    from specdecode_operator.status import writer

    assert "runtimeImage" in writer.OPERATOR_FIELDS
    assert not writer.unchanged(status, {**status, "runtimeImage": {**rec, "image": NEW}})


def test_the_cached_render_is_keyed_by_the_recorded_image():
    rec = Reconciler(OperatorConfig(default_image=NEW), None, Client())  # type: ignore[arg-type]
    doc, state = body(), ObjectState()
    sdd, _ = validated(doc, state)
    first, _ = rec._desired(doc, sdd, state, OLD)
    second, _ = rec._desired(doc, sdd, state, NEW)
    key = ("apps/v1", "Deployment", doc["metadata"]["name"])

    def digest(stubs):
        return next(children.input_hash(s) for s in stubs if children.key_of(s) == key)

    assert digest(first) != digest(second)
