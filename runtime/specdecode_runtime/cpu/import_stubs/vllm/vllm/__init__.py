"""Found only through the PYTHONPATH entry that ``specdecode_runtime.cpu.import_paths`` adds for CPU runs without
vllm: SGLang's rotary embedding imports ``vllm._custom_ops.rotary_embedding`` on a plain CPU torch."""
