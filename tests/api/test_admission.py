"""Admission in Python (``specdecode validate``, the operator's check of objects that bypassed the API server):
defaulting, the OpenAPI schema as JSON Schema, the wording and field path of each kind of schema error, CEL rules
at every place a schema may carry them (root, object, list item, transition rules), and ``parse``.

The CRD's own schema is used where it has the shape under test; small CRDs written here cover the shapes it does
not have (a rule at the root, on list items, a transition rule, nullable fields, an exclusive maximum), since
``validate_object`` takes any CRD document and the test API emulator loads others.
"""

from __future__ import annotations

import copy

import pytest
from cel_corpus import base, with_

from specdecode_operator.api import rules, validate
from specdecode_operator.api.models import API_VERSION, KIND, SpecDecodeDeployment
from specdecode_operator.api.validate import (
    InvalidSpec,
    Problem,
    _cel_holds,
    apply_defaults,
    openapi_of,
    parse,
    validate_object,
)


def crd_of(schema: dict) -> dict:
    """A CRD document carrying ``schema`` as its only version's schema."""
    return {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": schema}}]}}


def obj(**fields) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "x"}, **fields}


def paths(problems: list[Problem]) -> list[str]:
    return [p.path for p in problems]


# ---------------------------------------------------------------- defaults

DEFAULTING = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "default": 3},
                "box": {"type": "object", "default": {}, "properties": {"inner": {"type": "string", "default": "d"}}},
                "items": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"k": {"type": "integer", "default": 7}}},
                },
                "tags": {"type": "array", "default": ["a"], "items": {"type": "string"}},
                "deep": {"type": "object", "default": {"inner": {"x": 1}}, "properties": {"inner": {"type": "object"}}},
            },
        },
    },
}


def test_defaults_fill_absent_fields_only_and_recurse_into_defaulted_objects_and_list_items():
    crd = crd_of(DEFAULTING)
    got = apply_defaults({"spec": {"items": [{}, {"k": 1}]}}, crd)
    assert got == {
        "spec": {
            "n": 3,
            "box": {"inner": "d"},
            "items": [{"k": 7}, {"k": 1}],
            "tags": ["a"],
            "deep": {"inner": {"x": 1}},
        }
    }
    kept = apply_defaults({"spec": {"n": 0, "box": {"inner": "mine"}, "tags": [], "deep": {}}}, crd)
    assert kept["spec"] == {"n": 0, "box": {"inner": "mine"}, "tags": [], "deep": {}}
    # a value of the wrong shape is left as it is (the schema check reports it)
    assert apply_defaults({"spec": "text"}, crd) == {"spec": "text"}
    assert apply_defaults({"spec": {"items": "ab", "tags": {"k": "v"}}}, crd)["spec"]["items"] == "ab"


def test_defaults_copy_the_schema_default_and_leave_the_input_alone():
    crd = crd_of(DEFAULTING)
    given = {"spec": {}}
    first = apply_defaults(given, crd)
    assert given == {"spec": {}}
    first["spec"]["tags"].append("changed")
    first["spec"]["box"]["inner"] = "changed"
    first["spec"]["deep"]["inner"]["x"] = 2
    second = apply_defaults(given, crd)
    assert second["spec"]["tags"] == ["a"] and second["spec"]["box"] == {"inner": "d"}
    assert second["spec"]["deep"] == {"inner": {"x": 1}}


def test_real_crd_defaults_are_the_documented_ones():
    spec = apply_defaults(base())["spec"]
    assert spec["speculative"] == {
        "numSteps": 3,
        "eagleTopK": 1,
        "autotune": {"mode": "Off", "objective": "Throughput", "minSteps": 1, "maxSteps": 7, "intervalSeconds": 10},
    }
    assert spec["draft"]["algorithm"] == "EAGLE3"
    assert spec["rollout"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert openapi_of(None) is openapi_of(None)


# ---------------------------------------------------------------- schema errors: field path and wording


def test_one_unknown_field_is_named_with_the_allowed_ones():
    problems = validate_object(with_("spec.draft.colour", "red"))
    assert problems == [
        Problem(
            "spec.draft.colour",
            "unknown field; allowed fields here: adaptation, algorithm, model, ranks, rollout, tensorParallelSize",
        )
    ]


def test_several_unknown_fields_are_listed_at_their_parent():
    doc = base()
    doc["extra"] = 1
    doc["more"] = 2
    assert validate_object(doc) == [
        Problem(
            "<root>", "unknown fields ['extra', 'more']; allowed fields here: apiVersion, kind, metadata, spec, status"
        )
    ]


def test_unknown_fields_alone_are_reported_even_beside_other_mistakes():
    doc = with_("spec.draft.colour", "red", with_("spec.draft.tensorParallelSize", "two", with_("metadata.name", "A")))
    assert paths(validate_object(doc)) == ["spec.draft.colour"]


def test_required_field_is_named_at_its_own_path():
    doc = base()
    del doc["spec"]["target"]["model"]
    assert validate_object(doc) == [Problem("spec.target.model", "Required value")]


def test_enum_names_the_value_and_every_supported_one():
    problems = validate_object(with_("spec.speculative.autotune", {"mode": "Auto"}))
    assert problems == [
        Problem(
            "spec.speculative.autotune.mode", "Unsupported value: 'Auto': supported values: 'Off', 'Live', 'Rollout'"
        )
    ]


@pytest.mark.parametrize(
    "value,problem",
    [
        (-1, "Invalid value: -1: should be greater than or equal to 0"),
        (0, None),
        (1024, None),
        (1025, "Invalid value: 1025: should be less than or equal to 1024"),
    ],
)
def test_minimum_and_maximum_at_and_just_outside(value, problem):
    assert validate_object(with_("spec.replicas", value)) == ([Problem("spec.replicas", problem)] if problem else [])


def test_type_error_names_the_type_and_the_list_index():
    problems = validate_object(with_("spec.draft.ranks", [0, "one"]))
    assert problems == [Problem("spec.draft.ranks[1]", "Invalid value: 'one': must be of type integer")]


def test_a_pattern_error_names_the_value_and_the_pattern():
    problems = validate_object(with_("spec.runtime", {"shmSize": "lots"}))
    assert paths(problems) == ["spec.runtime.shmSize"]
    assert problems[0].message.startswith("Invalid value: 'lots': should match '^[0-9]")


def test_other_schema_errors_carry_jsonschemas_own_wording():
    problems = validate_object(with_("spec.podTemplate", {"serviceAccountName": ""}))
    assert paths(problems) == ["spec.podTemplate.serviceAccountName"] * 2
    assert "'' should be non-empty" in {p.message for p in problems}


def test_exclusive_minimum_refuses_the_bound_and_takes_just_above():
    field = "spec.speculative.autotune"
    at = validate_object(with_(field, {"objective": "Latency", "maxInterTokenLatencyMs": 0}))
    assert paths(at) == ["spec.speculative.autotune.maxInterTokenLatencyMs"]
    assert "0" in at[0].message
    assert validate_object(with_(field, {"objective": "Latency", "maxInterTokenLatencyMs": 0.001})) == []
    assert validate_object(with_(field, {"objective": "Latency", "maxInterTokenLatencyMs": 10000})) == []
    assert paths(validate_object(with_(field, {"objective": "Latency", "maxInterTokenLatencyMs": 10000.5}))) == [
        "spec.speculative.autotune.maxInterTokenLatencyMs"
    ]


@pytest.mark.parametrize("value,ok", [(0, True), (3, True), ("25%", True), (2.5, False), (True, False), (None, False)])
def test_int_or_string_takes_integers_and_strings_only(value, ok):
    problems = validate_object(with_("spec.rollout", {"maxSurge": value, "maxUnavailable": 1}))
    assert (problems == []) is ok, problems
    if not ok:
        assert set(paths(problems)) == {"spec.rollout.maxSurge"}
        assert f"{value!r} is not valid under any of the given schemas" in [p.message for p in problems]


def test_maps_with_a_value_schema_check_values_and_take_any_key():
    assert validate_object(with_("spec.placement", {"nodeSelector": {"any/key": "v"}})) == []
    problems = validate_object(with_("spec.placement", {"nodeSelector": {"any/key": 5}}))
    assert problems == [Problem("spec.placement.nodeSelector.any/key", "Invalid value: 5: must be of type string")]


@pytest.mark.parametrize("value,ok", [(16, True), ("200Gi", True), (True, False), ([1], False), (None, False)])
def test_map_values_are_translated_too(value, ok):
    """resources.limits maps names to int-or-string quantities: the value schema is translated like any other."""
    problems = validate_object(with_("spec.runtime", {"resources": {"limits": {"cpu": value}}}))
    assert paths(problems) == ([] if ok else ["spec.runtime.resources.limits.cpu"])


def test_preserve_unknown_fields_takes_any_field():
    doc = with_(
        "spec.placement",
        {
            "affinity": {"podAffinity": {"anything": [1, 2]}},
            "tolerations": [{"key": "k", "operator": "Exists", "made": "up"}],
        },
    )
    assert validate_object(doc) == []


def test_metadata_beyond_name_is_left_to_the_api_server():
    doc = base()
    doc["metadata"].update(namespace="ns", labels={"a": "b"}, annotations={"c": "d"}, resourceVersion="5")
    assert validate_object(doc) == []


def test_items_of_a_list_are_closed_objects_too():
    schema = {
        "type": "object",
        "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}}
        },
    }
    problems = validate_object(
        obj(list=[{"a": 1}, {"b": 2}]),
        crd_of(
            {
                **schema,
                "properties": {
                    **schema["properties"],
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
            }
        ),
    )
    assert problems == [Problem("list[1].b", "unknown field; allowed fields here: a")]


NULLABLE = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
        "maybe": {"type": "integer", "nullable": True},
        "never": {"type": "integer"},
        "below": {"type": "number", "maximum": 10, "exclusiveMaximum": True},
        "open": {"type": "object", "additionalProperties": True, "properties": {"a": {"type": "integer"}}},
    },
}


def test_nullable_takes_null_and_its_type_and_nothing_else():
    crd = crd_of(NULLABLE)
    assert validate_object(obj(maybe=None), crd) == []
    assert validate_object(obj(maybe=2), crd) == []
    assert paths(validate_object(obj(maybe="2"), crd)) == ["maybe"]
    assert validate_object(obj(never=None), crd) == [Problem("never", "Invalid value: None: must be of type integer")]


def test_exclusive_maximum_refuses_the_bound_and_takes_just_below():
    crd = crd_of(NULLABLE)
    assert validate_object(obj(below=9.99), crd) == []
    assert paths(validate_object(obj(below=10), crd)) == ["below"]


def test_an_object_that_declares_additional_properties_keeps_its_own_choice():
    assert validate_object(obj(open={"a": 1, "b": "free"}), crd_of(NULLABLE)) == []


def test_each_crd_is_judged_by_its_own_schema():
    """Validators are cached per schema: alternating CRDs (and more of them than the cache holds) still each get
    their own verdict."""
    strict = crd_of(
        {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "n": {"type": "integer", "maximum": 1},
            },
        }
    )
    for bound in range(20):
        lax = crd_of(
            {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "n": {"type": "integer", "maximum": 5 + bound},
                },
            }
        )
        assert validate_object(obj(n=5), lax) == []
        assert paths(validate_object(obj(n=5), strict)) == ["n"]
    same = copy.deepcopy(strict)
    assert paths(validate_object(obj(n=5), same)) == ["n"]


def test_a_crd_is_compiled_once_and_equal_schemas_share_the_compiled_validator(monkeypatch):
    """Compiling a schema costs far more than a validation (the operator validates every object it sees): the
    same CRD object is looked up by identity, an equal one (keys in another order) by content, and the identity
    table stays bounded however many CRDs pass through."""
    compiled = []
    real = validate._validator_for

    def counting(key):
        compiled.append(key)
        return real(key)

    monkeypatch.setattr(validate, "_validator_for", counting)
    real.cache_clear()
    crd = crd_of(copy.deepcopy(NULLABLE))
    for _ in range(3):
        assert validate_object(obj(maybe=None), crd) == []
    assert len(compiled) == 1
    reordered = crd_of(dict(reversed(list(copy.deepcopy(NULLABLE).items()))))
    assert validate_object(obj(maybe="x"), reordered) != []
    assert len(compiled) == 2 and compiled[0] == compiled[1] and real.cache_info().misses == 1
    for bound in range(40):
        validate_object(
            obj(below=1),
            crd_of(
                {**NULLABLE, "properties": {**NULLABLE["properties"], "below": {"type": "number", "maximum": bound}}}
            ),
        )
        assert len(validate._VALIDATORS) <= 17


# ---------------------------------------------------------------- envelope and name


def test_non_mapping_is_refused_with_its_type():
    assert validate_object(["a"]) == [Problem("<root>", "expected a mapping, got list")]
    assert str(validate_object("a")[0]) == "<root>: expected a mapping, got str"


def test_wrong_api_version_and_kind_are_both_named_and_stop_there():
    doc = with_("spec.draft.tensorParallelSize", "x", base())
    doc.update(apiVersion="v1", kind="Pod")
    assert validate_object(doc) == [
        Problem("apiVersion", f"must be {API_VERSION}, got 'v1'"),
        Problem("kind", f"must be {KIND}, got 'Pod'"),
    ]
    del doc["kind"]
    doc["apiVersion"] = API_VERSION
    assert validate_object(doc) == [Problem("kind", f"must be {KIND}, got None")]


@pytest.mark.parametrize(
    "name,rfc1123_ok",
    [
        ("a" * 253, True),  # the API server's limit (the CRD's own rule refuses beyond 47)
        ("a" * 254, False),
        ("a.b", True),  # a subdomain passes the API server; the CRD's DNS-1035 rule refuses it
        ("-a", False),
        ("a_b", False),
    ],
)
def test_api_server_name_check_at_its_bounds(name, rfc1123_ok):
    problems = [p for p in validate_object(with_("metadata.name", name)) if "RFC 1123" in p.message]
    assert (problems == []) is rfc1123_ok, problems
    if not rfc1123_ok:
        assert problems[0].path == "metadata.name" and repr(name) in problems[0].message


def test_api_server_name_check_message():
    assert [p for p in validate_object(with_("metadata.name", "a_b")) if p.message.startswith("Invalid value")] == [
        Problem(
            "metadata.name",
            "Invalid value: 'a_b': the API server takes only a lowercase RFC 1123 subdomain "
            "(lowercase letters, digits, '-' and '.', at most 253 characters)",
        )
    ]


def test_metadata_that_is_not_a_mapping_is_a_type_error():
    assert validate_object(with_("metadata", "llama")) == [
        Problem("metadata", "Invalid value: 'llama': must be of type object")
    ]


def test_missing_metadata_and_name_are_not_the_name_checks_business():
    doc = base()
    del doc["metadata"]
    assert validate_object(doc) == []
    doc["metadata"] = {}
    assert validate_object(doc) == []


def test_name_check_waits_for_unknown_fields():
    doc = with_("metadata.name", "A_B", with_("spec.draft.colour", 1))
    assert paths(validate_object(doc)) == ["spec.draft.colour"]


def test_blocking_schema_errors_hold_back_the_rules_and_bounds_do_not():
    # wrong type: the rule "draft TP at most target TP" is not evaluated
    blocked = with_("spec.draft.ranks", ["x"], with_("spec.draft.tensorParallelSize", 16))
    assert paths(validate_object(blocked)) == ["spec.draft.ranks[0]"]
    # a value out of bounds is not blocking: the rules run beside it
    bounded = with_("spec.target.tensorParallelSize", 65, with_("spec.draft.tensorParallelSize", 2))
    assert [p.message.split(":")[0] for p in validate_object(bounded)] == [
        "draft tensorParallelSize must divide target tensorParallelSize",
        "Invalid value",
        "target tensorParallelSize must be at most placement.gpusPerNode or a multiple of it",
    ]
    long = with_("spec.target.model", "m" * 1025, with_("spec.draft.tensorParallelSize", 16))
    assert paths(validate_object(long)) == ["spec.target.model"]


def _without_target_model():
    doc = base()
    del doc["spec"]["target"]["model"]
    return doc


SAME_PORTS = ("spec.runtime", {"port": 8000, "controlPort": 8000})  # refused by a rule, not by the schema
SCHEMA_MISTAKES = [
    # (id, document with one schema mistake, its path, whether the rules still run beside it)
    ("type", with_("spec.replicas", "one"), "spec.replicas", False),
    ("enum", with_("spec.nccl", {"profile": "Fast"}), "spec.nccl.profile", False),
    ("required", _without_target_model(), "spec.target.model", False),
    ("maxLength", with_("spec.target.quantization", "q" * 65), "spec.target.quantization", False),
    ("maxItems", with_("spec.runtime", {"extraArgs": ["--x"] * 129}), "spec.runtime.extraArgs", False),
    ("maxProperties", with_("spec.nccl", {"env": {f"NCCL_K{i}": "1" for i in range(65)}}), "spec.nccl.env", False),
    ("minimum", with_("spec.replicas", -1), "spec.replicas", True),
    ("maximum", with_("spec.replicas", 1025), "spec.replicas", True),
    ("pattern", with_("spec.modelCache", {"sizeLimit": "lots"}), "spec.modelCache.sizeLimit", True),
    ("minLength", with_("spec.draft.model", ""), "spec.draft.model", True),
]


@pytest.mark.parametrize("doc,path,rules_run", [m[1:] for m in SCHEMA_MISTAKES], ids=[m[0] for m in SCHEMA_MISTAKES])
def test_which_schema_mistakes_hold_back_the_rules(doc, path, rules_run):
    """As the API server: a wrong type, value outside an enum, missing field or too long string/list/map stops the
    CEL rules (they could not evaluate); a bound, pattern or minimum length does not."""
    doc = copy.deepcopy(doc)
    _, value = SAME_PORTS
    doc["spec"].setdefault("runtime", {}).update(value)
    got = paths(validate_object(doc))
    assert path in got
    assert ("spec.runtime.controlPort" in got) is rules_run, got


def test_problems_are_unique_and_sorted_by_path():
    doc = with_("spec.runtime", {"port": 0, "controlPort": 0}, with_("spec.draft.tensorParallelSize", 3))
    problems = validate_object(doc)
    assert problems == sorted(set(problems))
    assert paths(problems) == sorted(paths(problems))
    assert len(problems) == len(set(problems)) >= 3


# ---------------------------------------------------------------- CEL at every place a schema may carry it


RULED = {
    "type": "object",
    "x-kubernetes-validations": [
        {"rule": "self.spec.a <= self.spec.b", "message": "a must be at most b", "fieldPath": ".spec.a"},
        {"rule": "!has(self.spec.c) || self.spec.c > 0"},
    ],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer"},
                "c": {"type": "integer"},
                "fixed": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "fixed is immutable"},
                        {"rule": "self != ''", "message": "fixed is not empty"},
                    ],
                },
                "flags": {
                    "type": "array",
                    "items": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            {"rule": "self.startsWith('--')", "message": "a flag starts with --"}
                        ],
                    },
                },
                "mode": {
                    "type": "string",
                    "default": "a",
                    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}],
                },
                "nested": {
                    "type": "object",
                    "x-kubernetes-validations": [{"rule": "self.x != 0", "message": "x is not 0", "fieldPath": ".x"}],
                    "properties": {"x": {"type": "integer"}},
                },
                "bare": {
                    "type": "object",
                    "x-kubernetes-validations": [{"rule": "self.y > 0", "message": "y > 0"}],
                    "properties": {"y": {"type": "integer"}},
                },
            },
        },
    },
}


def test_a_rule_at_the_root_names_its_field_path_or_the_root():
    crd = crd_of(RULED)
    assert validate_object(obj(spec={"a": 1, "b": 1}), crd) == []
    assert validate_object(obj(spec={"a": 2, "b": 1}), crd) == [Problem("spec.a", "a must be at most b")]
    # no message: the rule itself is the message; no fieldPath at the root: the root
    assert validate_object(obj(spec={"a": 0, "b": 1, "c": 0}), crd) == [
        Problem("<root>", "!has(self.spec.c) || self.spec.c > 0")
    ]


def test_a_rule_that_cannot_be_evaluated_fails_as_on_the_api_server():
    assert validate_object(obj(spec={"a": 1}), crd_of(RULED)) == [Problem("spec.a", "a must be at most b")]
    assert _cel_holds("self.a / self.b > 0", {"a": 1, "b": 0}, None) is False
    assert _cel_holds("self.a", {"a": 1}, None) is False  # not a boolean
    assert _cel_holds("self.a > 0", {"a": 1}, None) is True


def test_rules_on_nested_objects_name_their_path_plus_field_path():
    crd = crd_of(RULED)
    assert validate_object(obj(spec={"a": 0, "b": 0, "nested": {"x": 1}, "bare": {"y": 1}}), crd) == []
    assert validate_object(obj(spec={"a": 0, "b": 0, "nested": {"x": 0}, "bare": {"y": 0}}), crd) == [
        Problem("spec.bare", "y > 0"),
        Problem("spec.nested.x", "x is not 0"),
    ]


def test_rules_on_list_items_name_the_item():
    crd = crd_of(RULED)
    assert validate_object(obj(spec={"a": 0, "b": 0, "flags": ["--a", "--b"]}), crd) == []
    assert validate_object(obj(spec={"a": 0, "b": 0, "flags": ["--a", "b", "c"]}), crd) == [
        Problem("spec.flags[1]", "a flag starts with --"),
        Problem("spec.flags[2]", "a flag starts with --"),
    ]


def test_transition_rules_apply_to_updates_only_and_see_the_old_value():
    crd = crd_of(RULED)
    new = obj(spec={"a": 0, "b": 0, "fixed": "one"})
    assert validate_object(new, crd) == []
    assert validate_object(new, crd, old=obj(spec={"a": 0, "b": 0, "fixed": "one"})) == []
    assert validate_object(new, crd, old=obj(spec={"a": 0, "b": 0, "fixed": "two"})) == [
        Problem("spec.fixed", "fixed is immutable")
    ]
    # a field absent before is new on this update: there is no old value to compare with
    assert validate_object(new, crd, old=obj(spec={"a": 0, "b": 0})) == []
    # the rules after a skipped transition rule still run on create
    assert validate_object(obj(spec={"a": 0, "b": 0, "fixed": ""}), crd) == [
        Problem("spec.fixed", "fixed is not empty")
    ]


def test_an_update_compares_with_the_old_object_defaulted_by_the_same_crd():
    crd = crd_of(RULED)
    old = obj(spec={"a": 0, "b": 0})  # mode: "a" by default
    assert validate_object(obj(spec={"a": 0, "b": 0, "mode": "a"}), crd, old=old) == []
    assert validate_object(obj(spec={"a": 0, "b": 0, "mode": "b"}), crd, old=old) == [
        Problem("spec.mode", "mode is immutable")
    ]


def test_real_crd_update_is_judged_on_the_defaulted_new_object():
    old = base()
    new = with_("spec.draft.tensorParallelSize", 16)
    assert paths(validate_object(new, old=old)) == ["spec.draft.tensorParallelSize"] * 2
    assert validate_object(base(), old=new) == []


# ---------------------------------------------------------------- rules


def test_rule_to_crd_carries_field_path_and_reason_only_when_set():
    assert rules.Rule("self.a", "m").to_crd() == {"rule": "self.a", "message": "m"}
    assert rules.Rule("self.a", "m", ".a", "FieldValueForbidden").to_crd() == {
        "rule": "self.a",
        "message": "m",
        "fieldPath": ".a",
        "reason": "FieldValueForbidden",
    }


MODEL_VERDICTS = [
    # (model, index of the rule that refuses it or None)
    ("/models/llama", None),
    ("/", None),
    ("pvc://claim/llama/8b", None),
    ("pvc://claim", None),
    ("hf://org/name", None),
    ("hf://org/name@v1.0", None),
    ("s3://bucket/x", 0),
    ("pvc://Claim/x", 1),
    ("pvc://claim/.hidden", 1),
    ("hf://name-only", 2),
    ("hf://org/name@", 2),
    ("relative/path", 3),
    ("relative", 3),
    ("meta-llama/Llama-3-8B", 3),
    ("pvc:/claim/x", 3),  # no scheme: a relative path
    ("gs:/bucket/x", 3),
    ("C:/models/x", 3),
    (" /models/x", 3),
]

# (model, what the refusal's hint says after the field, the value and the accepted forms)
MODEL_HINTS = [
    (
        "meta-llama/Llama-3-8B",
        "for a Hugging Face Hub repository use hf://meta-llama/Llama-3-8B, for a directory in the pod its absolute path",
    ),
    (
        "org/name@v1.0",
        "for a Hugging Face Hub repository use hf://org/name@v1.0, for a directory in the pod its absolute path",
    ),
    ("relative", "a path must be absolute, e.g. /models/relative"),
    ("models/a/b", "a path must be absolute, e.g. /models/models/a/b"),
    ("gs:/bucket/x", "a scheme is written SCHEME:// and only pvc:// and hf:// are supported"),
    ("pvc:/claim/x", "a scheme is written SCHEME:// and only pvc:// and hf:// are supported"),
    ("C:/models/x", "give the Linux path inside the pod, e.g. /models/NAME"),
    ("c:\\models\\x", "give the Linux path inside the pod, e.g. /models/NAME"),
]


@pytest.mark.parametrize("owner", ["target", "draft"])
@pytest.mark.parametrize("model,refused_by", MODEL_VERDICTS, ids=[m for m, _ in MODEL_VERDICTS])
def test_model_rules_for_each_owner(owner, model, refused_by):
    """The model-source rules as built for each owner: each string's verdict, and the message names the owner's
    field."""
    built = rules.model_rules(owner)
    assert [r.field_path for r in built] == [".model"] * 4
    for i, rule in enumerate(built):
        assert _cel_holds(rule.rule, {"model": model}, None) is (i != refused_by), (i, rule.rule)
        assert rule.message.startswith(f"{owner}.model")
        assert rule.to_crd()["fieldPath"] == ".model"
    problems = validate_object(with_(f"spec.{owner}.model", model))
    if refused_by is None:
        assert problems == []
    elif built[refused_by].message_expression is None:
        assert problems == [Problem(f"spec.{owner}.model", built[refused_by].message)]
    else:  # the hint names the field and what was written (its wording: the next test)
        (problem,) = problems
        assert problem.path == f"spec.{owner}.model"
        assert problem.message.startswith(f"{owner}.model: {model} is not {rules.MODEL_FORMS}: "), problem.message


@pytest.mark.parametrize("owner", ["target", "draft"])
@pytest.mark.parametrize("model,hint", MODEL_HINTS, ids=[m for m, _ in MODEL_HINTS])
def test_a_refused_model_names_the_field_what_was_written_and_the_likely_spelling(owner, model, hint):
    (problem,) = validate_object(with_(f"spec.{owner}.model", model))
    assert problem.path == f"spec.{owner}.model"
    assert problem.message == f"{owner}.model: {model} is not {rules.MODEL_FORMS}: {hint}"


def test_a_message_expression_that_fails_falls_back_to_the_message():
    """As on the API server: an expression that errors or gives an empty string leaves the static message."""
    for expression in ("self.missing + 'x'", "''", "1"):
        assert validate._cel_message(
            {"rule": "false", "message": "static", "messageExpression": expression}, {}, None
        ) == ("static")
    assert (
        validate._cel_message(
            {"rule": "false", "message": "m", "messageExpression": "'from ' + self.a"}, {"a": "v"}, None
        )
        == "from v"
    )


INT_OR_PERCENT = [
    # (value, accepted): integers from 0, percentages 0%..100% without leading zeros
    (0, True),
    (1, True),
    (-1, False),
    ("0%", True),
    ("9%", True),
    ("10%", True),
    ("99%", True),
    ("100%", True),
    ("101%", False),
    ("1000%", False),
    ("05%", False),
    ("%", False),
    ("25", False),
    ("25 %", False),
    ("-5%", False),
]


@pytest.mark.parametrize("field", ["maxSurge", "maxUnavailable"])
@pytest.mark.parametrize("value,accepted", INT_OR_PERCENT, ids=[repr(v) for v, _ in INT_OR_PERCENT])
def test_int_or_percent_rule_at_its_bounds(field, value, accepted):
    """The rollout bound rule as built for each field (the CRD's copies are built at import)."""
    rule = rules._int_or_percent(field)
    assert _cel_holds(rule.rule, {field: value}, None) is accepted
    assert rule.field_path == f".{field}"
    assert rule.message.startswith(f"rollout.{field} must be a non-negative integer or a percentage from 0% to 100%")


def test_managed_flags_pattern_refuses_each_managed_flag_and_only_those():
    for flag in ("--model-path", "--tp-size=4", "--tp", "--speculative-anything", "--enable-metrics", "--port=1"):
        assert paths(validate_object(with_("spec.runtime.extraArgs", [flag]))) == ["spec.runtime.extraArgs"], flag
    for flag in ("--model-pathx", "--portal", "-tp", "--mem-fraction-static=0.8", "x--port"):
        assert validate_object(with_("spec.runtime.extraArgs", [flag])) == [], flag


def test_every_spelling_of_every_contract_managed_flag_is_refused_in_extra_args():
    """The CRD's pattern is built from the runtime contract's one list: each flag and alias the runtime sets is
    refused, bare and with a value, and a flag that merely starts like one is not."""
    from specdecode_runtime.contract.server_args import MANAGED_FLAG_ALIASES, MANAGED_FLAG_FAMILY, MANAGED_FLAGS

    for flag in (*MANAGED_FLAGS, *MANAGED_FLAG_ALIASES):
        for arg in (flag, f"{flag}=1"):
            assert paths(validate_object(with_("spec.runtime.extraArgs", [arg]))) == ["spec.runtime.extraArgs"], arg
        if not flag.startswith(MANAGED_FLAG_FAMILY):  # the whole speculative family is refused
            assert validate_object(with_("spec.runtime.extraArgs", [f"{flag}x"])) == [], flag


# ---------------------------------------------------------------- parse


def test_parse_builds_the_typed_object_with_defaults():
    typed = parse(base())
    assert isinstance(typed, SpecDecodeDeployment)
    assert typed.spec.speculative.numSteps == 3
    assert typed.spec.draft.algorithm == "EAGLE3"
    assert typed.spec.target.tensorParallelSize == 8


def test_parse_applies_the_defaults_of_the_crd_it_is_given():
    """The operator may judge objects by an installed CRD other than the one it generates: its defaults count."""
    crd = copy.deepcopy(crd_of(openapi_of(None)))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec["speculative"]["default"] = {**spec["speculative"]["default"], "numSteps": 5}
    assert parse(base(), crd).spec.speculative.numSteps == 5
    assert parse(base()).spec.speculative.numSteps == 3


def test_parse_raises_every_problem_path_first():
    doc = with_("spec.runtime", {"port": 0, "controlPort": 0})
    with pytest.raises(InvalidSpec) as raised:
        parse(doc)
    assert raised.value.problems == validate_object(doc)
    assert str(raised.value) == "; ".join(f"{p.path}: {p.message}" for p in raised.value.problems)
    assert str(raised.value).startswith("spec.runtime.controlPort: ")


def test_parse_of_a_validated_object_skips_admission():
    doc = with_("metadata.name", "Upper")  # refused by the CRD's name rules, which the model does not restate
    with pytest.raises(InvalidSpec):
        parse(doc)
    assert parse(doc, validated=True).metadata.name == "Upper"


def test_parse_reports_what_the_models_refuse_beyond_the_schema():
    lax = crd_of(
        {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    )
    with pytest.raises(InvalidSpec) as raised:
        parse(obj(spec={"target": {"model": "/m", "tensorParallelSize": 1}}), lax)
    assert [p.path for p in raised.value.problems] == ["spec.draft"]
    assert raised.value.problems[0].message == "Field required"
