"""The import graph of both packages, read from the source with ``ast`` (imports inside functions included, since a
lazy import is still a dependency): no cycles between modules, a contract library that needs nothing but the standard
library, PyYAML and pydantic, and a tuner with no network or Kubernetes client under it.

An edge goes from a module to the module an import names: ``from pkg import sub`` points at ``pkg.sub`` when ``sub``
is a module, else at ``pkg``. A package's ``__init__`` is its own node, so a package re-exporting its submodules does
not by itself make a cycle with them.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"specdecode_operator": ROOT / "operator", "specdecode_runtime": ROOT / "runtime"}
CONTRACT = "specdecode_runtime.contract"
# argcomplete: imported by contract/cli_common.py only when a shell asks for completions (a base dependency).
CONTRACT_THIRD_PARTY = {"yaml", "pydantic", "pydantic_core", "typing_extensions", "argcomplete"}
RUNTIME_ROOT = "specdecode_runtime"  # the package itself: its __init__ holds the version and imports nothing
TUNER = "specdecode_operator.tuner"
TUNER_FORBIDDEN = {"aiohttp", "kopf", "kubernetes", "kubernetes_asyncio"}


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pkg, base in PACKAGES.items():
        for path in sorted((base / pkg).rglob("*.py")):
            if "import_stubs" in path.parts:  # stand-in packages for foreign modules, found only through PYTHONPATH
                continue
            found[_module_name(path, base)] = path
    return found


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations only, never executed."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_of(name: str, source: str, mods: dict[str, Path] | None = None, is_package: bool = False) -> set[str]:
    """Every module name ``source`` (the text of module ``name``) imports, top level or lazy."""
    mods = modules() if mods is None else mods
    tree = ast.parse(source, name)
    skip = _type_checking_only(tree)
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(name, is_package, node.level, node.module) if node.level else node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in mods else base)
    return targets


@lru_cache(maxsize=1)
def imports() -> dict[str, set[str]]:
    """Every module of both packages -> every module name it imports (ours and foreign, top level or lazy)."""
    mods = modules()
    return {name: imports_of(name, path.read_text(), mods, path.name == "__init__.py") for name, path in mods.items()}


def internal_graph() -> dict[str, set[str]]:
    mods = modules()
    out: dict[str, set[str]] = {}
    for name, targets in imports().items():
        edges = set()
        for t in targets:
            while t and t not in mods:  # ``import a.b.c`` of ours depends on the module a.b.c (or its package)
                t = t.rpartition(".")[0]
            if t and t != name:
                edges.add(t)
        out[name] = edges
    return out


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as one concrete cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, set(c)) for c in components]


def _one_cycle(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """A shortest path back to the start inside one component: the report names the modules to untangle."""
    start = min(members)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(members)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# ---------------------------------------------------------------------------------------------------- the checker itself
def test_cycle_finder_reports_a_lazy_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_imports_inside_functions():
    # engine imports SGLang's hooks only inside EngineRuntime.install (the scheduler process, after SGLang loaded)
    assert "specdecode_runtime.sglang_patch.engine_hooks" in internal_graph()["specdecode_runtime.engine"]
    planted = imports_of("specdecode_runtime.engine", "def f():\n    from .launch import plan_launch\n")
    assert planted == {"specdecode_runtime.launch"}


# ---------------------------------------------------------------------------------------------------- the rules
def _cycles_within(package: str) -> list[list[str]]:
    return [c for c in find_cycles(internal_graph()) if any(_within(m, package) for m in c)]


def test_runtime_has_no_import_cycles():
    cycles = _cycles_within("specdecode_runtime")
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_operator_has_no_import_cycles():
    cycles = _cycles_within("specdecode_operator")
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_runtime_never_imports_the_operator():
    bad = sorted(
        f"{m} -> {t}"
        for m, ts in internal_graph().items()
        if _within(m, "specdecode_runtime")
        for t in ts
        if _within(t, "specdecode_operator")
    )
    assert not bad, "\n".join(bad)


def test_contract_imports_only_itself_the_standard_library_yaml_and_pydantic():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for module, targets in sorted(imports().items()):
        if not _within(module, CONTRACT):
            continue
        for t in sorted(targets):
            top = t.split(".")[0]
            if _within(t, CONTRACT) or t == RUNTIME_ROOT or top in stdlib or top in CONTRACT_THIRD_PARTY:
                continue
            bad.append(f"{module} imports {t}")
    assert not bad, "the contract must stay importable without the runtime's dependencies:\n" + "\n".join(bad)


def _reachable(start: str, graph: dict[str, set[str]]) -> dict[str, str]:
    """Every module reachable from ``start`` -> the module that first imports it (for the report)."""
    seen = {start: ""}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in seen:
                    seen[w] = v
                    nxt.append(w)
        frontier = nxt
    return seen


def test_tuner_imports_no_network_or_kubernetes_client():
    """The pure tuner and everything of ours it imports: no aiohttp, kopf or Kubernetes client."""
    graph, mods = internal_graph(), modules()
    roots = [m for m in mods if _within(m, TUNER)]
    bad = set()
    for root in roots:
        for module, via in _reachable(root, graph).items():
            for t in imports().get(module, ()):
                if t.split(".")[0] in TUNER_FORBIDDEN:
                    bad.add(f"{module} imports {t} (reached from {root} via {via or root})")
    assert not bad, "\n".join(sorted(bad))


@pytest.mark.parametrize("module", ["specdecode_runtime.engine", "specdecode_runtime.scheduler_process"])
def test_scheduler_process_code_never_reaches_the_launcher(module):
    """A scheduler process reads runtime.yaml through the contract; the launcher sits above it, not beside it."""
    path = _reachable(module, internal_graph())
    assert "specdecode_runtime.launch" not in path, (
        f"{module} reaches launch via {path.get('specdecode_runtime.launch')}"
    )


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_module_is_in_the_graph(package):
    assert any(_within(m, package) for m in modules()), package


# ---------------------------------------------------------------------------------------------------- docs/architecture.md
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TABLE_SECTIONS = {"## Operator: where new code goes": "specdecode_operator", "## Runtime": "specdecode_runtime"}
ANYTHING = "*"


def _ticked(cell: str) -> list[str]:
    return [t for t in cell.split("`")[1::2]]


def _module_prefix(token: str, package: str) -> str:
    """`api/` -> specdecode_operator.api, `kube_client.py` -> specdecode_operator.kube_client, a dotted name as is."""
    if token.startswith(("specdecode_operator", "specdecode_runtime")) and "/" not in token:
        return token
    return package + "." + token.removesuffix("/").removesuffix(".py").replace("/", ".")


def parse_layer_tables(text: str) -> dict[str, list[tuple[list[str], list[str]]]]:
    """package -> rows of (homes, allowed imports) from the "may import" tables, in order; each as module prefixes.
    "everything above" expands to the homes of the rows above; "anything" is :data:`ANYTHING`."""
    tables: dict[str, list[tuple[list[str], list[str]]]] = {}
    package = None
    for line in text.splitlines():
        if line.startswith("## "):
            package = TABLE_SECTIONS.get(line.strip())
            continue
        if package is None or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[2] == "may import":
            continue
        rows = tables.setdefault(package, [])
        homes = [_module_prefix(t, package) for t in _ticked(cells[1])]
        allowed = [_module_prefix(t, package) for t in _ticked(cells[2])]
        if "everything above" in cells[2]:
            allowed += [m for row_homes, row_allowed in rows for m in (*row_homes, *row_allowed) if m != ANYTHING]
        if cells[2].startswith("anything"):
            allowed = [ANYTHING]
        rows.append((homes, homes + list(dict.fromkeys(allowed))))  # the homes of one row import each other
    return tables


def _home_of(module: str, rows: list[tuple[list[str], list[str]]]) -> tuple[str, list[str]] | None:
    """The most specific home of ``module`` (``reconcile/events.py`` before ``reconcile/``) and what it may import."""
    best = None
    for homes, allowed in rows:
        for h in homes:
            if _within(module, h) and (best is None or len(h) > len(best[0])):
                best = (h, allowed)
    return best


def layer_violations(graph: dict[str, set[str]], tables: dict) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        package = module.split(".")[0]
        if module == package:
            continue  # the package's __init__
        home = _home_of(module, tables[package])
        if home is None:
            bad.append(f"{module}: no row of docs/architecture.md names its home")
            continue
        own, allowed = home
        if ANYTHING in allowed:
            continue
        for t in sorted(targets):
            if t in TABLE_SECTIONS.values() or _within(t, own) or any(_within(t, a) for a in allowed):
                continue
            if _within(t, package) and _home_of(t, tables[package]) and _home_of(t, tables[package])[0] == own:
                continue
            bad.append(f"{module} imports {t}: {own} may import only {', '.join(allowed) or 'nothing of ours'}")
    return bad


def test_every_import_keeps_the_documented_layers():
    """The "may import" tables of docs/architecture.md are the rule; a new import that crosses them fails here
    until the table (and so the design) says otherwise."""
    tables = parse_layer_tables(ARCHITECTURE.read_text())
    assert set(tables) == set(TABLE_SECTIONS.values()), tables.keys()
    bad = layer_violations(internal_graph(), tables)
    assert not bad, "imports the architecture table does not allow:\n" + "\n".join(bad)


def test_layer_check_catches_a_planted_upward_import():
    """A render module importing the reconciler (a planted upward import, lazily inside a function) and an operator
    module importing a runtime module outside the contract are both reported."""
    tables = parse_layer_tables(ARCHITECTURE.read_text())
    graph = {m: set(ts) for m, ts in internal_graph().items()}
    planted = imports_of(
        "specdecode_operator.render.pod", "def f():\n    from ..reconcile import reconciler\n", is_package=False
    )
    graph["specdecode_operator.render.pod"] |= planted
    graph["specdecode_operator.tuner.tuner"].add("specdecode_runtime.cost_probe")
    bad = layer_violations(graph, tables)
    assert any(
        b.startswith("specdecode_operator.render.pod imports specdecode_operator.reconcile.reconciler") for b in bad
    ), bad
    assert any(b.startswith("specdecode_operator.tuner.tuner imports specdecode_runtime.cost_probe") for b in bad), bad
    graph["specdecode_operator.brand_new"] = set()
    assert "specdecode_operator.brand_new: no row of docs/architecture.md names its home" in layer_violations(
        graph, tables
    )


def test_annotation_only_imports_are_not_dependencies():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .config import RuntimeConfig\n"
    assert imports_of("specdecode_runtime.contract.derived", source) == {"typing"}
