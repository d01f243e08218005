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
    run.add_argument("--liveness", default="http://0.0.0.0:8081/healthz", help="kopf liveness endpoint URL")
    run.add_argument("--default-image", help="runtime image when spec.runtime.image is empty")
    run.add_argument("--label-selector", help="only handle objects with these labels (k=v,k2=v2)")
    run.add_argument("--peering", dest="peering_name", help="kopf peering name (HA: one active replica)")
    run.add_argument("--standalone", action="store_true", default=None, help="no peering (a single replica)")
    run.add_argument("--priority", type=int, help="peering priority of this replica")
    run.add_argument("--resync-seconds", type=float, help="level-based resync period per object (default 30)")
    run.add_argument("--operator-namespace", help="namespace the operator runs in (NetworkPolicy peer)")
    run.add_argument("--verbose", "-v", action="store_true")
    run.set_defaults(func=run_operator)
    return operator


def config_from_args(args) -> "OperatorConfig":
    from .opconfig import OperatorConfig

    overrides = {k: getattr(args, k, None) for k in (
        "metrics_port", "default_image", "label_selector", "peering_name", "standalone", "priority",
        "resync_seconds", "operator_namespace")}
    if getattr(args, "all_namespaces", False):
        overrides["namespaces"] = ()
    elif getattr(args, "namespaces", None):
        overrides["namespaces"] = tuple(args.namespaces)
    overrides["liveness_endpoint"] = getattr(args, "liveness", None) or None
    config = OperatorConfig.from_env(**{k: v for k, v in overrides.items() if v is not None})
    if getattr(args, "all_namespaces", False):
        config = __import__("dataclasses").replace(config, namespaces=())
    return config


def run_operator(args) -> int:
    import kopf

    from .reconcile.handlers import make_registry

    config = config_from_args(args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kwargs = dict(registry=make_registry(config), clusterwide=not config.namespaces,
                  namespaces=list(config.namespaces), standalone=config.standalone, priority=config.priority,
                  liveness_endpoint=config.liveness_endpoint)
    if not config.standalone:
        kwargs["peering_name"] = config.peering_name
    asyncio.run(kopf.operator(**kwargs))
    return 0
