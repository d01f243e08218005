"""Test tiers: every collected test gets exactly one of the markers ``unit``, ``cluster``, ``chaos`` or ``engine``,
from its folder, or from FILE_TIER where a folder mixes kinds, or from the test's own marker (a file's
``pytestmark`` or ``@pytest.mark.engine`` on one test of a mixed file).

- ``unit``: pure Python in this process or in plain subprocesses; no API server (neither kube-apiserver nor the
  kmock emulator), no SGLang engine and no SGLang worker code (what ``sglang_or_skip()`` imports; it refuses to run
  in a unit test; SGLang's pure-Python adaptive controller, the tuner bench's baseline, is allowed), no
  torch.distributed group of several processes, no Go-built binary.
- ``cluster``: a real kube-apiserver + etcd, the kmock API emulator, helm / kubectl against a server, the OCI
  registry or promtool (the Go-built binaries of ``make tools envtest registry promtool``).
- ``chaos``: tests/chaos (faults injected into the emulator and the real API server).
- ``engine``: real SGLang on the CPU: its engines (tests/sglang_e2e), its code run in this process or in a
  subprocess (patch points, kernels, argument parser, model classes), and multi-process gloo groups (the
  draft group, step control, hang reports) with or without SGLang in them.

``make test-unit`` / ``test-cluster`` / ``test-chaos`` / ``test-engine`` run one tier (``pytest -m TIER``);
``make test`` runs all of them in one session on two pytest-xdist workers, one running the engine tier while the
other runs the rest, a file's tests on one worker (module fixtures such as an engine start once)
(pytest_xdist_make_scheduler), and ends with the time each tier took (TierDurations below).
tests/test_tiers.py checks that each test has one tier and that no unit test uses a cluster, chaos or engine
fixture; it reads the tiers this session gave (COLLECTED) when the session collected the whole suite.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

# The real API server of the whole session (cluster, chaos and engine tests share it): defined here once, since a
# session fixture imported into two conftests is two fixtures, each starting a server of its own.
from tests.k8s.fixtures import apiserver_bed, envtest_environment  # noqa: F401

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "cluster", "chaos", "engine")
TIER_OF = pytest.StashKey[dict]()  # nodeid -> tier, for the durations table
# Every collected test as tests/test_tiers.py reads it: {nodeid, tiers, fixtures}, before `-m` / `-k` deselect.
COLLECTED = pytest.StashKey[list]()
# The running test's tier, in the environment of this process and of what it spawns (runtime_testlib reads it).
TIER_ENV = "SPECDECODE_TEST_TIER"

# A test's tier by the first folder under tests/; tests/*.py and any folder not named here are unit.
FOLDER_TIER = {
    "chaos": "chaos",
    "e2e": "cluster",
    "k8s": "cluster",
    "sglang_e2e": "engine",
}

# Files whose tier is not their folder's (paths relative to tests/).
FILE_TIER = {
    "api/test_cel_parity_real.py": "cluster",  # CEL rules on a real kube-apiserver
    "bench/test_operator_scale_real.py": "cluster",  # the scale bench against a real kube-apiserver
    "chart/test_alerts_promtool.py": "cluster",  # the Go-built promtool
    "chart/test_chart_monitoring_install.py": "cluster",  # helm install into a real kube-apiserver
    "chart/test_crd_upgrade_real.py": "cluster",  # helm upgrade on a real kube-apiserver
    "chart/test_helm_real.py": "cluster",  # helm install / upgrade / uninstall on a real kube-apiserver
    "chart/test_release_oci.py": "cluster",  # the OCI registry, then helm install from it
    "demo/test_demo_kubeconfig.py": "cluster",  # `specdecode demo --kubeconfig` on a real kube-apiserver
    "demo/test_demo_run.py": "cluster",  # `specdecode demo`: the operator on the kmock emulator
    "k8s/test_kube_client.py": "unit",  # the API client against a loopback aiohttp stand-in
    # SGLang's code or multi-process gloo groups in every test (or in a fixture all of a file's tests share)
    "bench/test_trained_smoke.py": "engine",  # the trained head loaded by SGLang's own Eagle3 class
    "runtime/test_capture_hook.py": "engine",  # the capture patch on SGLang's output streamer
    "runtime/test_sglang_contract.py": "engine",  # every patch point and flag against the installed SGLang
    "runtime/test_split_behaviour.py": "engine",  # SGLang's scheduler order and tree widths
    "runtime/test_split_defects.py": "engine",  # SGLang's tree helpers; draft ranks over gloo processes
    "sim/test_gloo_control_preflight.py": "engine",  # step control and preflight on 4 gloo processes
}


# Files start in this tier order (stable within a tier); under xdist the engine unit is handed out first.
RUN_ORDER = ("engine", "chaos", "cluster", "unit")
# Long engine files outside the engine unit, handed out last: whichever worker is free first runs them, so the two
# workers end together (the adaptation campaign on the CPU takes 2-4 minutes).
LAST = {"sglang_e2e/test_adaptation_campaign_cpu.py"}


def _rel(path: Path) -> str | None:
    try:
        return path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None


def tier_of_path(path: Path) -> str | None:
    """The tier the folder rule and FILE_TIER give a test file; None outside tests/."""
    try:
        rel = path.resolve().relative_to(TESTS)
    except ValueError:
        return None
    if rel.as_posix() in FILE_TIER:
        return FILE_TIER[rel.as_posix()]
    return FOLDER_TIER.get(rel.parts[0], "unit") if len(rel.parts) > 1 else "unit"


def explicit_tiers(item: pytest.Item) -> list[str]:
    return [m.name for m in item.iter_markers() if m.name in TIERS]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = config.stash.setdefault(TIER_OF, {})
    for item in items:
        marked = explicit_tiers(item)  # a file's own pytestmark wins over the tables
        if not marked:
            tier = tier_of_path(item.path)
            if tier is not None:
                item.add_marker(getattr(pytest.mark, tier))
                marked = [tier]
        tiers[item.nodeid] = marked[0] if len(marked) == 1 else "+".join(marked) if marked else "none"
    heaviest: dict[Path, int] = {}
    for item in items:
        rank = min((RUN_ORDER.index(t) for t in explicit_tiers(item) if t in RUN_ORDER), default=len(RUN_ORDER))
        if _rel(item.path) in LAST:
            rank = len(RUN_ORDER) + 1
        heaviest[item.path] = min(heaviest.get(item.path, rank), rank)
    items.sort(key=lambda item: heaviest[item.path])  # whole files move: a module's fixtures stay set up once
    config.stash[COLLECTED] = [
        dict(nodeid=item.nodeid, tiers=explicit_tiers(item), fixtures=sorted(set(getattr(item, "fixturenames", ()))))
        for item in items
    ]


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under ``make test`` (two xdist workers): every engine-tier file in one work unit, any other file in a unit of
    its own. SGLang engines on the CPU keep both cores busy, so two engine tests side by side take as long as one
    after the other; the cluster and chaos tiers mostly wait on API servers. One worker runs the engine tier while
    the other runs everything else, and the engine unit goes first (RUN_ORDER, no reordering) so it is not the tail.
    """
    from xdist.scheduler import LoadScopeScheduling  # lazy: a pytest-xdist hook, called only under xdist

    class EngineApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            alone = _rel(TESTS.parent / path) in LAST
            return "engine tier" if tier_of_path(TESTS.parent / path) == "engine" and not alone else path

    config.option.loadscopereorder = False  # keep RUN_ORDER: the engine unit first
    return EngineApart(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The test's tier in TIER_ENV while it runs (its fixtures' set-up and tear-down included)."""
    marked = explicit_tiers(item)
    before = os.environ.get(TIER_ENV)
    os.environ[TIER_ENV] = marked[0] if len(marked) == 1 else "none"
    try:
        return (yield)
    finally:
        if before is None:
            os.environ.pop(TIER_ENV, None)
        else:
            os.environ[TIER_ENV] = before


def tier_of_report(report: pytest.TestReport) -> str:
    marked = [t for t in TIERS if t in report.keywords]
    return "+".join(marked) if marked else "none"


class TierDurations:
    """Sums setup + call + teardown of each test by tier and prints "tier / tests / seconds" at the end, then the
    session's wall time."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)
        self.nodeids: dict[str, set[str]] = defaultdict(set)
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under xdist this runs in the controller, which collects nothing: the tier comes with the report's markers.
        tier = self.config.stash.get(TIER_OF, {}).get(report.nodeid) or tier_of_report(report)
        self.seconds[tier] += report.duration
        self.nodeids[tier].add(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.nodeids:
            return
        order = [t for t in TIERS if t in self.nodeids] + sorted(set(self.nodeids) - set(TIERS))
        terminalreporter.write_sep("=", "durations per tier (setup + call + teardown)")
        terminalreporter.write_line(f"{'tier':<10}{'tests':>8}{'seconds':>10}")
        for tier in order:
            terminalreporter.write_line(f"{tier:<10}{len(self.nodeids[tier]):>8}{self.seconds[tier]:>10.1f}")
        total_tests = sum(len(n) for n in self.nodeids.values())
        terminalreporter.write_line(f"{'total':<10}{total_tests:>8}{sum(self.seconds.values()):>10.1f}")
        # With several workers the tiers overlap: the session's wall time is what a developer waits.
        terminalreporter.write_line(f"{'wall':<10}{'':>8}{time.monotonic() - self.started:>10.1f}")


def pytest_configure(config: pytest.Config) -> None:
    # pyproject.toml registers the tiers; a configuration without them (the mutation runner's) gets them here
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for tier in TIERS:
        if tier not in registered:
            config.addinivalue_line("markers", f"{tier}: a test tier (tests/conftest.py)")
    if not config.pluginmanager.has_plugin("tier-durations"):
        config.pluginmanager.register(TierDurations(config), "tier-durations")
