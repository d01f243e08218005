"""specdecode runtime: launches the pinned SGLang, patched so that its EAGLE draft runs on its own process group.

Importing this package must never import torch or sglang: the operator image and the CI machine use the
pure-Python parts (the contract in :mod:`specdecode_runtime.contract`, the simulator) without them.
"""

__version__ = "0.1.0"
from .contract.versions import SGLANG_VERSION  # the one pin; importing the contract loads nothing heavy

__all__ = ["SGLANG_VERSION", "__version__"]
