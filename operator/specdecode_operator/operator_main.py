"""Entry for ``kopf run -m specdecode_operator.operator_main`` (development): the same registry, built from the
SPECDECODE_* environment, under kopf's own CLI. It has no leader election: run one replica. Deployments run
``specdecode operator run --leader-elect`` (operator_process.py), which only lets the Lease holder act."""

import kopf

from .config import OperatorConfig
from .context import OperatorContext
from .registry import make_registry

# kopf run imports this module and runs the default registry; ours is built by a function, so copy it in.
_registry = make_registry(OperatorContext(OperatorConfig.from_env()))
kopf.set_default_registry(_registry)
