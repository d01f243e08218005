"""Operator configuration: flags win over SPECDECODE_* environment variables, which win over defaults.

The chart sets the environment; a developer running ``specdecode operator run`` locally uses flags.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from typing import Mapping

from .api.labels import label_problems
from .images import RUNTIME_IMAGE, SGLANG_IMAGE

ENV_PREFIX = "SPECDECODE_"


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()  # empty: every namespace (cluster-wide)
    default_image: str = RUNTIME_IMAGE
    default_sglang_image: str = SGLANG_IMAGE
    # Pinned: a deployment keeps the default image recorded in its status.runtimeImage when the default changes
    # (an operator upgrade restarts no runtime pod); it adopts the new one when annotated
    # specdecode.io/adopt-default-image=<new value>. Follow: every deployment re-renders on the new default at once.
    runtime_image_policy: str = "Pinned"
    label_selector: str = ""  # only SpecDecodeDeployments with these labels (k=v,k2=v2); sharding and canaries
    # Labels of every per-deployment ServiceMonitor (a JSON object in SPECDECODE_SERVICE_MONITOR_LABELS; the chart's
    # runtime.serviceMonitor.labels), e.g. the release label Prometheus selects on; spec.monitoring.labels win.
    service_monitor_labels: tuple[tuple[str, str], ...] = ()
    metrics_port: int = 8080  # 0 disables /metrics
    # HTTPS + TokenReview/SubjectAccessReview on /metrics (metrics_auth.py); the chart turns it on. Off: plain HTTP.
    metrics_secure: bool = False
    metrics_cert_dir: str | None = None  # tls.crt + tls.key; None: a self-signed certificate made at start-up
    liveness_endpoint: str | None = "http://0.0.0.0:8081/healthz"
    peering_name: str = "specdecode-operator"
    standalone: bool = False  # True: no peering (one replica, or tests)
    priority: int = 0
    operator_namespace: str = "specdecode-system"
    operator_labels: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "specdecode-operator"),)
    resync_seconds: float = 30.0  # level-based repair and status refresh period per object
    request_timeout: float = 10.0
    retries: int = 6
    backoff_seconds: float = 0.2
    api_workers: int = 16
    # A fixed API endpoint (tests, the demo); None uses kopf's and the kubernetes client's usual discovery.
    server: str | None = None
    token: str | None = None
    # Our own write counts as the object's current state until the watch delivers it (or a newer version), at most
    # this long: no re-read after an apply, however far the watch lags behind a creation wave.
    settle_seconds: float = 120.0
    # The API server's admission enforces the CRD's schema and CEL rules; True checks them again in the operator
    # (a CRD installed without its rules), reporting what fails as InvalidSpec instead of rendering it.
    check_spec_rules: bool = False
    # Tuner (tuning/loop.py). None: scrape each pod's /metrics; a URL: read the same counters from there.
    prometheus_url: str | None = None
    scrape_timeout: float = 5.0  # per pod scrape, push or Prometheus query
    tune_restart_seconds: float = 300.0  # Rollout: tokens/s lost for this long per restart, unless a profile says
    # A rollout pod the scheduler refuses for this long is reported as RolloutBlocked: the scheduler retries
    # unschedulable pods at least every 5 minutes, and a cluster autoscaler adds a node within a few.
    rollout_blocked_seconds: float = 300.0
    # Children whose API an add-on serves (ServiceMonitor, LeaderWorkerSet): discovery is asked again this often
    # while one is missing, so installing its CRDs takes effect without a restart (optional_apis.py).
    api_recheck_seconds: float = 60.0
    # Step control: "ServiceAccount" sends a short-lived token of the operator's ServiceAccount bound to each
    # deployment's own audience (control_identity.py; the chart's default), "Secret" a per-object control-token Secret.
    control_auth: str = "Secret"
    control_service_account: str = "specdecode-operator"  # ours, in operator_namespace (the chart: the pod's own)
    control_audience: str = "specdecode-runtime"  # the prefix of every deployment's audience
    # TEST/DEMO ONLY: the tuner sleeps intervalSeconds x this in wall time and its clock runs 1/this as fast, so a
    # test with simulated pods at speed 1/scale sees exactly the simulated clock. 1.0 on a real cluster.
    tune_interval_scale: float = 1.0
    identity: str = dataclasses.field(default_factory=socket.gethostname)
    # One active replica (leadership.py): only the holder of Lease <operator_namespace>/<lease_name> runs kopf.
    # Takeover after a crash <= lease_duration + retry_period; a cut-off leader stops after renew_deadline.
    leader_election: bool = False
    lease_name: str = "specdecode-operator"
    lease_duration_seconds: float = 10.0
    renew_deadline_seconds: float = 7.0
    retry_period_seconds: float = 1.0
    # Watches: the server closes each after this long; the client cuts one that runs 15 s longer or stays silent
    # for this + 15 s (a half-open connection), and kopf reopens it (re-listing) - a stalled watch costs <= this.
    watch_timeout_seconds: float = 60.0
    # kopf's own API calls (watch lists, finalizers): delays between retries, short so that a pass after an API
    # outage is not parked behind a long back-off once the server answers again.
    api_error_backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 3.0, 3.0)

    @property
    def labels(self) -> dict[str, str]:
        """The label selector as kopf's equality filter."""
        out = {}
        for term in filter(None, (t.strip() for t in self.label_selector.split(","))):
            if "=" not in term or "!=" in term:
                raise ValueError(f"--label-selector supports only key=value terms, got {term!r}")
            key, value = term.replace("==", "=").split("=", 1)
            out[key.strip()] = value.strip()
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> OperatorConfig:
        env = os.environ if env is None else env
        values: dict = {}

        def get(name: str):
            return env.get(ENV_PREFIX + name)

        if get("NAMESPACES"):
            values["namespaces"] = tuple(n.strip() for n in get("NAMESPACES").split(",") if n.strip())
        for field, name, conv in [
            ("default_image", "DEFAULT_IMAGE", str),
            ("default_sglang_image", "DEFAULT_SGLANG_IMAGE", str),
            ("runtime_image_policy", "RUNTIME_IMAGE_POLICY", str),
            ("label_selector", "LABEL_SELECTOR", str),
            ("metrics_port", "METRICS_PORT", int),
            ("peering_name", "PEERING_NAME", str),
            ("operator_namespace", "OPERATOR_NAMESPACE", str),
            ("resync_seconds", "RESYNC_SECONDS", float),
            ("request_timeout", "REQUEST_TIMEOUT", float),
            ("priority", "PRIORITY", int),
            ("prometheus_url", "PROMETHEUS_URL", str),
            ("scrape_timeout", "SCRAPE_TIMEOUT", float),
            ("tune_restart_seconds", "TUNE_RESTART_SECONDS", float),
            ("tune_interval_scale", "TUNE_INTERVAL_SCALE", float),
            ("rollout_blocked_seconds", "ROLLOUT_BLOCKED_SECONDS", float),
            ("api_recheck_seconds", "API_RECHECK_SECONDS", float),
            ("metrics_cert_dir", "METRICS_CERT_DIR", str),
            ("control_auth", "CONTROL_AUTH", str),
            ("control_service_account", "CONTROL_SERVICE_ACCOUNT", str),
            ("control_audience", "CONTROL_AUDIENCE", str),
        ]:
            if get(name):
                values[field] = conv(get(name))
        if get("SERVICE_MONITOR_LABELS"):
            values["service_monitor_labels"] = _label_map("SERVICE_MONITOR_LABELS", get("SERVICE_MONITOR_LABELS"))
        if get("METRICS_SECURE"):
            values["metrics_secure"] = get("METRICS_SECURE").lower() in ("1", "true", "yes")
        if get("CHECK_SPEC_RULES"):
            values["check_spec_rules"] = get("CHECK_SPEC_RULES").lower() in ("1", "true", "yes")
        if get("STANDALONE"):
            values["standalone"] = get("STANDALONE").lower() in ("1", "true", "yes")
        values.update(overrides)  # None is a value too: liveness_endpoint=None turns the endpoint off
        config = cls(**values)
        _ = config.labels  # fail early on a selector kopf cannot express
        if config.control_auth not in ("ServiceAccount", "Secret"):
            raise ValueError(f"SPECDECODE_CONTROL_AUTH must be ServiceAccount or Secret, got {config.control_auth!r}")
        if config.runtime_image_policy not in ("Pinned", "Follow"):
            raise ValueError(
                f"SPECDECODE_RUNTIME_IMAGE_POLICY must be Pinned or Follow, got {config.runtime_image_policy!r}"
            )
        if config.tune_interval_scale <= 0:
            raise ValueError(f"tune_interval_scale must be > 0, got {config.tune_interval_scale}")
        problems = label_problems(dict(config.service_monitor_labels))
        if problems:
            raise ValueError(f"{ENV_PREFIX}SERVICE_MONITOR_LABELS: " + "; ".join(problems))
        return config


def _label_map(name: str, text: str) -> tuple[tuple[str, str], ...]:
    """A JSON object of string labels (the chart writes it with toJson), as sorted pairs."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{ENV_PREFIX}{name} must be a JSON object of labels: {e}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{ENV_PREFIX}{name} must be a JSON object of string labels, got {text[:200]!r}")
    return tuple(sorted(value.items()))
