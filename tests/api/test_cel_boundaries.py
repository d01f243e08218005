"""Every CEL rule at, just inside and just outside each bound, evaluated by ``specdecode validate``'s CEL evaluator
from the rule strings the CRD carries (tests/api/test_cel_parity_real.py runs the same documents through a real
API server)."""

from __future__ import annotations

import pytest
from cel_boundaries import BOUNDARIES

from specdecode_operator.api import rules, validate
from specdecode_operator.api.validate import validate_object


@pytest.mark.parametrize("doc,expected", [(d, e) for _, d, e in BOUNDARIES], ids=[i for i, _, _ in BOUNDARIES])
def test_rule_verdict_at_the_boundary(doc, expected):
    problems = validate_object(doc)
    assert {p.path for p in problems} == {path for path, _ in expected}, problems
    for path, fragment in expected:
        assert any(p.path == path and fragment in p.message for p in problems), (path, fragment, problems)


def test_every_rule_of_the_api_is_in_the_table(monkeypatch):
    """A rule added to the API without boundary rows fails here: each rule must refuse at least one refused row
    (seen through the message it gives, or for a rule whose message is an expression, through the rule that was
    asked for its message), and every table has an accepted row beside it."""
    every = [
        r
        for name in dir(rules)
        if name.endswith("RULES") and isinstance(getattr(rules, name), tuple)
        for r in getattr(rules, name)
    ]
    assert len(every) >= 20, len(every)
    fired: set[tuple[str, str]] = set()
    message_of = validate._cel_message

    def recording(validation, value, old):
        fired.add((validation["rule"], validation.get("messageExpression") or ""))
        return message_of(validation, value, old)

    monkeypatch.setattr(validate, "_cel_message", recording)
    seen = set()
    for _, doc, expected in BOUNDARIES:
        if expected:
            seen.update(p.message for p in validate_object(doc))
    missing = [
        r.message
        for r in every
        if not (
            (r.rule, r.message_expression) in fired
            if r.message_expression
            else any(r.message in m or m.endswith(r.message) for m in seen)
        )
    ]
    assert not missing, missing
