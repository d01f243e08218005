"""The test tiers (tests/conftest.py): the whole suite as `make test` collects it (this session's own collection when
it collected the whole suite, as `make test` and `make test-TIER` do; else a collection in a subprocess), and every
test found with exactly one tier marker; no unit test uses a fixture of the API-server beds (tests/k8s/fixtures.py),
the chaos bed (tests/chaos/conftest.py) or the SGLang engines (tests/sglang_e2e/conftest.py), and no unit test file
imports what starts a real API server, the API emulator with the operator, or a Go-built tool."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import COLLECTED, FILE_TIER, FOLDER_TIER, TIER_ENV, TIERS

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# The files whose fixtures are a tier's own: a test using one of them belongs to that tier.
FIXTURE_FILES = {
    "k8s/fixtures.py": "cluster",
    "chaos/conftest.py": "chaos",
    "sglang_e2e/conftest.py": "engine",
}

# Modules a unit test file must not import: what starts or drives a real API server, the API emulator with the
# operator, or the Go-built tools. {module: the names it may import (None: none)}
TIER_MODULES = {
    "tests.k8s.apiserver": None,
    "tests.k8s.envtest": {"free_port"},
    "tests.k8s.fixtures": None,
    "tests.k8s.kubelet": None,
    "tests.k8s.realapi": None,
    "tests.k8s.registry": None,
    "tests.k8s.tools": None,
    "tests.chart.promtool": None,
    "specdecode_operator.testbed.runner": None,
}

# Loaded into the collecting pytest with -p: writes, per test, its tier markers and the fixtures it uses.
DUMP_PLUGIN = """
import json, os
TIERS = {tiers!r}

def pytest_collection_finish(session):
    rows = [
        dict(
            nodeid=item.nodeid,
            tiers=[m.name for m in item.iter_markers() if m.name in TIERS],
            fixtures=sorted(set(getattr(item, "fixturenames", ()))),
        )
        for item in session.items
    ]
    with open(os.environ["SPECDECODE_TIER_DUMP"], "w") as f:
        json.dump(rows, f)
"""


def whole_suite(config: pytest.Config) -> bool:
    """Whether this session collected every test file (its arguments name tests/ or the checkout, nothing narrower,
    and no option skips files at collection)."""
    if config.getoption("lf", False) or config.getoption("continue_on_collection_errors", False):
        return False
    if config.getoption("ignore", None) or config.getoption("ignore_glob", None):
        return False
    paths = {Path(str(config.rootpath), a.split("::")[0]).resolve() for a in config.args}
    return bool(paths) and paths <= {TESTS, ROOT}


@pytest.fixture(scope="module")
def collected(request, tmp_path_factory) -> list[dict]:
    """Every test of the suite: {nodeid, tiers, fixtures}."""
    if whole_suite(request.config) and COLLECTED in request.config.stash:
        rows = request.config.stash[COLLECTED]
        assert len(rows) > 1000, f"only {len(rows)} tests collected"
        return rows
    d = tmp_path_factory.mktemp("tiers")
    (d / "tier_dump.py").write_text(DUMP_PLUGIN.format(tiers=TIERS))
    out = d / "collected.json"
    env = dict(os.environ, SPECDECODE_TIER_DUMP=str(out))
    env["PYTHONPATH"] = os.pathsep.join([str(d), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tier_dump", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    errors = done.stdout[done.stdout.find("= ERRORS =") :] if "= ERRORS =" in done.stdout else done.stdout
    assert done.returncode == 0, (
        f"collecting the suite failed ({done.returncode}):\n{errors[-4000:]}{done.stderr[-2000:]}"
    )
    rows = json.loads(out.read_text())
    assert len(rows) > 1000, f"only {len(rows)} tests collected"
    return rows


def fixture_names(path: Path) -> set[str]:
    """Names of the functions decorated with @pytest.fixture (bare or called) in ``path``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if isinstance(target, ast.Attribute) and target.attr == "fixture":
                    names.add(node.name)
    return names


def tier_fixtures() -> dict[str, str]:
    """{fixture name: the tier it belongs to}."""
    return {name: tier for rel, tier in FIXTURE_FILES.items() for name in fixture_names(TESTS / rel)}


def test_every_test_has_exactly_one_tier(collected):
    wrong = [f"{r['nodeid']}: {r['tiers'] or 'no tier'}" for r in collected if len(r["tiers"]) != 1]
    assert not wrong, f"{len(wrong)} tests without exactly one of {TIERS}:\n  " + "\n  ".join(wrong[:50])


def test_no_unit_test_uses_a_cluster_chaos_or_engine_fixture(collected):
    owned = tier_fixtures()
    wrong = []
    for r in collected:
        if r["tiers"] == ["unit"]:
            used = sorted(f"{name} ({owned[name]})" for name in r["fixtures"] if name in owned)
            if used:
                wrong.append(f"{r['nodeid']} uses {', '.join(used)}")
    assert not wrong, (
        f"{len(wrong)} unit tests use fixtures of another tier (give their file that tier in tests/conftest.py's "
        "FILE_TIER):\n  " + "\n  ".join(wrong[:50])
    )


def imported(path: Path) -> set[tuple[str, str | None]]:
    """(module, name) for every import in ``path`` (name None for ``import module``), nested imports included."""
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {(a.name, None) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                found |= {(node.module, a.name), (f"{node.module}.{a.name}", None)}
    return found


def test_no_unit_test_file_imports_a_cluster_bed(collected):
    files: dict[str, set[str]] = {}
    for r in collected:
        files.setdefault(r["nodeid"].split("::")[0], set()).update(r["tiers"])
    wrong = []
    for rel, tiers in sorted(files.items()):
        if tiers != {"unit"}:
            continue
        for module, name in imported(ROOT / rel):
            if module in TIER_MODULES and (TIER_MODULES[module] is None or name not in TIER_MODULES[module]):
                wrong.append(f"{rel} imports {module}" + (f".{name}" if name else ""))
    assert not wrong, "unit test files that import a cluster bed (give them their tier in FILE_TIER):\n  " + (
        "\n  ".join(wrong)
    )


def test_the_fixture_scan_finds_the_beds():
    owned = tier_fixtures()
    assert {"envtest_environment", "apiserver_bed", "cluster", "cluster_factory", "emulated"} <= set(owned)
    assert owned["tiny_models"] == "engine" and owned["stock"] == "engine"
    assert owned["bed"] == "chaos"


def test_the_tier_tables_name_existing_tests_and_tiers():
    for rel, tier in FILE_TIER.items():
        assert (TESTS / rel).is_file() and Path(rel).name.startswith("test_"), f"FILE_TIER: no test file {rel}"
        assert tier in TIERS, f"FILE_TIER[{rel!r}] = {tier!r}"
        assert tier != FOLDER_TIER.get(Path(rel).parts[0], "unit"), f"FILE_TIER[{rel!r}] repeats its folder's tier"
    for folder, tier in FOLDER_TIER.items():
        assert (TESTS / folder).is_dir() and tier in TIERS, f"FOLDER_TIER[{folder!r}] = {tier!r}"


def test_every_tier_has_tests(collected):
    counts = {t: sum(r["tiers"] == [t] for r in collected) for t in TIERS}
    assert all(counts.values()), counts


def test_sglang_refuses_to_run_in_a_unit_test(monkeypatch):
    """SGLang's worker stack is engine-tier: under a unit test's tier, sglang_or_skip fails instead of importing."""
    sys.path.insert(0, str(TESTS / "runtime"))
    try:
        from runtime_testlib import sglang_or_skip
    finally:
        sys.path.remove(str(TESTS / "runtime"))
    assert os.environ[TIER_ENV] == "unit"  # this test's own tier, set while it runs
    with pytest.raises(pytest.fail.Exception, match="engine tier"):
        sglang_or_skip()
    monkeypatch.setenv(TIER_ENV, "engine")
    monkeypatch.setattr("specdecode_runtime.sglang_patch.installed_sglang_version", lambda: None)
    monkeypatch.delenv("SPECDECODE_REQUIRE_SGLANG", raising=False)
    with pytest.raises(pytest.skip.Exception):  # past the tier guard: no SGLang here, so a skip
        sglang_or_skip()
