"""``python -m specdecode_runtime`` = ``specdecode-runtime``."""

import sys

from .cli import main

sys.exit(main())
