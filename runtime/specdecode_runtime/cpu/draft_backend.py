"""SGLang's attention-backend registry and draft backend factory, extended so ``torch_native`` serves the whole
speculative cycle (:mod:`.attention`)."""

from __future__ import annotations

import functools

TORCH_NATIVE = "torch_native"


def _wrap_create_backend(orig):
    @functools.wraps(orig)
    def _create_backend(self, backend_name, backend_map, error_template, stamps_children=False):
        if TORCH_NATIVE not in backend_map:
            backend_map = dict(backend_map)
            if stamps_children:  # the multi-step draft decode container
                backend_map[TORCH_NATIVE] = lambda: (TORCH_NATIVE, _multi_step(self))
            else:
                backend_map[TORCH_NATIVE] = lambda: (TORCH_NATIVE, _extend(self))
        return orig(self, backend_name, backend_map, error_template, stamps_children)

    _create_backend.__specdecode_cpu__ = True
    return _create_backend


def _extend(factory):
    from .attention import TorchNativeSpecAttnBackend

    return TorchNativeSpecAttnBackend(factory.draft_model_runner)


def _multi_step(factory):
    from .attention import TorchNativeMultiStepDraftBackend

    return TorchNativeMultiStepDraftBackend(factory.draft_model_runner, factory.topk, factory.speculative_num_steps)


def _create_torch_native_backend(runner):
    from .attention import TorchNativeSpecAttnBackend

    return TorchNativeSpecAttnBackend(runner)


_create_torch_native_backend.__specdecode_cpu__ = True  # type: ignore[attr-defined]  # marks our stand-in (a function attribute)


def install() -> None:
    """The ``torch_native`` attention backend (target and draft) gains the verify forward; the draft backend
    factory accepts ``torch_native``."""
    from sglang.srt.layers.attention import attention_registry
    from sglang.srt.speculative.draft_utils import DraftBackendFactory

    attention_registry.ATTENTION_BACKENDS[TORCH_NATIVE] = _create_torch_native_backend

    if not getattr(DraftBackendFactory._create_backend, "__specdecode_cpu__", False):
        DraftBackendFactory._create_backend = _wrap_create_backend(DraftBackendFactory._create_backend)
