"""An in-process Kubernetes API emulator and an operator runner, shared by tests, benchmarks and ``specdecode demo``."""
