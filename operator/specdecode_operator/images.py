"""Default images, in one place for the renderer, the CLI, the operator configuration and the chart tests."""

from specdecode_runtime.contract.versions import SGLANG_VERSION

RUNTIME_IMAGE = "ghcr.io/specdecode/specdecode-runtime:0.1.0"
OPERATOR_IMAGE = "ghcr.io/specdecode/specdecode-operator:0.1.0"
# A stock SGLang image, for runtime.launcher: sglang (no split draft, no live step control).
SGLANG_IMAGE = f"lmsysorg/sglang:v{SGLANG_VERSION}"
