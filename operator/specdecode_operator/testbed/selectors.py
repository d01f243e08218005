"""Kubernetes label-selector strings (``a=b,c!=d,e in (x,y),f notin (z),g,!h``) evaluated against labels."""

from __future__ import annotations

import re
from functools import partial
from typing import Callable

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def compile_selector(selector: str | None) -> Callable[[dict], bool]:
    """Return a predicate over a labels dict; raises ValueError on a malformed selector, like the server's 400."""
    if not selector:
        return lambda labels: True
    tests: list[Callable[[dict], bool]] = []
    for term in _split(selector):
        m = _SET.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                tests.append(partial(_value_in, key, values))
            else:
                tests.append(partial(_value_not_in, key, values))
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            tests.append(partial(_value_not_in, key, {value}))
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            tests.append(partial(_value_in, key, {value}))
        elif term.startswith("!"):
            absent = term[1:].strip()
            tests.append(partial(_absent, absent))
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", term):
            tests.append(partial(_present, term))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return lambda labels: all(t(labels or {}) for t in tests)


def format_selector(match_labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def _value_in(key: str, values: set[str], labels: dict) -> bool:
    return labels.get(key) in values


def _value_not_in(key: str, values: set[str], labels: dict) -> bool:
    return labels.get(key) not in values


def _present(key: str, labels: dict) -> bool:
    return key in labels


def _absent(key: str, labels: dict) -> bool:
    return key not in labels
