"""Admission: defaulting and validation (the CRD's schema and CEL rules) before an object is stored."""

from __future__ import annotations

from specdecode_operator.api.validate import apply_defaults, validate_object

from .errors import Reject
from .resources import Defaulter, ResourceMeta, Validator


def admit(meta: ResourceMeta, obj: dict, old: dict | None) -> dict:
    """The defaulted object, or a 422 listing every problem, as the real server reports a failed admission."""
    if meta.default:
        obj = meta.default(obj)
    if meta.validate:
        problems = meta.validate(obj, old)
        if problems:
            name = obj.get("metadata", {}).get("name", "")
            causes = [
                {"reason": "FieldValueInvalid", "message": p, "field": p.split(":", 1)[0] if ":" in p else ""}
                for p in problems
            ]
            raise Reject(
                422,
                f'{meta.kind}.{meta.group} "{name}" is invalid: ' + "; ".join(problems),
                "Invalid",
                {"name": name, "group": meta.group, "kind": meta.kind, "causes": causes},
            )
    return obj


def crd_validator(crd: dict) -> Validator:
    """The committed CRD's openAPIV3Schema and x-kubernetes-validations, through the API package's validator."""

    def validate(obj: dict, old: dict | None) -> list[str]:
        return [str(p) for p in validate_object(obj, crd=crd, old=old)]

    return validate


def prune(value, schema: dict):
    """Drop fields the structural schema does not declare, as the API server does before defaulting (silently:
    with the default fieldValidation it only adds a Warning header). Objects marked
    x-kubernetes-preserve-unknown-fields, and maps (additionalProperties), keep their keys."""
    if (
        isinstance(value, dict)
        and schema.get("type", "object") == "object"
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            return {k: prune(v, props[k]) for k, v in value.items() if k in props}
        if isinstance(extra, dict):
            return {k: prune(v, extra) for k, v in value.items()}
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"]) for v in value]
    return value


def _storage_schema(crd: dict) -> dict:
    version = next(v for v in crd["spec"]["versions"] if v.get("storage", True))
    return version["schema"]["openAPIV3Schema"]


def crd_defaulter(crd: dict) -> Defaulter:
    schema = _storage_schema(crd)
    roots = {k: v for k, v in schema.get("properties", {}).items() if k not in ("apiVersion", "kind", "metadata")}

    def default(obj: dict) -> dict:
        pruned = {
            k: (prune(v, roots[k]) if k in roots else v)
            for k, v in obj.items()
            if k in roots or k in ("apiVersion", "kind", "metadata")
        }
        return apply_defaults(pruned, crd=crd)

    return default
