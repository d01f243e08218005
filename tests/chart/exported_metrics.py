"""The sample names the product really exports, read from the exporters themselves: the runtime's contract metrics
(``SpecMetrics``), the operator's and tuner's (``OperatorMetrics``), and the SGLang series the dashboard reads (from
the installed SGLang's metrics collector). A rule or panel naming anything else reads a series that never exists."""

from __future__ import annotations

import importlib.util
import pathlib
import re
from functools import lru_cache

from prometheus_client import CollectorRegistry

# prometheus-client's exposition: the sample names each metric type produces
SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "summary": ("_sum", "_count"),
    "histogram": ("_bucket", "_sum", "_count"),
}
# The SGLang series the dashboard shows beside ours (the simulator serves them too)
SGLANG_USED = ("sglang:spec_accept_length", "sglang:gen_throughput")


def _names(registry: CollectorRegistry) -> set[str]:
    out = set()
    for family in registry.collect():
        out.update(family.name + s for s in SUFFIXES[family.type])
    return out


@lru_cache(maxsize=1)
def runtime_names() -> set[str]:
    from specdecode_runtime.metrics import SpecMetrics

    registry = CollectorRegistry()
    SpecMetrics(registry=registry)
    return _names(registry)


@lru_cache(maxsize=1)
def operator_names() -> set[str]:
    from specdecode_operator.metrics import OperatorMetrics

    return _names(OperatorMetrics().registry)


@lru_cache(maxsize=1)
def sglang_gauges() -> set[str]:
    """Gauges SGLang's metrics collector declares (``Gauge(name="sglang:..."``); empty when SGLang is absent."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return set()
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    found = set()
    for path in (root / "srt").rglob("*collector*.py"):
        found.update(re.findall(r'Gauge\(\s*name="(sglang:[a-z0-9_]+)"', path.read_text()))
    return found


def exported() -> set[str]:
    """Every name a rule or panel may read. SGLang's are checked against SGLang where it is installed."""
    sglang = sglang_gauges() or set(SGLANG_USED)
    return runtime_names() | operator_names() | {n for n in SGLANG_USED if n in sglang}
