"""docs/api.md from the CRD schema: the reference cannot drift from what the API server enforces."""

from __future__ import annotations

import json
from typing import Any, Iterator

from .crd import crd

PIPE = "\\|"


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    t = node.get("type", "object")
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (Kubernetes type)"
    if t == "array":
        return f"[]{_type(node.get('items', {}))}"
    if t == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{_type(node['additionalProperties'])}"
    return t


def _constraints(node: dict[str, Any]) -> str:
    out = []
    if "enum" in node:
        out.append(" \\| ".join(f"`{v}`" for v in node["enum"]))
    if "minimum" in node:
        out.append(f"{'>' if node.get('exclusiveMinimum') else '>='} {node['minimum']}")
    if "maximum" in node:
        out.append(f"<= {node['maximum']}")
    if "pattern" in node:
        out.append(f"pattern `{node['pattern']}`")
    if "default" in node and node["default"] not in ({}, []):
        out.append(f"default `{json.dumps(node['default'])}`")
    return ", ".join(out)


def _rows(node: dict[str, Any], path: str, required: set[str]) -> Iterator[str]:
    for key, sub in node.get("properties", {}).items():
        p = f"{path}.{key}"
        req = "yes" if key in required else ""
        desc = (sub.get("description") or "").replace("|", "\\|").replace("\n", " ")
        yield f"| `{p}` | {_type(sub)} | {req} | {_constraints(sub)} | {desc} |"
        if "properties" in sub:
            yield from _rows(sub, p, set(sub.get("required", [])))
        elif isinstance(sub.get("items"), dict) and "properties" in sub["items"]:
            yield from _rows(sub["items"], f"{p}[]", set(sub["items"].get("required", [])))


def _rules(node: dict[str, Any], path: str) -> Iterator[str]:
    for v in node.get("x-kubernetes-validations", []):
        field = path + v.get("fieldPath", "")
        message, rule = v["message"].replace("|", PIPE), v["rule"].replace("|", PIPE)
        yield f"| `{field or 'metadata'}` | {message} | `{rule}` |"
    for key, sub in node.get("properties", {}).items():
        yield from _rules(sub, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):  # rules on each item of a list
        yield from _rules(node["items"], f"{path}[]")


def api_markdown() -> str:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    lines = [
        "# SpecDecodeDeployment API reference (`specdecode.io/v1alpha1`)",
        "",
        "Generated from the CRD schema by `python -m specdecode_operator.api.docs > docs/api.md`; a test keeps it",
        "fresh. `kubectl explain sdd.spec --recursive` prints the same descriptions from a cluster.",
        "",
        "## spec",
        "",
        "| field | type | required | allowed | description |",
        "|---|---|---|---|---|",
        *_rows(spec, "spec", set(spec.get("required", []))),
        "",
        "## Cross-field rules (CEL, enforced at admission and by `specdecode validate`)",
        "",
        "| field | message | rule |",
        "|---|---|---|",
        *_rules(schema, ""),
        "",
        "## status (written by the operator only)",
        "",
        "| field | type | required | allowed | description |",
        "|---|---|---|---|---|",
        *_rows(schema["properties"]["status"], "status", set()),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(api_markdown(), end="")
