"""Admission: defaulting and validation (the CRD's schema and CEL rules) before an object is stored."""

from __future__ import annotations

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
            causes = [{"reason": "FieldValueInvalid", "message": p,
                       "field": p.split(":", 1)[0] if ":" in p else ""} for p in problems]
            raise Reject(422, f'{meta.kind}.{meta.group} "{name}" is invalid: ' + "; ".join(problems),
                         "Invalid", {"name": name, "group": meta.group, "kind": meta.kind, "causes": causes})
    return obj


def crd_validator(crd: dict) -> Validator:
    """The committed CRD's openAPIV3Schema and x-kubernetes-validations, through the API package's validator."""
    from specdecode_operator.api.validate import validate_object

    def validate(obj: dict, old: dict | None) -> list[str]:
        return [str(p) for p in validate_object(obj, crd=crd, old=old)]

    return validate


def crd_defaulter(crd: dict) -> Defaulter:
    from specdecode_operator.api.validate import apply_defaults

    def default(obj: dict) -> dict:
        return apply_defaults(obj, crd=crd)

    return default
