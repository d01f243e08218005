"""The one SGLang version the runtime's patches are written against.

Everything else derives it or is checked against it: the launcher refuses another installed version, the stock
SGLang image tag of ``runtime.launcher: sglang`` (operator ``images.py``) and the `make deps-test` install derive it;
``tests/test_sglang_pin.py`` checks the Dockerfile's base image, the CPU requirements and every mention of an SGLang
version in code, tests and docs against it (docs/architecture.md lists what a version bump touches).
"""

SGLANG_VERSION = "0.5.23"
