"""kopf handlers and the steps of one reconciliation: render, apply children, clean up, report status."""
