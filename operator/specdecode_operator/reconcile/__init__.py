"""One reconciliation: render, apply children, clean up, report status (the kopf wiring is registry.py)."""
