import sys
from pathlib import Path

# tests/upstream_schemas.py and tests/chart/chartlib.py are plain modules next to the tests.
for p in (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
