"""Generate the CustomResourceDefinition from the typed models.

pydantic's JSON Schema is turned into a Kubernetes *structural* schema: references inlined, Optional unwrapped,
Literals as string enums, nested objects defaulted to their complete default value (the API server checks a
default against the CEL rules as it stands, without defaulting inside it, so ``{}`` would fail them), and
the CEL rules attached by the models kept as ``x-kubernetes-validations``.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault

from . import rules
from .models import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    VERSION,
    SpecDecodeDeploymentSpec,
    SpecDecodeDeploymentStatus,
)

_DROP = {"title", "$defs", "discriminator"}
PRINTER_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Target TP", "type": "integer", "jsonPath": ".spec.target.tensorParallelSize"},
    {"name": "Draft TP", "type": "integer", "jsonPath": ".spec.draft.tensorParallelSize"},
    {
        "name": "Mode",
        "type": "string",
        "jsonPath": ".spec.speculative.autotune.mode",
        "description": "Step autotuning: Off, Live (step table pushed to the pods) or Rollout (restarts)",
    },
    {"name": "Steps", "type": "integer", "jsonPath": ".status.speculative.numSteps"},
    {"name": "Accept", "type": "number", "jsonPath": ".status.speculative.acceptLength"},
    {"name": "Tok/s", "type": "number", "jsonPath": ".status.speculative.tokensPerSecond"},
    {
        "name": "Draft",
        "type": "string",
        "jsonPath": ".status.draft.phase",
        "description": "Draft rollout in place: Serving, Canary, Promoting, RolledBack or Failed",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Image Available",
        "type": "string",
        "priority": 1,
        "jsonPath": ".status.runtimeImage.available",
        "description": "A newer operator default runtime image, not adopted (annotate specdecode.io/adopt-default-image)",
    },
]


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if node.get("x-kubernetes-int-or-string") and "anyOf" in node:  # int | str: the marker alone says it
        return _structural({k: v for k, v in node.items() if k != "anyOf"}, defs)
    if "anyOf" in node:  # Optional[X] -> X; the field is simply not required
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            merged = {**_structural(options[0], defs), **rest}
            if merged.get("default", 0) is None:
                merged.pop("default")
            return _structural(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(
            value, bool
        ):  # JSON Schema number -> OpenAPI 3.0 boolean form
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "properties":
            out[key] = {k: _structural(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs)
        elif key == "default":
            out[key] = value  # a value, not a schema: published as is
        elif key == "x-kubernetes-validations":
            out[key] = value
        else:
            out[key] = _structural(value, defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in out:
        out["type"] = "object"
        out.pop("additionalProperties", None)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    if out.get("type") == "object" and out.get("additionalProperties") is True:
        out.pop("additionalProperties")
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("required") == []:
        out.pop("required")
    return out


class _FactoryDefaults(GenerateJsonSchema):
    """Publish ``default_factory`` values as schema defaults (objects complete, unset optionals left out), so that
    an omitted section gets every field default and CEL rules can rely on every defaulted field being present."""

    def get_default_value(self, schema):
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            value = factory()
            return value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value
        return schema.get("default", NoDefault)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(mode="validation", schema_generator=_FactoryDefaults)
    return _structural(raw, raw.get("$defs", {}))


def _sorted(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _sorted(node[k]) for k in sorted(node)}
    if isinstance(node, list):
        return [_sorted(n) for n in node]
    return node


def openapi_schema() -> dict[str, Any]:
    spec = model_schema(SpecDecodeDeploymentSpec)
    status = model_schema(SpecDecodeDeploymentStatus)
    status.pop("additionalProperties", None)
    schema = {
        "type": "object",
        "description": "SpecDecodeDeployment declares a speculative-decoding deployment: target and draft models, "
        "draft placement inside the target's TP ranks, speculative settings, NCCL profile and GPU placement.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "maxLength": rules.NAME_MAX_LENGTH,
                        "x-kubernetes-validations": [r.to_crd() for r in rules.NAME_RULES],
                    }
                },
            },
            "spec": spec,
            "status": status,
        },
    }
    return _sorted(schema)


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "specdecode-operator", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["all", "specdecode"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                }
            ],
        },
    }


HEADER = "# Generated by `specdecode crd` from specdecode_operator.api.models. Do not edit by hand.\n"


def crd_yaml() -> str:
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)
