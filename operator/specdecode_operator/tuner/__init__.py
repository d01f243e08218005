"""Step autotuner, pure: metric snapshots -> estimator -> policy -> decision; no I/O (that is ``tuning``); see
docs/tuner.md."""
