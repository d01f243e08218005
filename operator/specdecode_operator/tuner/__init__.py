"""Step autotuner: metrics -> estimator -> policy -> decision; see docs/tuner.md."""
