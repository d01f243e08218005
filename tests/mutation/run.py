"""Mutation testing of the pure cores with mutmut: each module is mutated and run against the tests that name it.

    python -m tests.mutation.run [--survivors] [--only GLOB] [TARGET ...]   (``make mutation``; no target: all)

mutmut keeps each verdict in the target's staging directory: a re-run tests only the mutants of functions that
changed; ``--survivors`` re-tests the last run's survivors (after tests were added); ``--only`` limits a run to the
functions whose mutant names match (the score then counts only those).

The CEL rules of the CRD are strings, which mutmut leaves alone: target ``cel-rules`` (tests/mutation/cel_rules.py)
mutates their operators and judges each mutant by the boundary table.

A test suite that passes with a comparison flipped, a guard deleted or a constant changed does not test that line.
mutmut 3 finds the packages under ``src/`` of the directory it runs in and names mutants by import path, while
this repository keeps them under ``operator/`` and ``runtime/``; so each target gets a staging directory
(``build/mutation/TARGET``) holding copies of both packages under ``src/``, the test tree, and a pyproject.toml
with the target's mutmut settings. mutmut records which of the selected tests reach each function and runs only
those per mutant. The score per target is printed and written to ``build/mutation/TARGET/score.json``; survivors
are listed by ``mutmut results`` in that directory (``mutmut show NAME`` prints the change).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"specdecode_operator": ROOT / "operator", "specdecode_runtime": ROOT / "runtime"}
# Suites that need a cluster, processes or a GPU: too slow to run once per mutant, and they name modules only in
# passing (the pure cores have fast tests of their own); and checks of the repository's layout.
SLOW_TEST_DIRS = (
    "tests/e2e",
    "tests/chaos",
    "tests/k8s",
    "tests/bench",
    "tests/sglang_e2e",
    "tests/demo",
    "tests/chart/test_helm_real.py",
    "tests/api/test_cel_parity_real.py",
    # checks of the repository's layout (the import graph of operator/ and runtime/, the lint configuration), which
    # name modules without running them and read paths the staging directory lays out differently (src/)
    "tests/test_import_graph.py",
    "tests/test_lint_config.py",
)

# Data files some tests read relative to the repository root (the tuner's simulated-probe tests load the bench
# scenarios)
DATA_DIRS = ("crds", "examples", "charts", "bench/scenarios", "bench/results/gpu_h200")


@dataclass(frozen=True)
class Target:
    modules: tuple[str, ...]  # dotted module or package names ("pkg.sub" covers its modules)
    extra_tests: tuple[str, ...] = ()  # tests that exercise the modules without importing them by name
    tests: tuple[str, ...] = field(default=())  # the test files to run, where those that name it are too many
    caches: tuple[str, ...] = ()  # module-level dicts (dotted names) that cache results: emptied before each test
    tests_of: str = ""  # run the tests that name this (wider) package: a module reached through its package's API


TARGETS = {
    "status": Target(("specdecode_operator.status.conditions", "specdecode_operator.status.writer")),
    # validate.py is named by render and chart tests too (hypothesis-driven, minutes per mutant); the API's own
    # tests exercise every line of it
    "api-rules": Target(
        ("specdecode_operator.api.rules", "specdecode_operator.api.validate"),
        caches=("specdecode_operator.api.validate._VALIDATORS",),
        tests=(
            "tests/api/test_admission.py",
            "tests/api/test_cel_boundaries.py",
            "tests/api/test_cel_rules.py",
            "tests/api/test_crd.py",
            "tests/api/test_draft_tp_rule_parity.py",
        ),
    ),
    # the contract is imported by ~40 test files, among them the simulator's and the launcher's end-to-end suites
    # (tests/runtime/test_launch.py alone takes 90 s) and the rank-0 channel's multi-process preflight; these are the
    # fast ones that exercise its arithmetic, tables, refusals and file formats directly (seconds each)
    "contract": Target(
        ("specdecode_runtime.contract",),
        tests=(
            "tests/runtime/test_contract.py",
            "tests/runtime/test_contract_boundaries.py",
            "tests/runtime/test_served_calibration.py",
            "tests/tuner/test_cost_probe.py",
            "tests/tuner/test_goodput_model.py",
            "tests/tuner/test_served_tiers.py",
            "tests/tuner/test_cost_refine.py",
            "tests/api/test_draft_tp_rule_parity.py",
            "tests/cli/test_input_files.py",
            "tests/cli/test_validate_launch_parity.py",
            "tests/sim/test_scenario_files.py",
            "tests/sim/test_spec_metrics.py",
            "tests/sim/test_sim_cost_probe.py",
            "tests/sim/test_control_hostile_input.py",
        ),
    ),
    "tuner": Target(("specdecode_operator.tuner",)),
    # test_dockerfile.py names render only for the control port; it reads the repository's Dockerfile and
    # pyproject.toml, which the staging directory does not hold (mutmut's own pyproject.toml is there)
    "render": Target(
        ("specdecode_operator.render",),
        tests=(
            "tests/chart/test_chart_overrides.py",
            "tests/chart/test_pod_security.py",
            "tests/cli/test_validate_launch_parity.py",
            "tests/reconcile/test_children.py",
            "tests/render/test_property.py",
            "tests/render/test_render.py",
            "tests/render/test_render_pod_parts.py",
            "tests/runtime/test_model_sources.py",
        ),
    ),
    # the step endpoint's auth (token file, bearer header) and its checks of a table against the captured step
    # counts; the rank-0 channel's multi-process preflight (tests/sim/test_gloo_control_preflight.py) spawns
    # process groups, seconds per mutant, and is left to its own suite
    "control": Target(
        ("specdecode_runtime.control",),
        tests=(
            "tests/sim/test_step_control_http.py",
            "tests/sim/test_control_raw_auth_header.py",
            "tests/sim/test_control_hostile_input.py",
            "tests/runtime/test_contract.py",
            "tests/cli/test_input_files.py",
        ),
    ),
    # the tuner's decision rule alone (the whole tuner package is `tuner`)
    "policy": Target(
        ("specdecode_operator.tuner.policy",),
        tests=(
            "tests/tuner/test_policy.py",
            "tests/tuner/test_policy_stages.py",
            "tests/tuner/test_policy_boundaries.py",
            "tests/tuner/test_served_tiers.py",
        ),
    ),
    # the draft-TP planner alone (a part of `tuner` that a run of the whole package on a 2-core machine takes hours
    # to reach)
    "planner": Target(
        ("specdecode_operator.tuner.planner",),
        tests=("tests/tuner/test_planner.py", "tests/tuner/test_planner_and_cli.py"),
    ),
    # the rest of the tuner package, one staging directory each, so that the package is scored as the sum of its
    # modules (policy + planner + these) in runs that fit the 2-core machine: the tuner's bookkeeping and snapshot
    # parsing, the windowed estimator, the plain-Python cost fit; each runs every test that names the package,
    # since most of them reach these modules through ``Tuner``
    "tuner-core": Target(
        ("specdecode_operator.tuner.tuner", "specdecode_operator.tuner.snapshot"),
        tests_of="specdecode_operator.tuner",
    ),
    "estimator": Target(("specdecode_operator.tuner.estimator",), tests_of="specdecode_operator.tuner"),
    "cost-refine": Target(("specdecode_operator.tuner.cost_refine",), tests_of="specdecode_operator.tuner"),
}
# The CEL rule strings are data, not Python code: tests/mutation/cel_rules.py mutates them.
CEL_TARGET = "cel-rules"


def module_files(name: str) -> list[Path]:
    """Source files (relative to their package root's parent) of a dotted module or package name."""
    top, _, rest = name.partition(".")
    base = PACKAGES[top] / top / rest.replace(".", "/")
    if base.with_suffix(".py").is_file():
        return [base.with_suffix(".py").relative_to(PACKAGES[top])]
    return sorted(p.relative_to(PACKAGES[top]) for p in base.rglob("*.py"))


def names_module(text: str, name: str) -> bool:
    """Whether a test file imports ``name`` (or a module inside it): ``import a.b.c``, ``from a.b.c import x``,
    ``from a.b import c``."""
    parent, _, leaf = name.rpartition(".")
    return bool(
        re.search(rf"\b{re.escape(name)}\b", text)
        or re.search(rf"from {re.escape(parent)} import [^\n]*\b{re.escape(leaf)}\b", text)
    )


def tests_naming(target: Target) -> list[str]:
    if target.tests_of:
        return tests_naming(Target((target.tests_of,), extra_tests=target.extra_tests))
    if target.tests:
        return list(target.tests)
    found = set(target.extra_tests)
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(SLOW_TEST_DIRS):
            continue
        text = path.read_text(encoding="utf-8")
        if any(names_module(text, m) for m in target.modules):
            found.add(rel)
    return sorted(found)


def stage(name: str, target: Target, tests: list[str]) -> Path:
    """The target's staging directory, refreshed from the working tree (mutmut's cache inside it is kept)."""
    where = ROOT / "build" / "mutation" / name
    src = where / "src"
    for top, root in PACKAGES.items():
        shutil.rmtree(src / top, ignore_errors=True)
        shutil.copytree(root / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(where / "tests", ignore_errors=True)
    shutil.copytree(ROOT / "tests", where / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    for extra in DATA_DIRS:
        shutil.rmtree(where / extra, ignore_errors=True)
        shutil.copytree(ROOT / extra, where / extra)
    only = [f"src/{f.as_posix()}" for m in target.modules for f in module_files(m)]
    pytest_opts = ["-p", "no:cacheprovider", "-q", "-m", "not slow", "-x"]
    (where / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {json.dumps(only)}\n"
        f"also_copy = {json.dumps([*DATA_DIRS, 'conftest.py'])}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        f"pytest_add_cli_args = {json.dumps(pytest_opts)}\n"
        "\n[tool.pytest.ini_options]\n"
        'asyncio_mode = "auto"\n'
        'asyncio_default_fixture_loop_scope = "function"\n'
        "timeout = 300\n"
        'markers = ["slow: multi-process or long-running tests"]\n'
    )
    # Cached functions (functools caches: the CRD, compiled CEL, schema validators; and the target's own cache
    # dicts, such as the validators kept per schema object) are reached by the first test that needs them only;
    # mutmut runs each mutant against the tests it saw reach the function, so every test starts with empty caches
    # here and is seen reaching what it uses.
    conftest = where / "conftest.py"
    before = conftest.read_text() if conftest.is_file() else None
    conftest.write_text(
        "import sys\n\nimport pytest\n\n\n"
        "@pytest.fixture(autouse=True)\n"
        "def _empty_caches():\n"
        f"    for name in {json.dumps(list(target.modules))}:\n"
        "        for mod in [m for n, m in list(sys.modules.items()) if n == name or n.startswith(name + '.')]:\n"
        "            for value in list(vars(mod).values()):\n"
        "                if callable(getattr(value, 'cache_clear', None)):\n"
        "                    value.cache_clear()\n"
        f"    for name in {json.dumps(list(target.caches))}:\n"
        "        module, _, attr = name.rpartition('.')\n"
        "        if module in sys.modules:\n"
        "            getattr(sys.modules[module], attr).clear()\n"
        "    yield\n"
    )
    if before is not None and before != conftest.read_text():
        # which tests reach which function may differ now: mutmut collects that again (its verdicts are kept)
        (where / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    return where


def score(where: Path) -> dict:
    """Counts by mutmut's verdict, read from ``mutmut results --all true``."""
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=where,
        capture_output=True,
        text=True,
        check=True,
    )
    counts: dict[str, int] = {}
    survivors = []
    for line in done.stdout.splitlines():
        mutant, _, verdict = line.strip().rpartition(": ")
        if not mutant:
            continue
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "survived":
            survivors.append(mutant)
    total = sum(n for verdict, n in counts.items() if verdict != "not checked")  # --only leaves the rest unrun
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    return {
        "counts": counts,
        "total": total,
        "killed": killed,
        "score": round(100.0 * killed / total, 1) if total else None,
        "survivors": survivors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help=f"what to mutate: {', '.join([*TARGETS, CEL_TARGET])} (default: all)",
    )
    parser.add_argument(
        "--max-children",
        type=int,
        default=os.cpu_count() or 1,
        help="mutants tested in parallel (default: the number of CPUs)",
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="re-test only the previous run's survivors (from score.json); mutmut keeps every other "
        "verdict, and a plain re-run tests only mutants of functions that changed",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="mutate only the functions whose mutant names match (e.g. '*TokenFile*'); repeatable",
    )
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS and t != CEL_TARGET]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)}: choose from {', '.join([*TARGETS, CEL_TARGET])}")
    failed = False
    for name in args.targets or [*TARGETS, CEL_TARGET]:
        if name == CEL_TARGET:
            failed |= subprocess.run([sys.executable, "-m", "tests.mutation.cel_rules"], cwd=ROOT).returncode != 0
            continue
        target = TARGETS[name]
        tests = tests_naming(target)
        where = stage(name, target, tests)
        print(f"== {name}: {len(tests)} test files: {' '.join(tests)}", flush=True)
        names = list(args.only)
        if args.survivors and (where / "score.json").is_file():
            names = json.loads((where / "score.json").read_text())["survivors"]
            print(f"== {name}: re-testing {len(names)} survivors", flush=True)
        run = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *names], cwd=where
        )
        if run.returncode != 0:
            print(f"== {name}: mutmut run exited {run.returncode}", flush=True)
            failed = True
            continue
        result = score(where)
        (where / "score.json").write_text(json.dumps({"target": name, "tests": tests, **result}, indent=1) + "\n")
        print(
            f"== {name}: {result['killed']}/{result['total']} killed ({result['score']} %), "
            f"counts {result['counts']}; survivors in {where / 'score.json'}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
