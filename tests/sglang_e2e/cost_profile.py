"""What a real SGLang pod's start-up cost probe exported, read the way the operator reads it.

The engine's ``specdecode_cost_seconds`` live in Prometheus multiprocess files (SGLang's ``/metrics`` renders
them); here they are rendered to the exposition text a scrape returns, parsed by the operator's own
``tuner.snapshot.parse_metrics`` and fed to its ``Tuner``, so an assertion on the result is an assertion on the
profile the tuner would use for that pod."""

from __future__ import annotations

from pathlib import Path

STAGES_EVERY_POD = ("verify", "draft_step", "draft_extend", "overhead")


def exposition(metrics_dir: Path) -> str:
    """The text a scrape of the engine's ``/metrics`` returns for the project's series."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=str(metrics_dir))
    return generate_latest(reg).decode()


def scraped(metrics_dir: Path):
    """The operator's snapshot of the pod (its ``costs``: (stage, steps, bucket, batch) -> seconds)."""
    from specdecode_operator.tuner.snapshot import parse_metrics

    snap = parse_metrics(exposition(metrics_dir), pod="probe-0", time=0.0)
    assert snap.ok, snap.error
    return snap


def by_bucket(costs) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """bucket -> stage -> [(steps, seconds)]."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for (stage, steps, bucket, _), sec in costs.items():
        out.setdefault(bucket, {}).setdefault(stage, []).append((steps, sec))
    return out


def tuner_costs(snap, buckets) -> dict[str, tuple[object, str]]:
    """Per bucket: the cost model the operator's tuner uses after one scrape of the pod, and its source."""
    from specdecode_operator.tuner.tuner import Tuner, TunerConfig

    tuner = Tuner(TunerConfig(buckets=tuple(buckets)))
    tuner.step(0.0, [snap])
    return {label: tuner.cost(label) for label in tuner.labels}
