"""The chart's alerts and dashboard queries checked and evaluated by the real promtool.

- ``promtool check rules`` on the rendered PrometheusRule, and on every dashboard expression (Grafana variables
  substituted) as a recording rule: all of them parse with Prometheus' own PromQL parser.
- ``promtool test rules``: for every alert, input series on which it fires (with the labels and the annotation text
  a receiver gets) and series on which it stays quiet; the dashboard's accept-length panels evaluated on the same
  series. The series' rates come from the parameters below, and so do the expected values.

The accept-length series run at batch BATCH: a formula that divides accepted tokens by verify cycles instead of by
requests verified reads 1 + BATCH x (accepted per request) and misses the collapse; these tests fail on it.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.chart.chartlib import CHART, one, render
from tests.chart.promtool import run

FLOOR = 1.3  # metrics.prometheusRule.acceptLengthFloor under test
FOR_MINUTES = 10  # metrics.prometheusRule.for under test
WINDOW_MINUTES = 10  # the rules' rate windows: a rate reaches its full value only once its window is filled
NOT_READY_MINUTES = 30  # metrics.prometheusRule.notReadyFor under test
VALUES = {
    "metrics": {
        "assumeMonitoringAPI": True,  # rendered offline: no cluster to report monitoring.coreos.com/v1
        "prometheusRule": {
            "enabled": True,
            "acceptLengthFloor": FLOOR,
            "for": f"{FOR_MINUTES}m",
            "notReadyFor": f"{NOT_READY_MINUTES}m",
        },
    }
}
MINUTES = 40  # length of every input series (1 sample per minute); covers window + for + 5 minutes
# Runtime traffic: cycles per minute at batch BATCH (powers of two keep the ratios exact in floating point)
CYCLES_PER_MIN = 64
BATCH = 4
COLLAPSED = 0.25  # accepted draft tokens per request: accept length 1.25, under the floor
HEALTHY = 2.0  # accept length 3.0
RUNTIME = {"namespace": "llm"}
OPERATOR = {"namespace": "specdecode-system", "job": "specdecode-operator"}


def _selector(labels: dict) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def series(name: str, labels: dict, per_minute: float) -> dict:
    """A counter rising by ``per_minute`` each minute, from 0."""
    return {"series": name + _selector(labels), "values": f"0+{per_minute:g}x{MINUTES}"}


def traffic(job: str, bucket: str, batch: int, accepted_per_request: float) -> list[dict]:
    labels = {**RUNTIME, "job": job, "bucket": bucket}
    requests = CYCLES_PER_MIN * batch
    return [
        series("specdecode_verify_cycles_total", labels, CYCLES_PER_MIN),
        series("specdecode_requests_verified_total", labels, requests),
        series("specdecode_position_accepted_total", {**labels, "position": "1"}, requests * accepted_per_request),
        series("specdecode_tokens_generated_total", {**RUNTIME, "job": job}, requests * (1 + accepted_per_request)),
    ]


# The operator's condition gauge as Prometheus stores it from the chart's ServiceMonitor (honorLabels: the object's
# namespace and name, beside the target's job, instance and pod)
OPERATOR_TARGET = {"job": "sd-specdecode-operator-metrics", "endpoint": "metrics", "service": "sd-specdecode-operator"}
STATUSES = ("True", "False", "Unknown")


def condition(name: str, ctype: str, values: str | dict[str, str], pod: str = "sd-specdecode-operator-0") -> list[dict]:
    """``specdecode_deployment_condition`` of deployment ``llm/<name>``: ``values`` is the status held throughout, or
    promtool value notation per status (a flip)."""
    if isinstance(values, str):
        values = {s: f"{int(s == values)}x{MINUTES}" for s in STATUSES}
    target = {**OPERATOR_TARGET, "pod": pod, "instance": f"{pod}:8080"}
    return [
        {
            "series": "specdecode_deployment_condition"
            + _selector({**RUNTIME, "name": name, "type": ctype, "status": status, **target}),
            "values": values[status],
        }
        for status in STATUSES
    ]


def deployment(name: str, ready: str = "True", degraded: str = "False", stalled: str = "False", **extra) -> list:
    out = condition(name, "Ready", ready) + condition(name, "Degraded", degraded) + condition(name, "Stalled", stalled)
    for ctype, status in extra.items():
        out += condition(name, ctype, status)
    return out


def rule_spec() -> dict:
    return one(render(VALUES), "PrometheusRule")["spec"]


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in rule_spec()["groups"] for r in g["rules"] if "alert" in r}


def annotations(alert: str, labels: dict, value: float) -> dict:
    """The rule's annotation templates filled in as Prometheus does, for the expected labels and value."""
    out = {}
    for key, text in alerts()[alert]["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        text = re.sub(r'\{\{ \$value \| printf "%\.(\d)f" \}\}', lambda m: f"{value:.{m.group(1)}f}", text)
        assert "{{" not in text, f"{alert}.{key}: a template this test does not fill: {text}"
        out[key] = text
    return out


def firing(alert: str, labels: dict, value: float) -> dict:
    severity = alerts()[alert]["labels"]["severity"]
    return {"exp_labels": {**labels, "severity": severity}, "exp_annotations": annotations(alert, labels, value)}


def alert_tests() -> list[dict]:
    late = f"{WINDOW_MINUTES + FOR_MINUTES + 5}m"  # rate window filled, then past the `for` duration
    early = f"{FOR_MINUTES // 2}m"  # true already, but pending: nothing fires
    collapse = 1 + COLLAPSED
    api_hot, api_cool = 12, 3  # API errors per minute: 0.2/s over the 0.1/s threshold, 0.05/s under it
    return [
        {
            "name": "accept length: collapse at batch 4 fires, healthy acceptance stays quiet",
            "input_series": traffic("llama", "2-7", BATCH, COLLAPSED) + traffic("good", "2-7", BATCH, HEALTHY),
            "alert_rule_test": [
                {"eval_time": early, "alertname": "SpecDecodeAcceptLengthCollapse", "exp_alerts": []},
                {
                    "eval_time": late,
                    "alertname": "SpecDecodeAcceptLengthCollapse",
                    "exp_alerts": [firing("SpecDecodeAcceptLengthCollapse", {**RUNTIME, "job": "llama"}, collapse)],
                },
                {"eval_time": late, "alertname": "SpecDecodeNoTokens", "exp_alerts": []},
            ],
        },
        {
            "name": "no tokens: cycles without tokens fire, cycles with tokens stay quiet",
            "input_series": [
                series("specdecode_verify_cycles_total", {**RUNTIME, "job": "stuck", "bucket": "1"}, 60),
                series("specdecode_tokens_generated_total", {**RUNTIME, "job": "stuck"}, 0),
            ]
            + traffic("good", "2-7", BATCH, HEALTHY),
            "alert_rule_test": [
                {"eval_time": early, "alertname": "SpecDecodeNoTokens", "exp_alerts": []},
                {
                    "eval_time": late,
                    "alertname": "SpecDecodeNoTokens",
                    "exp_alerts": [firing("SpecDecodeNoTokens", {**RUNTIME, "job": "stuck"}, 0)],
                },
            ],
        },
        {
            "name": "stalled: a blocked rollout and an invalid spec fire once each (not also as Degraded/NotReady)",
            "input_series": deployment("blocked", ready="False", stalled="True")
            + deployment("invalid", ready="False", degraded="True", stalled="True")
            + deployment("healthy")
            # a leadership handover: the old and the new leader both exported the object for a while
            + condition("blocked", "Stalled", "True", pod="sd-specdecode-operator-1"),
            "alert_rule_test": [
                {"eval_time": early, "alertname": "SpecDecodeDeploymentStalled", "exp_alerts": []},
                {
                    "eval_time": late,
                    "alertname": "SpecDecodeDeploymentStalled",
                    "exp_alerts": [
                        firing("SpecDecodeDeploymentStalled", {**RUNTIME, "name": "blocked"}, 1),
                        firing("SpecDecodeDeploymentStalled", {**RUNTIME, "name": "invalid"}, 1),
                    ],
                },
                {"eval_time": late, "alertname": "SpecDecodeDeploymentDegraded", "exp_alerts": []},
                {"eval_time": f"{MINUTES}m", "alertname": "SpecDecodeDeploymentNotReady", "exp_alerts": []},
            ],
        },
        {
            "name": "degraded: API errors past retries fire, a healthy deployment stays quiet",
            "input_series": deployment("apierrors", ready="False", degraded="True") + deployment("healthy"),
            "alert_rule_test": [
                {"eval_time": early, "alertname": "SpecDecodeDeploymentDegraded", "exp_alerts": []},
                {
                    "eval_time": late,
                    "alertname": "SpecDecodeDeploymentDegraded",
                    "exp_alerts": [firing("SpecDecodeDeploymentDegraded", {**RUNTIME, "name": "apierrors"}, 1)],
                },
                {"eval_time": f"{MINUTES}m", "alertname": "SpecDecodeDeploymentNotReady", "exp_alerts": []},
            ],
        },
        {
            "name": "not ready: fires after notReadyFor; paused, ready and became-ready deployments stay quiet",
            "input_series": deployment("loading", ready="False")
            + deployment("unknown", ready="Unknown")
            + deployment("paused", ready="False", Paused="True")
            + deployment("healthy")
            + condition("warm", "Ready", {"True": "0x19 1x20", "False": "1x19 0x20", "Unknown": f"0x{MINUTES}"}),
            "alert_rule_test": [
                {
                    "eval_time": f"{NOT_READY_MINUTES - 5}m",
                    "alertname": "SpecDecodeDeploymentNotReady",
                    "exp_alerts": [],
                },
                {
                    "eval_time": f"{NOT_READY_MINUTES + 5}m",
                    "alertname": "SpecDecodeDeploymentNotReady",
                    "exp_alerts": [
                        firing("SpecDecodeDeploymentNotReady", {**RUNTIME, "name": "loading"}, 1),
                        firing("SpecDecodeDeploymentNotReady", {**RUNTIME, "name": "unknown"}, 1),
                    ],
                },
            ],
        },
        {
            "name": "tuner rollback: one rollback fires at once and clears 30 minutes later",
            "input_series": [
                {"series": "specdecode_tuner_rollbacks_total" + _selector(OPERATOR), "values": "0 0 0 1+0x37"}
            ],
            "alert_rule_test": [
                {"eval_time": "2m", "alertname": "SpecDecodeTunerRollback", "exp_alerts": []},
                {
                    "eval_time": "5m",
                    "alertname": "SpecDecodeTunerRollback",
                    "exp_alerts": [firing("SpecDecodeTunerRollback", {"namespace": OPERATOR["namespace"]}, 1)],
                },
                {"eval_time": "35m", "alertname": "SpecDecodeTunerRollback", "exp_alerts": []},
            ],
        },
        {
            "name": "reconcile errors: errors fire, only successful passes stay quiet",
            "input_series": [
                series("specdecode_operator_reconciles_total", {**OPERATOR, "result": "error"}, 6),
                series("specdecode_operator_reconciles_total", {**OPERATOR, "job": "healthy", "result": "ok"}, 60),
                series("specdecode_operator_reconciles_total", {**OPERATOR, "job": "healthy", "result": "error"}, 0),
            ],
            "alert_rule_test": [
                {"eval_time": early, "alertname": "SpecDecodeReconcileErrors", "exp_alerts": []},
                {
                    "eval_time": late,
                    "alertname": "SpecDecodeReconcileErrors",
                    "exp_alerts": [firing("SpecDecodeReconcileErrors", OPERATOR, 6 / 60)],
                },
            ],
        },
        {
            "name": "API errors: over 0.1/s fires per code, under it stays quiet",
            "input_series": [
                series("specdecode_operator_api_errors_total", {**OPERATOR, "code": "429", "verb": "patch"}, api_hot),
                series("specdecode_operator_api_errors_total", {**OPERATOR, "code": "500", "verb": "get"}, api_cool),
            ],
            "alert_rule_test": [
                {"eval_time": early, "alertname": "SpecDecodeOperatorAPIErrors", "exp_alerts": []},
                {
                    "eval_time": late,
                    "alertname": "SpecDecodeOperatorAPIErrors",
                    "exp_alerts": [firing("SpecDecodeOperatorAPIErrors", {**OPERATOR, "code": "429"}, api_hot / 60)],
                },
            ],
        },
    ]


GRAFANA_VARS = {"$namespace": ".*", "$job": ".*", "$__rate_interval": "5m"}


def dashboard_panels() -> list[tuple[str, str]]:
    """(panel title, expression with Grafana's variables substituted) for every query of every dashboard."""
    out = []
    for path in sorted((CHART / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for var, value in GRAFANA_VARS.items():
                    expr = expr.replace(var, value)
                assert "$" not in expr, f"{panel['title']}: a Grafana variable this test does not know: {expr}"
                out.append((panel["title"], expr))
    return out


def panel_expr(title_prefix: str) -> str:
    (expr,) = [e for t, e in dashboard_panels() if t.startswith(title_prefix) and "specdecode_" in e]
    return expr


def dashboard_tests() -> list[dict]:
    at = f"{WINDOW_MINUTES + 5}m"
    return [
        {
            "name": "dashboard accept-length panels: tokens per request, whatever the batch",
            "input_series": traffic("llama", "2-7", BATCH, COLLAPSED) + traffic("good", "8-31", 2 * BATCH, HEALTHY),
            "promql_expr_test": [
                {
                    "expr": panel_expr("Accept length"),
                    "eval_time": at,
                    "exp_samples": [
                        {"labels": _selector({**RUNTIME, "job": "llama"}), "value": 1 + COLLAPSED},
                        {"labels": _selector({**RUNTIME, "job": "good"}), "value": 1 + HEALTHY},
                    ],
                },
                {
                    "expr": panel_expr("Acceptance by batch-size bucket"),
                    "eval_time": at,
                    "exp_samples": [
                        {"labels": _selector({"bucket": "2-7"}), "value": 1 + COLLAPSED},
                        {"labels": _selector({"bucket": "8-31"}), "value": 1 + HEALTHY},
                    ],
                },
            ],
        }
    ]


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_spec(), sort_keys=False))
    return path


def test_the_alerting_rules_pass_promtool_check(rules_file):
    done = run("check", "rules", str(rules_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_every_alert_fires_when_it_should_and_stays_quiet_otherwise(rules_file, tmp_path):
    tests = alert_tests()
    assert {t["alertname"] for case in tests for t in case["alert_rule_test"]} == set(alerts()), (
        "every alert of the chart needs a promtool test here"
    )
    for case in tests:  # each alert is tested both firing and quiet
        assert any(t["exp_alerts"] for t in case["alert_rule_test"])
        assert any(not t["exp_alerts"] for t in case["alert_rule_test"])
    spec = tmp_path / "alerts.test.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules_file.name],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", **case} for case in tests],
            },
            sort_keys=False,
        )
    )
    done = run("test", "rules", spec.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_expression_parses_and_the_accept_length_panels_compute_per_request(tmp_path):
    panels = dashboard_panels()
    assert panels
    recording = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:query_{i}", "expr": expr} for i, (_title, expr) in enumerate(panels)],
            }
        ]
    }
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump(recording, sort_keys=False))
    done = run("check", "rules", str(tmp_path / "dashboard.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "empty.yaml").write_text(yaml.safe_dump({"groups": []}))
    spec = tmp_path / "dashboard.test.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "rule_files": ["empty.yaml"],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", **case} for case in dashboard_tests()],
            },
            sort_keys=False,
        )
    )
    done = run("test", "rules", spec.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_series_discriminate_per_request_from_per_cycle():
    """The input above would hide a per-cycle formula's error if BATCH were 1: keep it where the two differ."""
    assert 1 + COLLAPSED < FLOOR < 1 + BATCH * COLLAPSED
