"""``python -m specdecode_operator.cli``: the same as the ``specdecode`` command."""

import sys

from . import main

sys.exit(main())
