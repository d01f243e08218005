"""The real, pinned SGLang on a CPU: torch stand-ins for the Triton / custom kernels that EAGLE and EAGLE-3 decode
reach, installed in every SGLang process that runs a model.

SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``) needs the CPU build of ``sgl-kernel``, which is not on PyPI;
on a plain CPU torch SGLang runs its pure-torch paths (``torch_native`` attention, native rotary) but the
speculative-decoding path still calls a few Triton kernels and refuses ``torch_native`` for the draft. The
stand-ins here replace exactly those call sites, and only when the device is ``cpu``: a GPU process never calls
:func:`install` with another device, and :func:`install` refuses to patch anything else.

Spawned scheduler processes start from a fresh interpreter, so :func:`install` must run in each of them:
``cpu.scheduler.run_scheduler_process`` (SGLang's ``run_scheduler_process_func``) does that, and also when
``SPECDECODE_DEVICE=cpu`` is set, :func:`install_from_env` does it from any other entry point.
"""

from __future__ import annotations

import os

DEVICE_ENV = "SPECDECODE_DEVICE"
_installed = False


def install(device: str = "cpu") -> bool:
    """Install every CPU stand-in (idempotent). Returns whether the stand-ins are active in this process."""
    global _installed
    if device != "cpu":
        return False
    if _installed:
        return True
    # lazy: import_paths loads the torchvision stand-in and unittest.mock (0.17 s) that only CPU runs need; this
    # package is imported by `selftest --help` and `launch`
    from . import import_paths, patches

    os.environ[DEVICE_ENV] = "cpu"
    import_paths.install_in_process()

    patches.install_all()
    _installed = True
    return True


def install_from_env() -> bool:
    """:func:`install` when ``SPECDECODE_DEVICE=cpu`` (set by the launcher and by :mod:`.engine`)."""
    return install(os.environ.get(DEVICE_ENV, "")) if os.environ.get(DEVICE_ENV) == "cpu" else False


def installed() -> bool:
    return _installed
