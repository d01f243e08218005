"""A series the tuner reads is one row of the metric table plus the call that counts it.

Rows added here (the table monkeypatched, nothing else changed) are declared and exported by the runtime's exporter,
parsed from a pod's /metrics and from Prometheus into their fields, and differenced by the estimator; and every field
the tuner's code reads by name is a field of the table.
"""

from __future__ import annotations

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specdecode_operator.tuner import snapshot
from specdecode_operator.tuner.estimator import BucketDelta, Estimator, bucket_delta
from specdecode_operator.tuner.snapshot import BucketCounters, NamedField, PodSnapshot, parse_metrics
from specdecode_operator.tuning.pod_client import open_session, query_prometheus
from specdecode_runtime.contract import metric_names
from specdecode_runtime.contract.metric_names import METRICS, Metric
from specdecode_runtime.metrics import SpecMetrics

SPILLS = Metric(
    "specdecode_test_spills", "counter", ("bucket",), "spills", "Test: spills per bucket", field="spills", axis="bucket"
)
WAITS = Metric(
    "specdecode_test_waits",
    "counter",
    ("bucket", "position"),
    "requests",
    "Test: waits per bucket and draft position",
    field="waits",
    axis="position",
)
EVICTIONS = Metric(
    "specdecode_test_evictions", "counter", (), "requests", "Test: evictions", field="evictions", axis="pod"
)
NEW_ROWS = (SPILLS, WAITS, EVICTIONS)


@pytest.fixture
def new_rows(monkeypatch):
    for row in NEW_ROWS:
        monkeypatch.setitem(METRICS, row.name, row)


class Pod:
    """The runtime's exporter on its own registry, counting the new rows beside a decode cycle."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics = SpecMetrics(self.registry)

    def count(self, spills: float, waits: tuple[float, float], evictions: float) -> str:
        self.metrics.record_cycle(1, 2, [1], {"verify": 0.01})
        self.metrics.add(SPILLS.name, spills, "1")
        self.metrics.add(WAITS.name, waits[0], "1", "1")
        self.metrics.add(WAITS.name, waits[1], "1", "2")
        self.metrics.add(EVICTIONS.name, evictions)
        return generate_latest(self.registry).decode()


def test_a_new_row_is_exported_parsed_and_differenced(new_rows):
    pod = Pod()
    first = parse_metrics(pod.count(3, (2, 1), 4), "p", 0.0)
    text = pod.count(5, (1, 0), 2)
    for row in NEW_ROWS:
        (sample,) = row.sample_names()
        assert f"# HELP {sample} {row.help}" in text and f"# TYPE {sample} counter" in text
    second = parse_metrics(text, "p", 10.0)

    assert first.ok and first.problems == []
    b = first.buckets["1"]
    assert b.values["spills"] == 3 and b.keyed["waits"] == {1: 2, 2: 1} and first.values["evictions"] == 4
    assert b.cycles == 1  # the contract's own rows as before

    d = bucket_delta(first.buckets["1"], second.buckets["1"])
    assert d is not None and d.values["spills"] == 5 and d.keyed["waits"] == {1: 1} and d.cycles == 1

    est = Estimator()
    est.observe([first])
    report = est.observe([second])
    assert report.pod_counts == {"tokens_total": 2, "evictions": 2}
    assert est.window("1").values["spills"] == 5 and est.window("1").keyed["waits"] == {1: 1}


def test_a_new_counter_going_backwards_is_a_restart(new_rows):
    before = parse_metrics(Pod().count(3, (2, 1), 4), "p", 0.0)
    restarted = Pod()
    restarted.count(0, (0, 0), 9)
    for _ in range(3):  # the table's own counters moved on; only the new one went back
        text = restarted.count(0.5, (2, 1), 0)
    after = parse_metrics(text, "p", 10.0)
    assert after.buckets["1"].cycles > before.buckets["1"].cycles
    assert bucket_delta(before.buckets["1"], after.buckets["1"]) is None
    est = Estimator()
    est.observe([before])
    assert est.observe([after]).resets == ["p"]


async def test_the_prometheus_path_asks_for_the_new_rows(new_rows):
    text = Pod().count(3, (2, 1), 4)
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    asked = []

    async def query(request):
        name = request.query["query"].split("{", 1)[0]
        asked.append(name)
        result = [
            {"metric": {"__name__": s.name, "namespace": "ns", "pod": "p", **s.labels}, "value": [1, repr(s.value)]}
            for s in samples
            if s.name == name
        ]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with open_session() as session:
            (snap,) = await query_prometheus(session, url, "ns", ["p"], 10.0)
    finally:
        await runner.cleanup()
    assert {"specdecode_test_spills_total", "specdecode_test_waits_total", "specdecode_test_evictions_total"} <= set(
        asked
    )
    direct = parse_metrics(text, "p", 10.0)
    assert snap.ok and snap.problems == []
    assert snap.buckets["1"] == direct.buckets["1"] and snap.values == direct.values
    assert snap.buckets["1"].values["spills"] == 3 and snap.values["evictions"] == 4


def test_every_field_read_by_name_is_a_field_of_the_table():
    fields = {name: row for row in metric_names.tuner_rows() for name in row.fields()}
    named = {
        attr.field
        for cls in (BucketCounters, BucketDelta)
        for klass in cls.__mro__
        for attr in vars(klass).values()
        if isinstance(attr, NamedField)
    }
    assert named <= set(fields), named - set(fields)
    # the pod-wide axes with a field of their own feed an attribute of the snapshot
    pod = PodSnapshot("p", 0.0)
    for name, row in fields.items():
        if row.axis in ("switch", "candidate", "probe"):
            assert hasattr(pod, name), (row.name, name)
    assert snapshot.routes()[snapshot.TOKENS] == (METRICS[metric_names.TOKENS_GENERATED], "tokens_total")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"field": "x"}, "needs its axis"),
        ({"axis": "bucket"}, "needs its axis"),
        ({"field": "x", "axis": "position"}, "reads labels ['position']"),
        ({"field": "x", "axis": "pod", "kind": "gauge", "labels": ()}, "a gauge has no change per interval"),
    ],
)
def test_a_row_that_cannot_feed_its_axis_is_refused(kwargs, message):
    row = {"name": "specdecode_x", "kind": "counter", "labels": ("bucket",), "unit": "u", "help": "h", **kwargs}
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Metric(**row)
