"""Admission in Python: structural defaults, the CRD's OpenAPI schema and every CEL rule, as the API server does.

Used by ``specdecode validate`` (so users see exactly what the API server would say), by the operator for objects
that bypassed admission (a CRD applied without CEL, or an older CRD), and by the test API emulator, which loads the
committed CRD file. The schema and the rules are read from a CRD document, never restated here.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterator

import jsonschema
from pydantic import ValidationError

from .crd import crd
from .models import API_VERSION, KIND, SpecDecodeDeployment


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidSpec(ValueError):
    """A SpecDecodeDeployment that the API server would refuse; carries every problem, path first."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@functools.lru_cache(maxsize=1)
def _generated_crd() -> dict:
    return crd()


def openapi_of(crd: dict | None) -> dict:
    crd = crd or _generated_crd()
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# ---------------------------------------------------------------- defaulting


def _default(schema: dict, value: Any) -> Any:
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _default(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_default(schema["items"], v) for v in value]
    return value


def apply_defaults(obj: dict, crd: dict | None = None) -> dict:
    """A copy of ``obj`` with the schema's defaults filled in, top-down like the API server."""
    return _default(openapi_of(crd), copy.deepcopy(obj))


# ---------------------------------------------------------------- schema


def _to_jsonschema(s: dict) -> dict:
    """Kubernetes structural schema -> JSON Schema: closed objects (unknown fields are errors, as with kubectl's
    strict field validation), nullable as a null type, x-kubernetes-* extensions dropped."""
    out = {k: v for k, v in s.items() if not k.startswith("x-kubernetes-") and k not in ("default", "nullable")}
    if "properties" in s:
        out["properties"] = {k: _to_jsonschema(v) for k, v in s["properties"].items()}
        if not s.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in s:
            out["additionalProperties"] = False
    if isinstance(s.get("items"), dict):
        out["items"] = _to_jsonschema(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        out["additionalProperties"] = _to_jsonschema(s["additionalProperties"])
    if s.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(flag) is True:  # OpenAPI 3.0 boolean form -> JSON Schema number form
            out[flag] = out.pop(bound)
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


_VALIDATORS: dict[int, tuple[dict, jsonschema.Draft202012Validator]] = {}


def _validator_of(schema: dict) -> jsonschema.Draft202012Validator:
    """The validator of a schema object; keyed by identity first (the same CRD dict is passed on every call), so
    the schema is not serialised per validation."""
    hit = _VALIDATORS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]

    validator = _validator_for(json.dumps(schema, sort_keys=True))
    if len(_VALIDATORS) > 16:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, validator)  # holding the schema keeps its id from being reused
    return validator


@functools.lru_cache(maxsize=8)
def _validator_for(schema_key: str) -> jsonschema.Draft202012Validator:
    converted = _to_jsonschema(json.loads(schema_key))
    metadata = converted.get("properties", {}).get("metadata")
    if isinstance(metadata, dict):  # the CRD declares only metadata.name; the API server checks the rest of it
        metadata.pop("additionalProperties", None)
    return jsonschema.Draft202012Validator(converted)


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def _schema_message(err: jsonschema.ValidationError) -> tuple[str, str]:
    path = list(err.absolute_path)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        allowed = ", ".join(sorted(err.schema.get("properties", {})))
        if len(extra) == 1:
            return _path(path + [extra[0]]), f"unknown field; allowed fields here: {allowed}"
        return _path(path), f"unknown fields {extra}; allowed fields here: {allowed}"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return _path(path + [missing]), "Required value"
    if err.validator == "enum":
        return _path(path), f"Unsupported value: {err.instance!r}: supported values: " + ", ".join(
            repr(v) for v in err.validator_value
        )
    if err.validator in ("minimum", "maximum"):
        word = "greater than or equal to" if err.validator == "minimum" else "less than or equal to"
        return _path(path), f"Invalid value: {err.instance!r}: should be {word} {err.validator_value}"
    if err.validator == "pattern":
        return _path(path), f"Invalid value: {err.instance!r}: should match '{err.validator_value}'"
    if err.validator == "type":
        return _path(path), f"Invalid value: {err.instance!r}: must be of type {err.validator_value}"
    return _path(path), err.message


# ---------------------------------------------------------------- CEL


@functools.lru_cache(maxsize=256)
def _compiled(rule: str):
    import cel

    return cel.compile(rule)


def _cel_holds(rule: str, value: Any, old: Any) -> bool:
    ctx = {"self": value}
    if old is not None:
        ctx["oldSelf"] = old
    try:
        return _compiled(rule).execute(ctx) is True
    except Exception:  # an evaluation error (missing key, division by zero) fails the rule, as on the API server
        return False


def _cel_message(validation: dict, value: Any, old: Any) -> str:
    """The rule's messageExpression when it gives a non-empty string, else its message (the API server's
    fallback)."""
    expression = validation.get("messageExpression")
    if expression:
        ctx = {"self": value}
        if old is not None:
            ctx["oldSelf"] = old
        try:
            text = _compiled(expression).execute(ctx)
        except Exception:
            text = None
        if isinstance(text, str) and text.strip():
            return text
    return validation.get("message", validation["rule"])


def _cel_problems(schema: dict, value: Any, old: Any, path: list) -> Iterator[Problem]:
    for v in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in v["rule"] and old is None:
            continue  # transition rules apply to updates only
        if not _cel_holds(v["rule"], value, old):
            field = v.get("fieldPath", "")
            where = _path(path) + field if path else field.lstrip(".") or "<root>"
            yield Problem(where, _cel_message(v, value, old))
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                sub_old = old.get(key) if isinstance(old, dict) else None
                yield from _cel_problems(sub, value[key], sub_old, path + [key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _cel_problems(schema["items"], item, None, path + [i])


# ---------------------------------------------------------------- entry points


# The API server's own check of every object's name, before the CRD's schema and rules.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Schema failures after which the API server does not evaluate CEL rules (apiextensions' hasBlockingErr).
_BLOCKING = {"additionalProperties", "type", "enum", "required", "maxLength", "maxItems", "maxProperties"}


def validate_object(obj: dict, crd: dict | None = None, old: dict | None = None) -> list[Problem]:
    """Every problem the API server would report for ``obj`` (create) or ``old -> obj`` (update), sorted by path.

    As on the API server: unknown fields (strict field validation) refuse the document before anything else is
    checked; the CEL rules run unless the schema found a blocking error (wrong type, enum, required, a too long
    string, too many items or properties), so a value out of its bounds is reported with what the rules say.
    """
    if not isinstance(obj, dict):
        return [Problem("<root>", f"expected a mapping, got {type(obj).__name__}")]
    problems: list[Problem] = []
    if obj.get("apiVersion") != API_VERSION:
        problems.append(Problem("apiVersion", f"must be {API_VERSION}, got {obj.get('apiVersion')!r}"))
    if obj.get("kind") != KIND:
        problems.append(Problem("kind", f"must be {KIND}, got {obj.get('kind')!r}"))
    if problems:
        return problems

    schema = openapi_of(crd)
    defaulted = apply_defaults(obj, crd)
    defaulted.setdefault("metadata", {})
    errors = list(_validator_of(schema).iter_errors(defaulted))
    unknown = [e for e in errors if e.validator == "additionalProperties"]
    problems = [Problem(*_schema_message(e)) for e in unknown or errors]
    name = defaulted["metadata"].get("name") if isinstance(defaulted["metadata"], dict) else None
    if not unknown and isinstance(name, str) and not (len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name)):
        problems.append(
            Problem(
                "metadata.name",
                f"Invalid value: {name!r}: the API server takes only a lowercase "
                "RFC 1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
            )
        )
    if not any(e.validator in _BLOCKING for e in errors):
        old_defaulted = apply_defaults(old, crd) if old else None
        problems.extend(_cel_problems(schema, defaulted, old_defaulted, []))
    return sorted(set(problems))


def parse(obj: dict, crd: dict | None = None, *, validated: bool = False) -> SpecDecodeDeployment:
    """Validate like the API server, then build the typed object; raises InvalidSpec with every problem.

    ``validated=True``: the caller has just run ``validate_object`` on ``obj`` and found nothing; skip the repeat."""
    problems = [] if validated else validate_object(obj, crd)
    if problems:
        raise InvalidSpec(problems)
    try:
        return SpecDecodeDeployment.model_validate(apply_defaults(obj, crd))
    except ValidationError as e:  # the models are stricter than the schema somewhere: still a field-path error
        raise InvalidSpec(
            [Problem(_path(list(err["loc"])), err["msg"]) for err in e.errors(include_url=False)]
        ) from None
