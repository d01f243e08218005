"""Mutation testing of the CRD's CEL rules against the boundary table (tests/api/cel_boundaries.py).

mutmut mutates Python function bodies; the CEL rules are strings in ``specdecode_operator.api.rules``, evaluated
by the CEL library (and by the API server), so they are mutated here: each comparison, logical operator, negated
``has()`` and quantifier of each rule is changed one at a time in a copy of the generated CRD, and every row of
the boundary table is validated against that copy. A mutant is killed when some row's verdict changes.

    python -m tests.mutation.cel_rules      (part of ``make mutation``, target ``cel-rules``)
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (pattern, replacement): one mutant per match of each
OPERATORS = [
    (r"<=", "<"),
    (r"(?<![<>=!])<(?!=)", "<="),
    (r">=", ">"),
    (r"(?<![<>=!-])>(?!=)", ">="),
    (r"==", "!="),
    (r"!=", "=="),
    (r"&&", "||"),
    (r"\|\|", "&&"),
    (r"!has\(", "has("),
    (r"\+ 1\b", "+ 2"),
    (r"> 0\b", "> 1"),
    (r"\.all\(", ".exists("),
    (r"exists_one\(", "exists("),
    (r"!\(", "("),
    (r"!self\.", "self."),
]


def mutants_of(rule: str) -> list[tuple[str, str]]:
    """(description, mutated rule) for every operator occurrence in ``rule``."""
    out = []
    for pattern, repl in OPERATORS:
        for m in re.finditer(pattern, rule):
            mutated = rule[: m.start()] + m.expand(repl) + rule[m.end() :]
            out.append((f"{m.group(0)!s} -> {m.expand(repl)} at {m.start()}", mutated))
    return out


def rule_slots(node, found=None) -> list[dict]:
    """Every ``x-kubernetes-validations`` entry of a schema, in document order."""
    found = [] if found is None else found
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "x-kubernetes-validations":
                found.extend(value)
            else:
                rule_slots(value, found)
    elif isinstance(node, list):
        for value in node:
            rule_slots(value, found)
    return found


def verdicts(crd: dict, rows) -> list[frozenset]:
    from specdecode_operator.api.validate import validate_object

    out = []
    for _, doc, _ in rows:
        try:
            out.append(frozenset((p.path, p.message) for p in validate_object(doc, crd=crd)))
        except Exception as e:  # a rule that no longer compiles or evaluates: a different verdict
            out.append(frozenset({("<error>", type(e).__name__)}))
    return out


def main() -> int:
    sys.path.insert(0, str(ROOT / "tests" / "api"))
    from cel_boundaries import BOUNDARIES

    from specdecode_operator.api.crd import crd as generated

    base = generated()
    expected = verdicts(base, BOUNDARIES)
    rules = [slot["rule"] for slot in rule_slots(base)]
    results = []
    for index, rule in enumerate(rules):
        for what, mutated in mutants_of(rule):
            crd = copy.deepcopy(base)
            rule_slots(crd)[index]["rule"] = mutated
            got = verdicts(crd, BOUNDARIES)
            killed_by = [BOUNDARIES[i][0] for i, (a, b) in enumerate(zip(expected, got)) if a != b]
            results.append({"rule": rule, "mutant": what, "killed_by": killed_by[:3], "killed": bool(killed_by)})
            print(f"{'killed  ' if killed_by else 'SURVIVED'} {what:<22} {rule[:90]}", flush=True)
    killed = sum(r["killed"] for r in results)
    survivors = [r for r in results if not r["killed"]]
    summary = {
        "target": "cel-rules",
        "rules": len(rules),
        "total": len(results),
        "killed": killed,
        "score": round(100.0 * killed / len(results), 1) if results else None,
        "survivors": [f"{r['mutant']} in {r['rule']}" for r in survivors],
    }
    where = ROOT / "build" / "mutation" / "cel-rules"
    where.mkdir(parents=True, exist_ok=True)
    (where / "score.json").write_text(json.dumps({**summary, "mutants": results}, indent=1) + "\n")
    print(
        f"== cel-rules: {killed}/{len(results)} killed ({summary['score']} %) over {len(rules)} rules; "
        f"survivors in {where / 'score.json'}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
