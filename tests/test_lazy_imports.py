"""Imports inside functions only where lazy loading is measured to matter.

An import inside a function hides a dependency from the reader and pays its lookup on every call; it is kept only
where loading the module at import time would hurt: the module is one of the lazy packages measured in
docs/architecture.md ("Lazy imports": absent from an image, or seconds of a command's start-up), or one of our
modules whose own top level pulls such a package in (found here from the source, transitively), or the import says
why with a ``# lazy: <reason>`` comment on its line or right above it (such a comment covers the imports that follow
it): a named cycle, a module only some commands need with its measured cost, a patch or an environment that must
come first. Everything else belongs at the top of its module.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from tests.test_import_graph import ARCHITECTURE, ROOT, _resolve_relative, _type_checking_only, modules

LAZY_SECTION = "## Lazy imports"
MARK = re.compile(r"#\s*lazy:\s*(?P<reason>.*)$")
MIN_REASON = 12  # characters: "cycle a -> b" is the shortest reason that names something
RULE = (
    "import inside a function: move it to the top of the module, or say why it must stay lazy with "
    "`# lazy: <reason>` (a named cycle `cycle a -> b`, a module only some commands need and what it costs, "
    "a patch or an environment that must come first); packages lazy by design: docs/architecture.md, Lazy imports"
)
# Files whose function-level imports were not yet moved or justified, with how many are left in each: the list
# and the counts only ever shrink (a file that is fixed leaves it). Empty: every one is moved or says why.
KNOWN_REMAINING: dict[str, int] = {}


def documented_lazy(text: str) -> dict[str, str]:
    """The first column of the table under "## Lazy imports" (each backticked name) -> the row, for the report."""
    out: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == LAZY_SECTION
            continue
        if not inside or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name in cells[0].split("`")[1::2]:
            out[name] = line
    return out


def _is_ours(name: str) -> bool:
    return name.split(".")[0] in ("specdecode_operator", "specdecode_runtime")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, mods: dict[str, Path]) -> list[str]:
    """The modules one import statement loads (``from pkg import sub`` loads ``pkg.sub`` when it is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module or ""
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names})


def _executed(name: str) -> list[str]:
    """``a.b.c`` runs ``a``, ``a.b`` and ``a.b.c`` when first imported."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@lru_cache(maxsize=1)
def _parsed() -> dict[str, tuple[Path, ast.Module]]:
    return {name: (path, ast.parse(path.read_text(), str(path))) for name, path in modules().items()}


def top_level_imports(module: str, tree: ast.Module, is_package: bool, mods: dict[str, Path]) -> set[str]:
    """What importing ``module`` runs: imports outside function bodies (class bodies and ``try`` blocks run too),
    except those under ``if TYPE_CHECKING:``."""
    skip = _type_checking_only(tree)
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or id(child) in skip:
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.update(_targets(child, module, is_package, mods))
            visit(child)

    visit(tree)
    return out


def pulls_in_lazy(lazy: set[str]) -> dict[str, list[str]]:
    """Each module of ours whose import loads a lazy package -> the chain that does it (module, ..., package)."""
    mods = modules()
    parsed = _parsed()
    direct = {
        name: top_level_imports(name, tree, path.name == "__init__.py", mods) for name, (path, tree) in parsed.items()
    }
    chains: dict[str, list[str] | None] = {}

    def chain(module: str, stack: tuple[str, ...]) -> list[str] | None:
        if module in chains:
            return chains[module]
        if module in stack:
            return None  # an import cycle under way: the module's own edges decide
        found = None
        for target in sorted(direct[module]):
            for step in _executed(target):
                if not _is_ours(step) and step in lazy:
                    found = [module, step]
                elif step in mods and step != module and (sub := chain(step, (*stack, module))):
                    found = [module, *sub]
                if found:
                    break
            if found:
                break
        chains[module] = found
        return found

    return {m: c for m in sorted(mods) if (c := chain(m, ())) is not None}


def _justified_by_design(target: str, lazy: set[str], heavy: dict[str, list[str]]) -> bool:
    return any(step in lazy or step in heavy for step in _executed(target))


def _reason_above(lines: list[str], lineno: int) -> str | None:
    """The ``# lazy:`` reason in the block of comment lines right above line ``lineno`` (1-based), continuation
    lines included."""
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        if m := MARK.search(lines[index]):
            tail = [line.strip().lstrip("#").strip() for line in lines[index + 1 : lineno - 1]]
            return " ".join([m.group("reason").strip(), *tail]).strip()
        index -= 1
    return None


def _marked(lines: list[str], node: ast.stmt) -> str | None:
    """The ``# lazy:`` reason on the import's own lines or in the comment lines right above it, if any."""
    for index in range(node.lineno - 1, node.end_lineno or node.lineno):
        if m := MARK.search(lines[index]):
            return m.group("reason").strip()
    return _reason_above(lines, node.lineno)


def _run_reasons(lines: list[str], body: list[ast.stmt]) -> dict[int, str]:
    """A ``# lazy:`` comment on lines of its own covers the run of import statements right below it (blank lines
    between them allowed, as isort groups them): id of each covered statement -> the reason."""
    out: dict[int, str] = {}
    reason: str | None = None
    for stmt in body:
        if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
            reason = None
            continue
        reason = _reason_above(lines, stmt.lineno) or reason
        if reason is not None:
            out[id(stmt)] = reason
    return out


def function_level_violations(
    module: str, path: str, source: str, lazy: set[str], heavy: dict[str, list[str]], is_package: bool = False
) -> list[str]:
    """``path:line: <import> -- <rule>`` for each import inside a function that nothing justifies."""
    mods = modules()
    tree = ast.parse(source, path)
    lines = source.splitlines()
    bad: list[str] = []

    runs: dict[int, str] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                runs.update(_run_reasons(lines, block))

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                reason = runs.get(id(child)) or _marked(lines, child)
                if reason is not None:
                    if len(reason) < MIN_REASON or (reason.startswith("cycle") and "->" not in reason):
                        bad.append(f"{path}:{child.lineno}: `# lazy: {reason}` names no reason -- {RULE}")
                    continue
                loose = [
                    t for t in _targets(child, module, is_package, mods) if not _justified_by_design(t, lazy, heavy)
                ]
                if loose:
                    bad.append(f"{path}:{child.lineno}: {lines[child.lineno - 1].strip()} -- {RULE}")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return bad


@lru_cache(maxsize=1)
def _lazy_and_heavy() -> tuple[frozenset[str], dict[str, list[str]], dict[str, str]]:
    documented = documented_lazy(ARCHITECTURE.read_text())
    lazy = frozenset(n for n in documented if not _is_ours(n))
    return lazy, pulls_in_lazy(set(lazy)), documented


def all_violations() -> dict[str, list[str]]:
    lazy, heavy, _ = _lazy_and_heavy()
    out: dict[str, list[str]] = {}
    for name, (path, _tree) in _parsed().items():
        rel = path.relative_to(ROOT).as_posix()
        found = function_level_violations(name, rel, path.read_text(), set(lazy), heavy, path.name == "__init__.py")
        if found:
            out[rel] = found
    return out


# ---------------------------------------------------------------------------------------------------- the rule
def test_imports_inside_functions_are_lazy_for_a_measured_reason():
    violations = all_violations()
    new = [v for rel, found in sorted(violations.items()) if rel not in KNOWN_REMAINING for v in found]
    grown = [
        f"{rel}: {len(violations.get(rel, []))} function-level imports without a reason, {count} known"
        for rel, count in sorted(KNOWN_REMAINING.items())
        if len(violations.get(rel, [])) > count
    ]
    assert not new and not grown, "\n".join(new + grown)


def test_known_remaining_list_only_shrinks():
    """A file whose imports were moved or justified leaves KNOWN_REMAINING, and its count follows it down."""
    violations = all_violations()
    stale = [
        f"{rel}: {len(violations.get(rel, []))} left, {count} listed: lower or remove its entry"
        for rel, count in sorted(KNOWN_REMAINING.items())
        if len(violations.get(rel, [])) < count
    ]
    assert not stale, "\n".join(stale)


def test_the_documented_lazy_set_is_measured_and_ours_really_are_heavy():
    """Every row names its import time; a module of ours listed there must really load a lazy package at import
    (else the table would excuse a cheap import)."""
    lazy, heavy, documented = _lazy_and_heavy()
    assert {"torch", "sglang", "kubernetes"} <= lazy, sorted(lazy)
    for name, row in documented.items():
        assert re.search(r"\|\s*[\d.]+\s*\|", row), f"{name}: no measured seconds in its row: {row}"
        if _is_ours(name):
            assert name in heavy, f"{name} is listed as lazy but its import loads none of {sorted(lazy)}"


# ---------------------------------------------------------------------------------------------------- the checker itself
def test_checker_catches_an_unmarked_standard_library_import():
    lazy, heavy, _ = _lazy_and_heavy()
    source = "def f():\n    import json\n    return json\n"
    bad = function_level_violations("specdecode_runtime.launch", "runtime/x.py", source, set(lazy), heavy)
    assert len(bad) == 1 and bad[0].startswith("runtime/x.py:2: import json -- import inside a function"), bad
    # a reason on a line of its own covers the imports right below it, not one after other code
    source = (
        "def f():\n    # lazy: only `plan` needs it, 0.5 s of pydantic\n    import re\n    x = 1\n    import json\n"
    )
    bad = function_level_violations("specdecode_runtime.launch", "runtime/x.py", source, set(lazy), heavy)
    assert [b.split(" -- ")[0] for b in bad] == ["runtime/x.py:5: import json"], bad


def test_checker_accepts_lazy_packages_marked_reasons_and_top_level_imports():
    lazy, heavy, _ = _lazy_and_heavy()
    source = (
        "import json\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .config import X\n"
        "def f():\n"
        "    import torch.distributed as dist\n"
        "    from sglang.srt.server_args import ServerArgs\n"
        "    # lazy: the patch must run after SGLang loaded its scheduler\n"
        "    from . import metrics\n"
        "    import os  # lazy: cycle specdecode_runtime.a -> specdecode_runtime.b\n"
        "    # lazy: only `specdecode render` needs them, 0.6 s of pydantic\n"
        "    import re\n\n    from .render import render\n"
        "    x = 1\n"
    )
    assert function_level_violations("specdecode_runtime.launch", "runtime/x.py", source, set(lazy), heavy) == []


def test_checker_refuses_an_empty_reason_and_a_cycle_that_names_nothing():
    lazy, heavy, _ = _lazy_and_heavy()
    source = "def f():\n    import os  # lazy:\n    import re  # lazy: cycle\n"
    bad = function_level_violations("specdecode_runtime.launch", "runtime/x.py", source, set(lazy), heavy)
    assert [b.split(":")[1] for b in bad] == ["2", "3"], bad


def test_heavy_modules_of_ours_are_found_through_their_imports():
    """A module of ours that imports a lazy package at its top excuses a lazy import of it; one that imports it
    only inside a function does not."""
    lazy, heavy, _ = _lazy_and_heavy()
    for module, chain in heavy.items():
        assert chain[0] == module and chain[-1] in lazy, chain
    assert "specdecode_runtime.sglang_patch" not in heavy  # imports torch and sglang only inside functions
    assert "specdecode_runtime.launch" not in heavy
