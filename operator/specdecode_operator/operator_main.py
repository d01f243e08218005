"""Entry for ``kopf run -m specdecode_operator.operator_main`` (development): the same registry, built from the
SPECDECODE_* environment, under kopf's own CLI. It has no leader election: run one replica. Deployments run
``specdecode operator run --leader-elect`` (operator_process.py), which only lets the Lease holder act."""

import kopf

from .opconfig import OperatorConfig
from .reconcile.handlers import make_registry

# kopf run imports this module and runs the default registry; ours is built by a function, so copy it in.
_registry = make_registry(OperatorConfig.from_env())
kopf.set_default_registry(_registry)
