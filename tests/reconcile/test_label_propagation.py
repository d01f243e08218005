"""A label edit on a SpecDecodeDeployment reaches its children: labels do not bump the generation, so the caches the
reconciler keeps per generation (the parsed object, the rendered children's input hashes) must key on them too, or
the children would keep the old labels until the next spec change. And the operator's ServiceMonitor label default
(chart value runtime.serviceMonitor.labels) reaches the render."""

from __future__ import annotations

import copy

import yaml

from specdecode_operator.config import OperatorConfig
from specdecode_operator.object_state import ObjectState, validated
from specdecode_operator.reconcile.reconciler import Reconciler
from tests.cli.clitest import EXAMPLE


class NoClient:
    async def get(self, api_version, plural, namespace, name):
        return None


def body(labels: dict, generation: int = 3) -> dict:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"].update(uid="u-1", generation=generation, labels=copy.deepcopy(labels))
    doc["spec"]["monitoring"] = {"serviceMonitor": True}
    return doc


def children_of(rec: Reconciler, doc: dict, state: ObjectState) -> tuple[dict, dict]:
    """(child key -> input hash as the pass sees it, child key -> full manifest)."""
    sdd, problems = validated(doc, state)
    assert not problems
    stubs, full = rec._desired(doc, sdd, state)
    hashes = {(s["apiVersion"], s["kind"], s["metadata"]["name"]): s for s in stubs}
    return hashes, full()


def test_a_label_edit_without_a_generation_bump_reaches_every_child():
    rec = Reconciler(OperatorConfig(), None, NoClient())  # type: ignore[arg-type]
    state = ObjectState()
    before, _ = children_of(rec, body({"team": "a"}), state)
    after, manifests = children_of(rec, body({"team": "b"}), state)  # same generation
    assert before.keys() == after.keys()
    assert all(before[k] != after[k] for k in before), "a child's input hash did not change with the label"
    assert {m["metadata"]["labels"]["team"] for m in manifests.values()} == {"b"}
    # and a pass on the same body reuses the caches (what they are for)
    cached = state.validation
    again, _ = children_of(rec, body({"team": "b"}), state)
    assert again == after and state.validation is cached


def test_the_operators_service_monitor_label_default_reaches_the_render():
    config = OperatorConfig.from_env({"SPECDECODE_SERVICE_MONITOR_LABELS": '{"release": "kps"}'})
    rec = Reconciler(config, None, NoClient())  # type: ignore[arg-type]
    _, manifests = children_of(rec, body({}), ObjectState())
    (monitor,) = [m for m in manifests.values() if m["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "kps"
