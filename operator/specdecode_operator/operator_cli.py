"""``specdecode operator run``: the kopf operator with flags layered over SPECDECODE_* environment variables.

Equivalent without this wrapper: ``kopf run -m specdecode_operator.operator_main`` (the same registry, built from
the environment), so kopf's own flags (--verbose, --peering, --liveness) remain available.
"""

from __future__ import annotations

import argparse
import asyncio
import logging


def add_parser(subparsers) -> argparse.ArgumentParser:
    operator = subparsers.add_parser("operator", help="run the SpecDecodeDeployment operator")
    sub = operator.add_subparsers(dest="operator_command", required=True)
    run = sub.add_parser("run", help="reconcile SpecDecodeDeployments until stopped")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", dest="namespaces", metavar="NS",
                       help="watch this namespace (repeatable); default: SPECDECODE_NAMESPACES or all")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    run.add_argument("--metrics-port", type=int, help="port of /metrics (0: off; default 8080)")
    live = run.add_mutually_exclusive_group()
    live.add_argument("--liveness", default=None, help="kopf liveness endpoint URL (default http://0.0.0.0:8081/healthz)")
    live.add_argument("--liveness-port", type=int, default=None, help="serve kopf's liveness endpoint /healthz on this port")
    run.add_argument("--default-image", help="runtime image when spec.runtime.image is empty")
    run.add_argument("--label-selector", help="only handle objects with these labels (k=v,k2=v2)")
    run.add_argument("--peering", dest="peering_name", help="kopf peering name (HA: one active replica)")
    run.add_argument("--standalone", action="store_true", default=None, help="no peering (a single replica)")
    run.add_argument("--priority", type=int, help="peering priority of this replica")
    run.add_argument("--resync-seconds", type=float, help="level-based resync period per object (default 30)")
    run.add_argument("--prometheus-url", help="tuner: read runtime counters from this Prometheus server "
                     "(default: scrape each pod's /metrics through the headless Service's EndpointSlices)")
    run.add_argument("--tune-restart-seconds", type=float,
                     help="Rollout mode: seconds of serving a restart costs, unless a tuner profile says (default 300)")
    run.add_argument("--operator-namespace", help="namespace the operator runs in (NetworkPolicy peer)")
    run.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    run.add_argument("--verbose", "-v", action="store_true", help="same as --log-level debug")
    run.set_defaults(func=run_operator)
    return operator


def config_from_args(args) -> "OperatorConfig":
    from .opconfig import OperatorConfig

    overrides = {k: getattr(args, k, None) for k in (
        "metrics_port", "default_image", "label_selector", "peering_name", "standalone", "priority",
        "resync_seconds", "operator_namespace", "prometheus_url", "tune_restart_seconds")}
    if getattr(args, "all_namespaces", False):
        overrides["namespaces"] = ()
    elif getattr(args, "namespaces", None):
        overrides["namespaces"] = tuple(args.namespaces)
    if getattr(args, "liveness_port", None):
        overrides["liveness_endpoint"] = f"http://0.0.0.0:{args.liveness_port}/healthz"
    else:
        overrides["liveness_endpoint"] = getattr(args, "liveness", None) or "http://0.0.0.0:8081/healthz"
    config = OperatorConfig.from_env(**{k: v for k, v in overrides.items() if v is not None})
    if getattr(args, "all_namespaces", False):
        config = __import__("dataclasses").replace(config, namespaces=())
    return config


def run_operator(args) -> int:
    import kopf

    from .reconcile.handlers import make_registry

    config = config_from_args(args)
    level = "DEBUG" if args.verbose else getattr(args, "log_level", "info").upper()
    logging.basicConfig(level=getattr(logging, level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kwargs = dict(registry=make_registry(config), clusterwide=not config.namespaces,
                  namespaces=list(config.namespaces), standalone=config.standalone, priority=config.priority,
                  liveness_endpoint=config.liveness_endpoint)
    if not config.standalone:
        kwargs["peering_name"] = config.peering_name
    asyncio.run(kopf.operator(**kwargs))
    return 0
