"""``specdecode operator run``: the operator process (``specdecode_operator.operator_process``) with flags layered
over SPECDECODE_* environment variables. With ``--leader-elect`` only the replica holding the Lease runs kopf.

For development, ``kopf run -m specdecode_operator.operator_main`` runs the same registry built from the
environment with kopf's own flags (no Lease: run one replica).
"""

from __future__ import annotations

import argparse
import logging
import os
import urllib.parse

from specdecode_runtime.contract.cli_common import UsageError, check_can_listen, check_port, float_in

from ..config import OperatorConfig


def add_parser(subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    operator = subparsers.add_parser(name, help=help_text)
    sub = operator.add_subparsers(dest="operator_command", required=True)
    run = sub.add_parser("run", help="reconcile SpecDecodeDeployments until stopped")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="watch this namespace (repeatable); default: SPECDECODE_NAMESPACES or all",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    run.add_argument("--metrics-port", type=int, help="port of /metrics (0: off; default 8080)")
    live = run.add_mutually_exclusive_group()
    live.add_argument(
        "--liveness", default=None, help="kopf liveness endpoint URL, or 'off' (default http://0.0.0.0:8081/healthz)"
    )
    live.add_argument(
        "--liveness-port", type=int, default=None, help="serve kopf's liveness endpoint /healthz on this port (0: off)"
    )
    run.add_argument("--default-image", help="runtime image when spec.runtime.image is empty")
    run.add_argument("--label-selector", help="only handle objects with these labels (k=v,k2=v2)")
    run.add_argument(
        "--leader-elect",
        dest="leader_election",
        action="store_true",
        default=None,
        help="only the replica holding Lease <operator-namespace>/<lease-name> acts (HA)",
    )
    run.add_argument("--lease-name", help="name of the leader-election Lease (default specdecode-operator)")
    run.add_argument("--identity", help="this replica's name in the Lease (default: the host name, the pod's name)")
    run.add_argument(
        "--watch-timeout",
        dest="watch_timeout_seconds",
        type=float,
        help="seconds before each watch is renewed; a silent one is cut 15 s after that (default 60)",
    )
    run.add_argument(
        "--resync-seconds",
        type=float_in(0, 86400),
        help="period of the level-based resync sweep over all objects (default 30)",
    )
    run.add_argument(
        "--check-spec-rules",
        dest="check_spec_rules",
        action="store_true",
        default=None,
        help="run the CRD's schema and CEL rules in the operator too (a CRD installed without them)",
    )
    run.add_argument(
        "--prometheus-url",
        help="tuner: read runtime counters from this Prometheus server "
        "(default: scrape each pod's /metrics through the headless Service's EndpointSlices)",
    )
    run.add_argument(
        "--tune-restart-seconds",
        type=float_in(0, 86400),
        help="Rollout mode: seconds of serving a restart costs, unless a tuner profile says (default 300)",
    )
    run.add_argument(
        "--rollout-blocked-seconds",
        type=float_in(0, 86400),
        help="report RolloutBlocked when a rollout pod stays unschedulable this long (default 300)",
    )
    run.add_argument(
        "--api-recheck-seconds",
        type=float_in(0, 86400),
        help="while a child's API (ServiceMonitor, LeaderWorkerSet) is not served, ask discovery again "
        "this often (default 60)",
    )
    run.add_argument(
        "--metrics-secure",
        action="store_true",
        default=None,
        help="serve /metrics over HTTPS to scrapers whose bearer token may get /metrics "
        "(TokenReview + SubjectAccessReview); default: plain HTTP",
    )
    run.add_argument(
        "--metrics-cert-dir",
        help="with --metrics-secure: tls.crt and tls.key to serve "
        "(default: a self-signed certificate made at start-up)",
    )
    run.add_argument("--operator-namespace", help="namespace the operator runs in (NetworkPolicy peer)")
    run.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    run.add_argument("--verbose", "-v", action="store_true", help="same as --log-level debug")
    run.set_defaults(func=run_operator)
    return operator


def _liveness_override(args) -> tuple[bool, str | None]:
    """(given, endpoint): whether a liveness flag was given, and the endpoint it asks for (None: off)."""
    port = getattr(args, "liveness_port", None)
    if port is not None:
        check_port("--liveness-port", port)
        return True, None if port == 0 else f"http://0.0.0.0:{port}/healthz"
    url = getattr(args, "liveness", None)
    if url is not None:
        if url.strip().lower() in ("", "off", "none", "0"):
            return True, None
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname or parsed.port is None:
            raise UsageError(f"--liveness must be an http://HOST:PORT/PATH URL or 'off', got {url!r}")
        return True, url
    return False, None


def config_from_args(args) -> OperatorConfig:
    """Flags over SPECDECODE_* over defaults. Every override is honoured, including the ones that turn a server off
    (``--metrics-port 0``, ``--liveness-port 0``, ``--liveness off``)."""
    overrides = {
        k: getattr(args, k, None)
        for k in (
            "metrics_port",
            "default_image",
            "label_selector",
            "leader_election",
            "lease_name",
            "identity",
            "watch_timeout_seconds",
            "resync_seconds",
            "operator_namespace",
            "prometheus_url",
            "tune_restart_seconds",
            "rollout_blocked_seconds",
            "api_recheck_seconds",
            "metrics_secure",
            "metrics_cert_dir",
            "check_spec_rules",
        )
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    metrics_port = overrides.get("metrics_port")
    if metrics_port is not None:
        check_port("--metrics-port", metrics_port)
    if getattr(args, "all_namespaces", False):
        overrides["namespaces"] = ()
    elif getattr(args, "namespaces", None):
        overrides["namespaces"] = tuple(args.namespaces)
    given, endpoint = _liveness_override(args)
    if given:
        overrides["liveness_endpoint"] = endpoint
    try:
        return OperatorConfig.from_env(**overrides)
    except ValueError as e:  # an unusable SPECDECODE_* value or selector
        raise UsageError(str(e)) from None


def check_credentials(config) -> None:
    """Load the Kubernetes credentials kopf will use (in-cluster, else KUBECONFIG or ~/.kube/config) once, up front:
    a missing or broken kubeconfig is the user's to fix, so it exits 2 naming the path instead of kopf retrying its
    login every 60 s."""
    if config.server:
        return
    from kubernetes import config as kubeconfig

    try:
        kubeconfig.load_incluster_config()
        return
    except kubeconfig.ConfigException:
        pass
    path = os.environ.get("KUBECONFIG") or os.path.expanduser(kubeconfig.KUBE_CONFIG_DEFAULT_LOCATION)
    try:
        kubeconfig.load_kube_config()
    except Exception as e:  # ConfigException, a YAML or decoding error: all say "this kubeconfig is unusable"
        reason = str(e).strip() or type(e).__name__
        raise UsageError(
            f"no usable Kubernetes credentials: not in a cluster, and kubeconfig {path}: {reason}"
        ) from None


def check_ports(config) -> None:
    """Bind /metrics and /healthz ports now, so a busy port stops the start with the flag's name."""
    if config.metrics_port:
        check_can_listen("--metrics-port", "0.0.0.0", config.metrics_port)
    if config.liveness_endpoint:
        parsed = urllib.parse.urlsplit(config.liveness_endpoint)
        if parsed.hostname and parsed.port:
            check_can_listen("--liveness-port", parsed.hostname, parsed.port)


def run_operator(args) -> int:
    from .. import operator_process

    config = config_from_args(args)
    check_credentials(config)
    check_ports(config)
    level = "DEBUG" if args.verbose else getattr(args, "log_level", "info").upper()
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return operator_process.run(config)
