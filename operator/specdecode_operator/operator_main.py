"""Entry for ``kopf run -m specdecode_operator.operator_main``: registers the handlers from SPECDECODE_* env."""

import kopf

from .opconfig import OperatorConfig
from .reconcile.handlers import make_registry

# kopf run imports this module and runs the default registry; ours is built by a function, so copy it in.
_registry = make_registry(OperatorConfig.from_env())
kopf.set_default_registry(_registry)
