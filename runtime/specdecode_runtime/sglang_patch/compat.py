"""Is the installed SGLang the one the patches were written against? Checked without starting anything.

The patches reach into SGLang internals that change between releases, so ``specdecode-runtime check-sglang`` and
the launcher resolve every :data:`.patch_points.PATCH_POINTS` entry first and compare parameter names. Modules
that cannot be imported on a GPU-less machine (the server entry points pull xgrammar and friends) are checked
from their source instead; the pod imports them for real.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Sequence

from .patch_points import PATCH_POINTS, PatchPoint
from .patch_set import _ImportBlocked, _resolve


@dataclass
class CheckResult:
    point: PatchPoint
    ok: bool
    detail: str


def check_patch_points(points: Sequence[PatchPoint] = PATCH_POINTS) -> list[CheckResult]:
    """Resolve every patch point in the installed SGLang and compare parameter names (no GPU work)."""
    out: list[CheckResult] = []
    for p in points:
        try:
            owner, attr, value = _resolve(p.target)
        except _ImportBlocked as e:
            out.append(_static_check(p, e))
            continue
        except Exception as e:  # noqa: BLE001
            out.append(CheckResult(p, False, f"missing: {type(e).__name__}: {e}"))
            continue
        if p.origin:
            try:
                _, _, orig = _resolve(p.origin)
                if value is not orig and getattr(value, "__specdecode_original__", None) is not orig:
                    out.append(CheckResult(p, False, f"{p.target} is not bound to {p.origin}"))
                    continue
            except Exception as e:  # noqa: BLE001
                out.append(CheckResult(p, False, f"origin missing: {e}"))
                continue
        if p.params:
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            fn = getattr(fn, "__specdecode_original__", fn)
            try:
                names = tuple(inspect.signature(fn).parameters)
            except (TypeError, ValueError) as e:
                out.append(CheckResult(p, False, f"no signature: {e}"))
                continue
            if names[: len(p.params)] != p.params:
                out.append(CheckResult(p, False, f"parameters {names} != expected {p.params}"))
                continue
            out.append(CheckResult(p, True, f"({', '.join(names)})"))
        else:
            out.append(CheckResult(p, True, type(value).__name__))
    return out


def _static_check(p: PatchPoint, blocked: _ImportBlocked) -> CheckResult:
    """Check a function's parameters from the module's source when the module cannot be imported here (the
    server entry points import GPU-only packages such as xgrammar); the pod imports them for real."""
    spec = importlib.util.find_spec(blocked.module)
    if spec is None or not spec.origin:
        return CheckResult(p, False, f"missing module {blocked.module}")
    tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    rest = p.target[len(blocked.module) + 1 :].split(".")
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for name in rest:
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            ),
            None,
        )
        if node is None:
            return CheckResult(p, False, f"{name} not defined in {spec.origin} (static check)")
        body = getattr(node, "body", [])
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return CheckResult(p, True, "defined (static check)")
    a = node.args
    names = tuple(x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs])
    if names[: len(p.params)] != p.params:
        return CheckResult(p, False, f"parameters {names} != expected {p.params} (static check)")
    return CheckResult(p, True, f"({', '.join(names)}) [static: {blocked}]")


def installed_sglang_version() -> str | None:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None
