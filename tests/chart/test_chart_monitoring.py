"""Dashboard and alerts use only metric names of the metrics contract; the PrometheusRule matches the
prometheus-operator CRD; the dashboard ConfigMap is provisionable; every alert links its section of
docs/runbooks.md; the ServiceMonitor authenticates with a token from a Secret and verifies a cert-manager
certificate with its CA; ServiceMonitor and PrometheusRule are left out where the cluster lacks their CRDs."""

import json
import re
from pathlib import Path

import pytest

from tests.chart.chartlib import CHART, COMBOS, of_kind, one, render
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


# ---- runbooks: every alert links its section of docs/runbooks.md -------------------------------------------------
RUNBOOKS = ROOT_DIR / "docs" / "runbooks.md"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_anchors(text: str) -> set[str]:
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def alert_rules(values: dict) -> dict[str, dict]:
    rule = one(render(values), "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


def missing_runbooks(alerts: dict[str, dict], base: str, anchors: set[str]) -> list[str]:
    out = []
    for name, rule in alerts.items():
        url = rule.get("annotations", {}).get("runbook_url")
        if not url:
            out.append(f"{name}: no runbook_url")
        elif not url.startswith(base + "#"):
            out.append(f"{name}: {url} is not under {base}")
        elif url.split("#", 1)[1] not in anchors:
            out.append(f"{name}: docs/runbooks.md has no section #{url.split('#', 1)[1]}")
    return out


def test_every_alert_links_its_runbook_section():
    base = yaml_values()["metrics"]["prometheusRule"]["runbookBaseURL"]
    assert base.endswith("/docs/runbooks.md")
    alerts = alert_rules(COMBOS["monitoring-on"])
    assert len(alerts) >= 8
    assert missing_runbooks(alerts, base, runbook_anchors(RUNBOOKS.read_text())) == []
    # the base URL is a value: a runbook copy of one's own
    own = "https://wiki.example.com/sre/specdecode"
    metrics = COMBOS["monitoring-on"]["metrics"]
    values = {"metrics": {**metrics, "prometheusRule": {**metrics["prometheusRule"], "runbookBaseURL": own}}}
    urls = {r["annotations"]["runbook_url"] for r in alert_rules(values).values()}
    assert urls == {f"{own}#{a.lower()}" for a in alerts}


def test_a_missing_runbook_link_or_section_is_reported():
    alerts = alert_rules(COMBOS["monitoring-on"])
    base = yaml_values()["metrics"]["prometheusRule"]["runbookBaseURL"]
    anchors = runbook_anchors(RUNBOOKS.read_text())
    del alerts["SpecDecodeNoTokens"]["annotations"]["runbook_url"]
    assert missing_runbooks(alerts, base, anchors) == ["SpecDecodeNoTokens: no runbook_url"]
    anchors.discard("specdecodetunerrollback")
    assert "SpecDecodeTunerRollback: docs/runbooks.md has no section #specdecodetunerrollback" in missing_runbooks(
        alerts, base, anchors
    )
    assert github_anchor("SpecDecodeDeploymentNotReady") == "specdecodedeploymentnotready"


def yaml_values() -> dict:
    import yaml

    return yaml.safe_load((CHART / "values.yaml").read_text())


# ---- the ServiceMonitor: credentials from a Secret, the CA of the certificate, no deprecated fields ---------------
MONITOR = {"metrics": {"enabled": True, "port": 8080, "assumeMonitoringAPI": True, "serviceMonitor": {"enabled": True}}}


def with_metrics(**metrics) -> dict:
    out = {"metrics": {**MONITOR["metrics"], **metrics}}
    if "serviceMonitor" in metrics:
        out["metrics"]["serviceMonitor"] = {"enabled": True, **metrics["serviceMonitor"]}
    return out


def endpoint(docs: list[dict]) -> dict:
    (ep,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    return ep


def scraper_objects(docs: list[dict]) -> list[dict]:
    return [
        d for d in docs if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "metrics-scraper"
    ]


def test_the_servicemonitor_authenticates_with_the_charts_scraper_token():
    docs = render(MONITOR)
    ep = endpoint(docs)
    assert "bearerTokenFile" not in json.dumps(docs) and "bearerTokenSecret" not in ep
    assert ep["scheme"] == "https" and ep["honorLabels"] is True
    assert ep["tlsConfig"] == {"insecureSkipVerify": True}  # the self-signed certificate: the token decides
    cred = ep["authorization"]
    assert cred["type"] == "Bearer"
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == cred["credentials"]["name"])
    monitor_ns = one(docs, "ServiceMonitor")["metadata"]["namespace"]
    assert secret["metadata"]["namespace"] == monitor_ns  # the prometheus-operator reads it beside the monitor
    assert secret["type"] == "kubernetes.io/service-account-token" and cred["credentials"]["key"] == "token"
    sa = next(d for d in of_kind(docs, "ServiceAccount") if d["metadata"]["name"].endswith("-metrics-scraper"))
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": sa["metadata"]["name"]}
    assert sa["automountServiceAccountToken"] is False
    # least privilege: bound to the metrics-reader ClusterRole (get /metrics) and to nothing else
    bindings = [
        b
        for b in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding")
        if any(s.get("name") == sa["metadata"]["name"] for s in b["subjects"])
    ]
    assert len(bindings) == 1 and bindings[0]["roleRef"]["name"].endswith("-metrics-reader")
    reader = next(r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"] == bindings[0]["roleRef"]["name"])
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert {d["kind"] for d in scraper_objects(docs)} == {"ServiceAccount", "Secret", "ClusterRoleBinding"}


def test_a_scraper_secret_of_ones_own_creates_no_identity():
    docs = render(with_metrics(serviceMonitor={"authorization": {"secretName": "prom-token", "key": "jwt"}}))
    assert endpoint(docs)["authorization"]["credentials"] == {"name": "prom-token", "key": "jwt"}
    assert scraper_objects(docs) == []
    # and without RBAC of the chart's: the identity and its Secret, but no binding
    docs = render({**MONITOR, "rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops"}})
    assert {d["kind"] for d in scraper_objects(docs)} == {"ServiceAccount", "Secret"}


def test_the_cert_manager_certificate_is_verified_with_its_ca_under_the_service_name():
    docs = render(with_metrics(certSecret="sd-metrics-tls"))
    tls = endpoint(docs)["tlsConfig"]
    service = next(s for s in of_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics"))
    assert tls == {
        "serverName": f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc",
        "ca": {"secret": {"name": "sd-metrics-tls", "key": "ca.crt"}},
    }
    # the operator serves that Secret, mounted as a whole volume (a subPath mount would never see a renewal)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "sd-metrics-tls"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["SPECDECODE_METRICS_CERT_DIR"] == mount["mountPath"]
    # a public CA: Prometheus' trust store; another name in the certificate
    tls = endpoint(
        render(
            with_metrics(
                certSecret="sd-metrics-tls", serviceMonitor={"tlsConfig": {"caKey": "", "serverName": "m.example.com"}}
            )
        )
    )["tlsConfig"]
    assert tls == {"serverName": "m.example.com"}


def test_plain_http_metrics_scrape_without_credentials():
    docs = render(with_metrics(secure=False))
    ep = endpoint(docs)
    assert not {"scheme", "authorization", "tlsConfig"} & set(ep)
    assert scraper_objects(docs) == []


# ---- capability guards: no prometheus-operator CRDs, no failed install ----------------------------------------------
def test_without_the_monitoring_api_nothing_of_its_kinds_is_rendered_and_notes_say_so():
    from tests.chart.chartlib import render_notes

    values = {
        "metrics": {
            "enabled": True,
            "port": 8080,
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
        },
        "dashboards": {"enabled": True},
    }
    docs = render(values)  # offline: the render knows only Kubernetes' own APIs
    kinds = {d["kind"] for d in docs}
    assert not {"ServiceMonitor", "PrometheusRule"} & kinds
    assert scraper_objects(docs) == []
    assert "ConfigMap" in kinds  # the dashboard is a ConfigMap: it needs no CRD
    notes = render_notes(values)
    assert "no ServiceMonitor was installed" in notes and "no PrometheusRule was installed" in notes
    forced = render({**values, "metrics": {**values["metrics"], "assumeMonitoringAPI": True}})
    assert {"ServiceMonitor", "PrometheusRule"} <= {d["kind"] for d in forced}
    assert "was installed" not in render_notes(
        {**values, "metrics": {**values["metrics"], "assumeMonitoringAPI": True}}
    )


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"prometheusRule": {"runbookBaseURL": "docs/runbooks.md"}}, "/metrics/prometheusRule/runbookBaseURL"),
        ({"prometheusRule": {"notReadyFor": "half an hour"}}, "/metrics/prometheusRule/notReadyFor"),
        ({"serviceMonitor": {"authorization": {"secretNam": "x"}}}, "secretNam"),
        ({"serviceMonitor": {"tlsConfig": {"insecureSkipVerify": True}}}, "insecureSkipVerify"),
        ({"assumeMonitoringAPI": "yes"}, "/metrics/assumeMonitoringAPI"),
    ],
    ids=["runbook-not-a-url", "bad-duration", "authorization-typo", "tls-unknown-key", "assume-not-boolean"],
)
def test_bad_monitoring_values_fail_with_their_path(values, needle):
    from tests.chart.chartlib import RELEASE, chart

    with pytest.raises(Exception) as err:
        chart().render({"metrics": {"enabled": True, "port": 8080, **values}}, name=RELEASE, namespace="ns")
    assert needle in str(err.value), str(err.value)
