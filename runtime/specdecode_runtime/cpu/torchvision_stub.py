"""A torchvision stand-in so the pinned SGLang's modules import on a CPU-only machine.

SGLang on a CPU is a product mode, not only a test aid: ``device: cpu`` in runtime.yaml, ``specdecode-runtime
selftest`` and ``check-sglang`` on a machine without GPUs all import SGLang's worker stack there. The stand-in
reaches them two ways: :mod:`.import_paths` puts ``import_stubs/torchvision`` first on the path of every spawned
SGLang process (it calls :func:`_install` on import), and ``check-sglang`` calls :func:`install` directly. The GPU
patch path (``sglang_patch.apply_patches``) never calls it: the runtime image has the real package. ``install()``
only stubs a package that cannot be imported for real, so calling it where the real one works changes nothing.

* torchvision: SGLang imports it unconditionally (``sglang.srt.configs`` -> ``nano_nemotron_vl`` ->
  ``multimodal/internvl_utils``). PyPI's torchvision wheels are CUDA builds whose ``_C.so`` fails beside a CPU
  torch (``operator torchvision::nms does not exist``), so the stub replaces it. transformers reads
  ``torchvision.__version__``, which therefore has to be a real version string.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from unittest import mock

TORCHVISION_MODULES = (
    "torchvision",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.transforms.v2",
    "torchvision.transforms.v2.functional",
    "torchvision.transforms.InterpolationMode",
    "torchvision.io",
    "torchvision.ops",
    "torchvision.models",
    "torchvision.utils",
)
STUB_VERSION = "0.28.0"


class _Stub(types.ModuleType):
    """A module whose every public attribute is a MagicMock named after it."""

    __specdecode_stub__ = True

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _real_import_works(name: str) -> bool:
    if name in sys.modules:
        return not getattr(sys.modules[name], "__specdecode_stub__", False)
    if importlib.util.find_spec(name) is None:
        return False
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001 - a CUDA torchvision beside CPU torch raises RuntimeError
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        return False


def _install(names: tuple[str, ...], version: str) -> list[str]:
    for n in names:
        m = _Stub(n)
        m.__path__ = []
        m.__version__ = version  # type: ignore[attr-defined]
        m.__spec__ = importlib.machinery.ModuleSpec(n, None, is_package=True)
        sys.modules[n] = m
    for n in names:  # parents expose their children as attributes, like real packages
        parent, _, child = n.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, sys.modules[n])
    return list(names)


def install(force: bool = False) -> list[str]:
    """Stub torchvision where the real one cannot be imported; returns the stubbed module names."""
    if not force and _real_import_works("torchvision"):
        return []
    return _install(TORCHVISION_MODULES, STUB_VERSION)


def installed() -> bool:
    return getattr(sys.modules.get("torchvision"), "__specdecode_stub__", False)
