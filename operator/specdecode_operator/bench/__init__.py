"""Benchmarks that run in-process on the simulator (every number they produce is simulated): the step tuner against
fixed step counts, the per-phase oracle and SGLang's own adaptive controller. ``specdecode bench`` runs them."""
