"""Validate objects of upstream custom kinds against their vendored CRD schemas.

Kinds: LeaderWorkerSet (kubernetes-sigs/lws), ServiceMonitor and PrometheusRule (prometheus-operator). The CRDs are
vendored under tests/data/upstream-crds/ (see SOURCE.md there).

The CRD's openAPIV3Schema is turned into JSON Schema the way research/toolchain.md §4 describes:
- ``x-kubernetes-*`` keys are dropped; ``x-kubernetes-int-or-string`` keeps its ``anyOf`` integer/string;
- ``nullable: true`` becomes ``type: [T, "null"]``;
- an object that declares ``properties`` is closed (``additionalProperties: false``) unless it preserves unknown
  fields: the API server would silently prune an unknown field, so a test should hear about it.
The LWS CRD is vendored without its two inlined PodTemplateSpec subtrees (1.1 MB); those nodes are validated against
kubernetes-validate's strict ``io.k8s.api.core.v1.PodTemplateSpec`` schema, which is the type they are generated from.

Usage: ``validate_custom(obj)`` raises ``UpstreamSchemaError`` whose message names the object and the JSON path.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM_DIR = Path(__file__).resolve().parent / "data" / "upstream-crds"
ELIDED = "x-specdecode-elided"
POD_TEMPLATE_K8S_VERSION = "1.33.0"


class UpstreamSchemaError(ValueError):
    """An object does not match its upstream CRD schema. ``path`` is the JSON path of the first error."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path


def _crd_files() -> list[Path]:
    files = sorted(UPSTREAM_DIR.glob("*.yaml"))
    return files


@functools.cache
def _crds() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema, for every served version of every vendored CRD."""
    out: dict[tuple[str, str], dict] = {}
    for path in _crd_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if version.get("served", True):
                    out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"][
                        "openAPIV3Schema"
                    ]
    return out


def supported_kinds() -> list[tuple[str, str]]:
    return sorted(_crds())


@functools.cache
def _pod_template_registry() -> tuple[str, Any]:
    """kubernetes-validate's strict PodTemplateSpec schema and its definitions, as a referencing Registry."""
    import kubernetes_validate
    from referencing import Registry, Resource

    base = (
        Path(kubernetes_validate.__file__).parent
        / "kubernetes-json-schema"
        / f"v{POD_TEMPLATE_K8S_VERSION}-local-strict"
    )
    pod = json.loads((base / "podtemplatespec-v1.json").read_text())
    defs = json.loads((base / "_definitions.json").read_text())
    registry = Resource.from_contents(pod) @ Registry()
    registry = Resource.from_contents(defs) @ registry
    return pod["$id"], registry


def k8s_to_jsonschema(s: dict) -> dict:
    """A CRD structural schema node -> JSON Schema (see the module docstring)."""
    if ELIDED in s:
        return {"$ref": _pod_template_registry()[0]}
    out = {k: v for k, v in s.items() if not k.startswith("x-kubernetes-") and k not in ("nullable", "default")}
    if "properties" in s:
        out["properties"] = {k: k8s_to_jsonschema(v) for k, v in s["properties"].items()}
    if isinstance(s.get("items"), dict):
        out["items"] = k8s_to_jsonschema(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        out["additionalProperties"] = k8s_to_jsonschema(s["additionalProperties"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            out[key] = [k8s_to_jsonschema(v) for v in s[key]]
    if isinstance(s.get("pattern"), str) and "(?i)" in s["pattern"][1:]:
        # RE2 (Go) allows a flag group after "^"; Python's re wants global flags first. Same meaning.
        out["pattern"] = "(?i)" + s["pattern"].replace("(?i)", "", 1)
    if s.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if (
        s.get("type") == "object"
        and "properties" in s
        and "additionalProperties" not in s
        and not s.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = k8s_to_jsonschema(_crds()[(api_version, kind)])
    schema.setdefault("properties", {})
    # The root also carries apiVersion/kind/metadata; metadata is checked as ObjectMeta by the API server, not here.
    schema["properties"].update(
        {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    )
    cls = jsonschema.Draft202012Validator
    cls.check_schema(schema)
    if ELIDED in json.dumps(_crds()[(api_version, kind)]):
        return cls(schema, registry=_pod_template_registry()[1])
    return cls(schema)


def _json_path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def validate_custom(obj: dict) -> None:
    """Validate ``obj`` (a LeaderWorkerSet, ServiceMonitor or PrometheusRule) against its upstream CRD.

    Raises ``UpstreamSchemaError`` (a ValueError) naming the object and the JSON path of the best-matching error;
    ``KeyError`` when the kind is not vendored.
    """
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if (api_version, kind) not in _crds():
        raise KeyError(f"no vendored CRD for {api_version} {kind}; have: {supported_kinds()}")
    validator = _validator(api_version, kind)
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        name = (obj.get("metadata") or {}).get("name", "?")
        path = _json_path(error.absolute_path)
        raise UpstreamSchemaError(f"{kind}/{name}: {path}: {error.message}", path)
