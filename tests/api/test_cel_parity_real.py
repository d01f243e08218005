"""`specdecode validate` and a real kube-apiserver agree on every document of a corpus.

Each document is created with a server-side dry run (strict field validation, as `kubectl apply` does) and
validated in Python with the same CRD; both must accept it, or both refuse it and name the same fields. The CRD
itself must install with every CEL rule inside the API server's cost budget.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

TESTS = Path(__file__).resolve().parents[1]
for p in (TESTS / "api", TESTS / "render"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from cel_corpus import corpus  # noqa: E402
from test_property import documents  # noqa: E402

from specdecode_operator.api.validate import InvalidSpec, parse  # noqa: E402
from tests.k8s.realapi import ApiServer, Refusal  # noqa: E402

NAMESPACE = "parity"
CRD_FILE = TESTS.parent / "crds" / "specdecode.io_specdecodedeployments.yaml"


@pytest.fixture(scope="module")
def api(apiserver_bed) -> ApiServer:
    """The session's API server (tests/conftest.py), its CRD applied again from the committed file (the bed applied
    the same file; nothing in the suite changes it), every document in a namespace of this module's own."""
    api = ApiServer(apiserver_bed.env.kubeconfig)
    api.apply_crd(yaml.safe_load(CRD_FILE.read_text()))
    api.ensure_namespace(NAMESPACE)
    yield api
    api.close()


def local_fields(doc: dict) -> set[str]:
    """The fields `specdecode validate` names (its parse: schema, CEL, then the typed models)."""
    try:
        parse(doc)
    except InvalidSpec as e:
        return {p.path for p in e.problems}
    return set()


def server_fields(api: ApiServer, doc: dict) -> set[str] | None:
    """None when the API server accepts the document; else the fields its refusal names."""
    try:
        api.dry_run_create_sdd(NAMESPACE, doc)
    except Refusal as refusal:
        return refusal.fields
    return None


def assert_agree(api: ApiServer, doc: dict) -> None:
    doc = copy.deepcopy(doc)
    if isinstance(doc.get("metadata"), dict):
        doc["metadata"]["namespace"] = NAMESPACE
    remote = server_fields(api, doc)
    local = local_fields(doc)
    shown = json.dumps(doc.get("spec"), sort_keys=True)[:400]
    if remote is None:
        assert not local, f"the API server accepts, specdecode validate refuses {sorted(local)}: {shown}"
    else:
        assert local, f"the API server refuses {sorted(remote)}, specdecode validate accepts: {shown}"
        assert local == remote, f"fields differ: server {sorted(remote)}, validate {sorted(local)}: {shown}"


def test_crd_is_established_with_every_rule_inside_the_cost_budget(api):
    crd = api.get_crd("specdecodedeployments.specdecode.io")
    conditions = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conditions["Established"]["status"] == "True"
    assert conditions["NamesAccepted"]["status"] == "True"
    served = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    committed = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert served == committed, "the API server pruned or rewrote part of the committed schema"


CORPUS = corpus()


@pytest.mark.parametrize("doc", [d for _, d in CORPUS], ids=[i for i, _ in CORPUS])
def test_corpus_document_gets_the_same_verdict(api, doc):
    assert_agree(api, doc)


def in_namespace(doc: dict) -> dict:
    return dict(doc, metadata={**doc["metadata"], "namespace": NAMESPACE})


def test_corpus_covers_both_verdicts_and_the_cli_gives_them(api, tmp_path):
    verdicts = {i: server_fields(api, in_namespace(d)) for i, d in CORPUS}
    accepted = [i for i, v in verdicts.items() if v is None]
    refused = [i for i, v in verdicts.items() if v is not None]
    assert len(accepted) >= 10 and len(refused) >= 30, (accepted, refused)
    docs = dict(CORPUS)
    good = tmp_path / "accepted.yaml"
    good.write_text(yaml.safe_dump_all([in_namespace(docs[i]) for i in accepted]))
    done = subprocess.run(
        [sys.executable, "-m", "specdecode_operator.cli", "validate", "-f", str(good)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.count(": valid") == len(accepted), done.stdout + done.stderr
    bad = tmp_path / "refused.yaml"
    bad.write_text(yaml.safe_dump_all([in_namespace(docs[i]) for i in refused]))
    done = subprocess.run(
        [sys.executable, "-m", "specdecode_operator.cli", "validate", "-f", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    for i in refused:
        for field in verdicts[i]:
            assert f"  {field}: " in done.stderr, f"{i}: {field} not named by specdecode validate"


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(doc=documents())
def test_generated_documents_get_the_same_verdict(api, doc):
    assert_agree(api, doc)


def _variant(tag: str, edit) -> dict:
    """The committed CRD under another name, with ``edit`` applied to its spec schema."""
    crd = copy.deepcopy(yaml.safe_load(CRD_FILE.read_text()))
    crd["metadata"]["name"] = f"costprobe{tag}s.example.io"
    crd["spec"]["group"] = "example.io"
    crd["spec"]["names"] = {
        "kind": f"CostProbe{tag.upper()}",
        "plural": f"costprobe{tag}s",
        "singular": f"costprobe{tag}",
        "listKind": f"CostProbe{tag.upper()}List",
    }
    edit(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    return crd


@pytest.mark.parametrize(
    "tag,bound",
    [
        ("a", ("runtime", "extraArgs", "maxItems")),
        ("b", ("runtime", "extraArgs", "items", "maxLength")),
        ("c", ("draft", "ranks", "maxItems")),
    ],
)
def test_the_schema_bounds_are_what_keeps_the_rules_inside_the_cost_budget(api, tag, bound):
    """The API server's estimator is at work here: without one of these bounds the CRD is refused for cost."""

    def drop(spec):
        node = spec[bound[0]]["properties"][bound[1]]
        for part in bound[2:-1]:
            node = node[part]
        del node[bound[-1]]

    with pytest.raises(Refusal) as err:
        api.call(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            _variant(tag, drop),
            query=[("dryRun", "All")],
        )
    assert err.value.status == 422
    assert "estimated rule cost exceeds budget" in err.value.body["message"], err.value.body["message"][:500]


def test_the_api_server_gives_the_same_model_hint_as_specdecode_validate(api):
    """A refused model's message is a CEL messageExpression: the API server evaluates it to the same words as
    `specdecode validate` (the field, what was written, the spelling that was probably meant)."""
    from cel_corpus import with_
    from test_admission import MODEL_HINTS

    from specdecode_operator.api.validate import validate_object

    for owner in ("target", "draft"):
        for model, hint in MODEL_HINTS:
            doc = in_namespace(with_(f"spec.{owner}.model", model))
            with pytest.raises(Refusal) as refused:
                api.dry_run_create_sdd(NAMESPACE, doc)
            causes = [c for c in refused.value.body["details"]["causes"] if c.get("field") == f"spec.{owner}.model"]
            (local,) = validate_object(doc)
            assert len(causes) == 1 and causes[0]["message"].endswith(local.message), (causes, local)
            assert local.message.endswith(hint) and model in local.message


@pytest.mark.parametrize(
    "field,key",
    [
        ("spec.podTemplate.metadata.labels", "app.kubernetes.io/instance"),
        ("spec.podTemplate.metadata.labels", "leaderworkerset.sigs.k8s.io/worker-index"),
        ("spec.monitoring.labels", "app.kubernetes.io/name"),
    ],
)
def test_the_api_server_refuses_a_label_that_would_override_the_operators_naming_field_and_key(api, field, key):
    """A pod or ServiceMonitor label that would take the place of one the selectors are made of is refused at
    admission: the API server names the field and, through the rule's messageExpression, the key, in the same
    words as `specdecode validate`."""
    from cel_corpus import with_

    from specdecode_operator.api.validate import validate_object

    doc = in_namespace(with_(field, {"team": "ml", key: "other"}))
    with pytest.raises(Refusal) as refused:
        api.dry_run_create_sdd(NAMESPACE, doc)
    causes = [c for c in refused.value.body["details"]["causes"] if c.get("field") == field]
    (local,) = validate_object(doc)
    assert local.path == field
    assert len(causes) == 1 and causes[0]["message"].endswith(local.message), (causes, local)
    assert f"may not set {key}, one of the operator's own labels" in causes[0]["message"]
    api.dry_run_create_sdd(NAMESPACE, in_namespace(with_(field, {"team": "ml"})))  # the same without it passes
