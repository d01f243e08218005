"""Patch bookkeeping: resolve a dotted SGLang path, replace the binding, and put every original back.

Removal must be exact (tests apply and remove the patches many times in one process, and ``check-sglang --apply``
does it once), so each replacement records whether the owner held the attribute itself or inherited it: an
inherited method is deleted again rather than pinned on the subclass. Each wrapper also carries the function it
replaced as ``__specdecode_original__``, which :func:`.compat.check_patch_points` reads to check the original's
signature while the patches are active.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable


class _ImportBlocked(ImportError):
    """The module exists but importing it needs a package this machine lacks (e.g. a GPU-only dependency)."""

    def __init__(self, module: str, cause: BaseException):
        super().__init__(f"{module}: {type(cause).__name__}: {cause}")
        self.module = module


def _resolve(path: str) -> tuple[Any, str, Any]:
    """(owner, attribute, value) for a dotted path whose prefix is an importable module."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name or (e.name and name.startswith(e.name + ".")) or importlib.util.find_spec(name) is None:
                continue
            raise _ImportBlocked(name, e) from e
        except ImportError as e:
            raise _ImportBlocked(name, e) from e
        owner = obj
        for name in parts[i:-1]:
            owner = getattr(owner, name)
        attr = parts[-1]
        return owner, attr, inspect.getattr_static(owner, attr) if isinstance(owner, type) else getattr(owner, attr)
    raise ImportError(f"cannot import any module prefix of {path}")


@dataclass
class _Binding:
    owner: Any
    attr: str
    original: Any
    had_own: bool
    replacement: Any


@dataclass
class PatchSet:
    """Everything :func:`apply_patches` changed; ``remove()`` puts every original binding back."""

    bindings: list[_Binding] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    def _set(self, owner: Any, attr: str, replacement: Any) -> None:
        had_own = attr in vars(owner) if isinstance(owner, type) else True
        original = vars(owner).get(attr) if isinstance(owner, type) else getattr(owner, attr)
        if isinstance(replacement, types.FunctionType) and original is not None:
            replacement.__specdecode_original__ = (  # type: ignore[attr-defined]
                original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
            )
        self.bindings.append(_Binding(owner, attr, original, had_own, replacement))
        setattr(owner, attr, replacement)

    def wrap(self, target: str, make: Callable[[Callable], Callable]) -> None:
        """Replace ``target`` with ``make(original)``."""
        owner, attr, value = _resolve(target)
        original = getattr(owner, attr)  # bound lookup through the MRO for inherited methods
        self._set(owner, attr, make(original))
        self.targets.append(target)

    def rebind_everywhere(self, target: str, make: Callable[[Callable], Callable], prefix: str = "sglang.") -> None:
        """Wrap a function and every ``from X import f`` binding of it in modules under ``prefix``."""
        owner, attr, original = _resolve(target)
        new = make(original)
        self._set(owner, attr, new)
        for name, mod in list(sys.modules.items()):
            if not name.startswith(prefix) or mod is None or mod is owner:
                continue
            for k, v in list(vars(mod).items()):
                if v is original:
                    self._set(mod, k, new)
        self.targets.append(target)

    def remove(self) -> None:
        for b in reversed(self.bindings):
            if b.had_own:
                setattr(b.owner, b.attr, b.original)
            else:
                with contextlib.suppress(AttributeError):
                    delattr(b.owner, b.attr)
        self.bindings.clear()
        self.targets.clear()
