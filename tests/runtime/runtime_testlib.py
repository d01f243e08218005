"""Shared helpers of the runtime tests. A uniquely named module, not conftest: test modules (and the processes
they spawn) import it by name, and several test folders have a conftest.py."""

import os
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
if str(RUNTIME) not in sys.path:
    sys.path.insert(0, str(RUNTIME))


def sglang_or_skip():
    """Import sglang's worker stack (torchvision stubbed on CPU), or skip; with SPECDECODE_REQUIRE_SGLANG set a
    missing sglang is a failure, never a skip (CI sets it). A unit-tier test may not use SGLang (tests/conftest.py):
    there it fails, naming the engine tier."""
    if os.environ.get("SPECDECODE_TEST_TIER") == "unit":
        pytest.fail(
            "SGLang in a unit-tier test: give the test the engine tier (@pytest.mark.engine, or its file a row in "
            "tests/conftest.py's FILE_TIER)",
            pytrace=False,
        )
    from specdecode_runtime import SGLANG_VERSION
    from specdecode_runtime.cpu.torchvision_stub import install
    from specdecode_runtime.sglang_patch import installed_sglang_version

    if installed_sglang_version() is None:
        if os.environ.get("SPECDECODE_REQUIRE_SGLANG"):
            pytest.fail(
                "SPECDECODE_REQUIRE_SGLANG is set but sglang is not installed "
                f"(pip install --no-deps sglang=={SGLANG_VERSION} -r requirements/sglang-cpu.txt)"
            )
        pytest.skip("sglang is not installed and SPECDECODE_REQUIRE_SGLANG is unset")
    install()
    import sglang.srt.speculative.eagle_worker_v2  # noqa: F401


RUNTIME_YAML = """\
apiVersion: specdecode.io/runtime/v1
name: demo
target: {model: /models/llama-70b, tensorParallelSize: 8, quantization: fp8, contextLength: 8192}
draft: {model: /models/eagle3, algorithm: EAGLE3, tensorParallelSize: 1}
speculative: {numSteps: 3, eagleTopK: 1, candidateSteps: [1, 3, 5]}
nccl: {profile: PCIe, env: {NCCL_DEBUG: WARN}}
server: {port: 30000}
topology: {nodes: 1, gpusPerNode: 8, interconnect: PCIe}
"""


# A Live runtime.yaml with a split draft (TP 8, draft TP 2), for the contract's tests: ``config(old=new)`` edits it.
CONFIG = """\
name: demo
target: {model: /t, tensorParallelSize: 8}
draft: {model: /d, tensorParallelSize: 2}
speculative: {numSteps: 3, eagleTopK: 1, candidateSteps: [1, 3, 5], autotune: {mode: Live, minSteps: 1, maxSteps: 5}}
nccl: {profile: PCIe}
"""


def config(**changes: str):
    """``CONFIG`` with each ``old=new`` text replaced (each ``old`` must be there), parsed as a RuntimeConfig."""
    from specdecode_runtime.contract.config import RuntimeConfig

    text = CONFIG
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return RuntimeConfig.from_yaml(text)
