"""Dashboard and alerts use only metric names of the metrics contract; the PrometheusRule matches the
prometheus-operator CRD; the dashboard ConfigMap is provisionable."""

import json
import re
from pathlib import Path

import pytest

from tests.chart.chartlib import CHART, COMBOS, one, render
from tests.chart.exported_metrics import exported, runtime_names
from tests.upstream_schemas import validate_custom

ROOT_DIR = Path(__file__).resolve().parents[2]
# What the runtime, the operator and SGLang really export (read from their exporters: tests/chart/exported_metrics.py)
CONTRACT = exported()
PROMQL_WORDS = {
    "sum",
    "avg",
    "max",
    "min",
    "count",
    "rate",
    "irate",
    "increase",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "scalar",
    "vector",
    "histogram_quantile",
    "clamp_min",
    "clamp_max",
    "abs",
    "topk",
    "bottomk",
    "delta",
    "deriv",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "label_replace",
    "bool",
    "offset",
    "absent",
    "time",
    "quantile",
}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, labels or literals."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", e)  # grouping labels
    e = re.sub(r"\$\{?\w+\}?", "", e)  # Grafana variables
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e))
    return {n for n in names if n not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]?", n)}


def dashboard_exprs() -> list[str]:
    exprs = []
    for path in (CHART / "dashboards").glob("*.json"):
        dash = json.loads(path.read_text())
        for panel in dash["panels"]:
            exprs += [t["expr"] for t in panel.get("targets", [])]
        for var in dash["templating"]["list"]:
            q = var.get("query")
            if isinstance(q, dict):
                m = re.search(r"label_values\((.*),\s*\w+\)$", q["query"])
                exprs.append(m.group(1))
    return exprs


def rule_exprs() -> list[str]:
    rule = one(render(COMBOS["monitoring-on"]), "PrometheusRule")
    return [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]


def test_extractor_finds_names_and_flags_unknown_ones():
    assert metric_names('sum by (bucket) (rate(specdecode_verify_cycles_total{job=~"$job"}[5m])) / 2') == {
        "specdecode_verify_cycles_total"
    }
    assert metric_names("1 + avg(sglang:spec_accept_length) < 1.3") == {"sglang:spec_accept_length"}
    assert metric_names("rate(specdecode_verify_cycle_total[5m])") - CONTRACT == {"specdecode_verify_cycle_total"}


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_expression_uses_only_contract_metrics(source):
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    assert exprs
    used = set().union(*(metric_names(e) for e in exprs))
    assert used and used <= CONTRACT, sorted(used - CONTRACT)


def test_dashboard_covers_the_required_views():
    used = set().union(*(metric_names(e) for e in dashboard_exprs()))
    for name in (
        "specdecode_tokens_generated_total",
        "sglang:spec_accept_length",
        "specdecode_position_attempts_total",
        "specdecode_cycle_seconds_sum",
        "specdecode_num_steps",
        "specdecode_tuner_decisions_total",
    ):
        assert name in used
    dash = json.loads((CHART / "dashboards" / "specdecode-overview.json").read_text())
    assert any(p["type"] == "heatmap" for p in dash["panels"])
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_exported_names_come_from_the_exporters():
    """Every name of the runtime's metric contract is among the names its exporter declares (a renamed constant or
    a dropped metric changes the set the rules and panels are checked against)."""
    from specdecode_runtime.contract import metric_names as metrics

    bases = {re.sub(r"_(total|sum|count|bucket)$", "", n) for n in runtime_names()}
    assert {
        getattr(metrics, n)
        for n in (
            "VERIFY_CYCLES",
            "POSITION_ATTEMPTS",
            "POSITION_ACCEPTED",
            "CYCLE_SECONDS",
            "REQUESTS_VERIFIED",
            "NUM_STEPS",
            "TOKENS_GENERATED",
        )
    } <= bases
    assert "specdecode_requests_verified_total" in CONTRACT and "specdecode_operator_reconciles_total" in CONTRACT
    assert "specdecode_verify_cycle_total" not in CONTRACT


def test_prometheus_rule_matches_the_upstream_crd_and_has_the_alerts():
    rule = one(render(COMBOS["monitoring-on"]), "PrometheusRule")
    validate_custom(rule)
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"SpecDecodeAcceptLengthCollapse", "SpecDecodeTunerRollback", "SpecDecodeReconcileErrors"} <= set(alerts)
    assert "< 1.5" in alerts["SpecDecodeAcceptLengthCollapse"]["expr"]  # values' acceptLengthFloor
    for r in alerts.values():
        assert r["labels"]["severity"] in {"warning", "critical"} and r["annotations"]["summary"]
        assert "{{ $labels" in r["annotations"]["summary"] or "$labels" not in r["annotations"]["summary"]


def test_broken_rule_is_rejected_by_the_upstream_schema():
    rule = one(render(COMBOS["monitoring-on"]), "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(ValueError, match=r"\$\.spec\.groups\[0\]\.rules\[0\]\.for"):
        validate_custom(rule)


def test_dashboard_configmap_carries_the_json_and_the_sidecar_label():
    cm = one(render(COMBOS["monitoring-on"]), "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["specdecode-overview.json"]) == json.loads(
        (CHART / "dashboards" / "specdecode-overview.json").read_text()
    )


# ---- the metric table (contract/metric_names.py) drives the exporter; rules, panels and docs name only its rows --
DOCS = [
    ROOT_DIR / "README.md",
    *sorted((ROOT_DIR / "docs").glob("*.md")),
    *sorted(CHART.rglob("*.yaml")),
    *sorted(CHART.rglob("*.json")),
]
PACKAGES = {"specdecode_runtime", "specdecode_operator"}  # module names, not metrics


def _table_and_operator_names() -> set[str]:
    from specdecode_runtime.contract.metric_names import METRICS, sample_names
    from tests.chart.exported_metrics import operator_names

    operator = operator_names()
    bases = {re.sub(r"_(total|sum|count|bucket)$", "", n) for n in operator}
    return set(METRICS) | sample_names() | operator | bases


def unknown_metric_mentions(text: str, known: set[str]) -> set[str]:
    """``specdecode_*`` metric names in a text that neither the metric table nor the operator's exporter has
    (module paths such as ``specdecode_runtime.contract`` are not metric names)."""
    found = {m.group(1) for m in re.finditer(r"\b(specdecode_[a-z0-9_]+)\b(?![./\w])", text)}
    return {n for n in found if n not in PACKAGES and n not in known}


def test_the_runtime_exporter_declares_exactly_the_metric_table():
    from prometheus_client import CollectorRegistry

    from specdecode_runtime.contract.metric_names import METRICS, sample_names
    from specdecode_runtime.metrics import SpecMetrics

    assert runtime_names() == sample_names()
    registry = CollectorRegistry()
    metrics = SpecMetrics(registry=registry, const_labels={"simulated": "true"})
    metrics.record_cycle(batch_size=3, steps=2, accepted_per_req=[1, 2, 0], phase_seconds={"verify": 0.01})
    for family in registry.collect():
        row = METRICS[family.name]
        assert family.documentation == row.help and family.type == row.kind
        for sample in family.samples:
            assert set(sample.labels) <= {*row.labels, "simulated", "quantile"}, (family.name, sample.labels)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT_DIR)))
def test_rules_panels_and_docs_name_only_metrics_of_the_table(path):
    bad = unknown_metric_mentions(path.read_text(), _table_and_operator_names())
    assert not bad, f"{path.relative_to(ROOT_DIR)} names metrics the table lacks: {sorted(bad)}"


def test_a_planted_unknown_metric_is_reported():
    known = _table_and_operator_names()
    text = "rate(specdecode_verify_cycles_total[5m]) / rate(specdecode_verify_cycle_total[5m]); see specdecode_runtime.metrics"
    assert unknown_metric_mentions(text, known) == {"specdecode_verify_cycle_total"}
