"""A change of spec.draft.model alone does not change the pods while it is rolled out in place."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import RenderOptions, draft_source, names, render

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, **draft):
    body = yaml.safe_load((ROOT / "examples" / name).read_text())
    body["spec"]["draft"].update(draft)
    return parse(body)


def workload(sdd, served=None):
    for m in render(sdd, RenderOptions(served_draft=served)):
        if m["kind"] in ("Deployment", "LeaderWorkerSet"):
            return m
    raise AssertionError("no workload")


def template_of(w):
    spec = w["spec"]
    return spec["template"] if "template" in spec else spec["leaderWorkerTemplate"]


def served_status(source):
    return {"draft": {"serving": {"source": source}, "phase": "Serving"}}


def test_draft_only_change_keeps_the_pod_template_while_canaried():
    old = load("pcie8-glm5-eagle3.yaml", model="/models/draft-a")
    new = load("pcie8-glm5-eagle3.yaml", model="/models/draft-b")
    served = draft_source.served_model(new, served_status("/models/draft-a"))
    assert served == "/models/draft-a"
    before, after = workload(old), workload(new, served)
    assert template_of(before) == template_of(after)
    ann = before["spec"]["template"]["metadata"]["annotations"]
    assert (
        ann[names.CONFIG_HASH_ANNOTATION]
        == after["spec"]["template"]["metadata"]["annotations"][names.CONFIG_HASH_ANNOTATION]
    )
    # once promoted (serving == spec) the render names the new draft: the template changes only then, and a pod
    # restarted later loads the promoted draft from its config
    promoted = draft_source.served_model(new, served_status("/models/draft-b"))
    assert promoted == "/models/draft-b"
    assert template_of(workload(new, promoted)) != template_of(before)


@pytest.mark.parametrize(
    "old,new,in_place",
    [
        ("/models/a", "/models/b", True),
        ("pvc://weights/a", "pvc://weights/b", True),
        ("pvc://weights/a", "/models/b", False),  # promoting it would drop the claim: a template change
        ("pvc://weights/a", "pvc://other/b", False),  # a new claim is a new volume
        ("/models/a", "hf://org/draft", False),  # a hub draft needs the fetch init container
        ("hf://org/a", "/models/b", False),  # the hub cache volume goes away only with a restart
    ],
)
def test_which_changes_are_loaded_in_place(old, new, in_place):
    sdd = load("pcie8-glm5-eagle3.yaml", model=new)
    problem = draft_source.in_place_problem(sdd.spec, old, new)
    assert (problem is None) == in_place, problem
    assert draft_source.served_model(sdd, served_status(old)) == (old if in_place else new)


def test_nothing_recorded_or_no_replicas_renders_spec():
    sdd = load("pcie8-glm5-eagle3.yaml", model="/models/b")
    assert draft_source.served_model(sdd, None) == "/models/b"
    scaled = parse(
        {
            **copy.deepcopy(sdd.model_dump(mode="json", exclude_none=True)),
            "spec": {**sdd.model_dump(mode="json", exclude_none=True)["spec"], "replicas": 0},
        }
    )
    assert draft_source.served_model(scaled, served_status("/models/a")) == "/models/b"


def test_stock_sglang_launcher_restarts():
    sdd = load("pcie8-glm5-eagle3.yaml", model="/models/b")
    stock = sdd.spec.model_copy(update={"runtime": sdd.spec.runtime.model_copy(update={"launcher": "sglang"})})
    assert "stock SGLang" in (draft_source.in_place_problem(stock, "/models/a", "/models/b") or "")
