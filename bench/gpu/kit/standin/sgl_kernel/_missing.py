"""Ops the stand-in does not implement: importable, failing when called.

SGLang imports many ``sgl_kernel`` ops (and submodules) at module level on CUDA, for paths a bf16 Llama on triton
attention never takes (int8/fp8 GEMMs, GGUF, Mamba, KV-cache I/O, custom all-reduce). The import must succeed; a call
raises ``NotImplementedError`` naming the op, so a run that strays onto one stops there instead of computing
something else."""

from __future__ import annotations


def missing_op(module: str, name: str):
    # Dunder look-ups (copy, pickle, inspect, ``from x import *``) keep Python's AttributeError contract.
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(
            f"{module}.{name}: the torch stand-in for sgl_kernel does not implement this op; run with the real "
            "sglang-kernel or keep SGLang on backends that do not need it"
        )

    missing.__name__ = missing.__qualname__ = name
    return missing
