"""The runtime contract: what the operator and the runtime must agree on, in one importable place.

* :mod:`.config` - ``runtime.yaml`` (rendered by the operator, read by the launcher) and its bounded loader;
* :mod:`.derived` - every value computed from a runtime config (step tiers, split decision, draft-TP rule,
  draft tokens per cycle, NCCL environment), so the renderer, the tuner and the launcher never recompute them;
* :mod:`.algorithms` - the speculative algorithm names (a leaf: the config and the CRD model name them);
* :mod:`.metric_names` - the metric table (each row's name, type, labels and the tuner field it feeds), label values
  and batch-size buckets (the exporter is ``specdecode_runtime.metrics``);
* :mod:`.step_table` - the step table and its path (the HTTP endpoint is ``specdecode_runtime.control``);
* :mod:`.goodput`, :mod:`.scenario` - the goodput model and the workload scenario it is fitted to;
* :mod:`.nccl` - NCCL profiles as data;
* :mod:`.server_args` - the stock SGLang arguments for a config.

Every module here imports only the standard library, PyYAML, pydantic and this package: the operator image has
no torch, SGLang or aiohttp server, and tests/test_import_graph.py keeps it that way.
"""
