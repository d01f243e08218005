"""spec.draft.adaptation: off by default, a claim required when enabled, bounded numbers, each refusal naming its
field, and the specdecode launcher."""

from __future__ import annotations

import pytest
from cel_corpus import base, with_

from specdecode_operator.api.validate import parse, validate_object

ADAPTATION = "spec.draft.adaptation"


def enabled(**capture) -> dict:
    return with_(ADAPTATION, {"enabled": True, "capture": {"claimName": "traffic", **capture}})


def test_off_by_default_and_defaults_when_enabled():
    assert parse(base()).spec.draft.adaptation is None
    capture = parse(enabled()).spec.draft.adaptation.capture
    assert (capture.maxBytes, capture.retentionSeconds, capture.sampleRatio) == (1 << 30, 86400, 1.0)


def test_enabled_without_a_claim_names_the_claim():
    for doc in (with_(ADAPTATION, {"enabled": True}), with_(ADAPTATION, {"enabled": True, "capture": {}})):
        problems = validate_object(doc)
        assert [p.path for p in problems] == [f"{ADAPTATION}.capture.claimName"], problems
        assert "claimName is required when draft.adaptation.enabled is true" in problems[0].message


def test_a_claim_without_enabled_is_accepted_and_captures_nothing():
    assert validate_object(with_(ADAPTATION, {"capture": {"claimName": "traffic"}})) == []


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("maxBytes", (1 << 20) - 1, "greater than or equal to 1048576"),
        ("maxBytes", (1 << 40) + 1, "less than or equal to 1099511627776"),
        ("maxBytes", "1Gi", "must be of type integer"),
        ("retentionSeconds", 59, "greater than or equal to 60"),
        ("retentionSeconds", 90 * 86400 + 1, "less than or equal to 7776000"),
        ("sampleRatio", -0.1, "greater than or equal to 0"),
        ("sampleRatio", 1.5, "less than or equal to 1"),
        ("claimName", "Traffic_PVC", "should match"),
    ],
)
def test_bounds_refuse_with_the_field_named(field, value, fragment):
    problems = validate_object(enabled(**{field: value}))
    assert [p.path for p in problems] == [f"{ADAPTATION}.capture.{field}"], problems
    assert fragment in problems[0].message, problems


@pytest.mark.parametrize(
    "field,value", [("maxBytes", 1 << 20), ("maxBytes", 1 << 40), ("retentionSeconds", 60), ("sampleRatio", 0)]
)
def test_bounds_accept_their_limits(field, value):
    assert validate_object(enabled(**{field: value})) == []


def test_the_stock_launcher_cannot_capture():
    doc = enabled()
    doc["spec"]["runtime"] = {"launcher": "sglang"}
    doc["spec"]["draft"]["tensorParallelSize"] = 8
    problems = validate_object(doc)
    assert [p.path for p in problems] == [f"{ADAPTATION}.enabled"], problems
    assert "needs runtime.launcher specdecode" in problems[0].message


def test_the_descriptions_say_the_capture_holds_user_data():
    from specdecode_operator.api.models import Adaptation, AdaptationCapture, Draft

    for text in (
        Draft.model_fields["adaptation"].description,
        Adaptation.model_fields["enabled"].description,
        AdaptationCapture.model_fields["claimName"].description,
    ):
        assert "user data" in text and "token ids" in text
