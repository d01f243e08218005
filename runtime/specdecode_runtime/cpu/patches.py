"""Every CPU stand-in, installed in order: each replaces one SGLang kernel wrapper in the module that defines it
and in every loaded SGLang module that imported it by name (``from X import f`` copies the binding)."""

from __future__ import annotations

import importlib
import logging
import os
import sys

from . import kernels
from .draft_backend import install as install_draft_backend

# (module that defines the wrapper, its name, the torch implementation)
STAND_INS = (
    ("sglang.srt.mem_cache.allocation", "assign_req_to_token_pool_func", kernels.assign_req_to_token_pool_func),
    ("sglang.kernels.ops.kvcache.cache_move", "copy_all_layer_kv_cache_func", kernels.copy_all_layer_kv_cache_func),
    (
        "sglang.kernels.ops.speculative.cache_locs",
        "assign_draft_cache_locs_contiguous_func",
        kernels.assign_draft_cache_locs_contiguous_func,
    ),
    (
        "sglang.kernels.ops.speculative.cache_locs",
        "assign_extend_cache_locs_func",
        kernels.assign_extend_cache_locs_func,
    ),
    (
        "sglang.kernels.ops.speculative.cache_locs",
        "fill_front_out_cache_loc_func",
        kernels.fill_front_out_cache_loc_func,
    ),
    (
        "sglang.kernels.ops.speculative.spec_tree",
        "build_tree_kernel_efficient_func",
        kernels.build_tree_kernel_efficient_func,
    ),
    ("sglang.kernels.ops.speculative.spec_tree", "verify_tree_greedy_func", kernels.verify_tree_greedy_func),
    ("sglang.kernels.ops.speculative.eagle", "fill_bonus_tokens_func", kernels.fill_bonus_tokens_func),
    ("sglang.kernels.ops.speculative.eagle", "fill_accept_out_cache_loc_func", kernels.fill_accept_out_cache_loc_func),
)
# Modules whose import-time bindings must see the stand-ins: loaded before rebinding.
CALLERS = (
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocation",
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.speculative.eagle_worker_common",
    "sglang.srt.speculative.spec_utils",
    "sglang.srt.speculative.eagle_worker_v2",
)

logger = logging.getLogger(__name__)
installed: dict[tuple[str, str], object] = {}  # (module, name) -> SGLang's original


def _log_interpreted_kernels() -> None:
    """Under ``TRITON_INTERPRET=1`` (Triton's own CPU interpreter) log, once each, the SGLang Triton kernels that
    still run: the way to find what a new configuration reaches that has no stand-in yet."""
    from triton.runtime import interpreter

    if getattr(interpreter.GridExecutor.__call__, "__specdecode_cpu__", False):
        return
    orig, seen = interpreter.GridExecutor.__call__, set()

    def call(self, *args, **kwargs):
        name = f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__name__', '?')}"
        if name not in seen:
            seen.add(name)
            logger.warning("Triton kernel without a CPU stand-in ran interpreted: %s", name)
        return orig(self, *args, **kwargs)

    call.__specdecode_cpu__ = True  # type: ignore[attr-defined]  # marks our stand-in (a function attribute)
    interpreter.GridExecutor.__call__ = call


def rebind(module_name: str, name: str, replacement) -> object:
    """Point ``module_name.name`` and every loaded ``sglang`` module's binding of the same object at
    ``replacement``; returns the original."""
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    if original is replacement:
        return installed.get((module_name, name), original)
    for mod in list(sys.modules.values()):
        if mod is None or not getattr(mod, "__name__", "").startswith("sglang"):
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                setattr(mod, attr, replacement)
    installed[(module_name, name)] = original
    return original


def install_all() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        _log_interpreted_kernels()
    for name in CALLERS:
        importlib.import_module(name)
    for module_name, name, replacement in STAND_INS:
        rebind(module_name, name, replacement)
    from .collectives import install as install_collectives

    install_collectives()
    install_draft_backend()
