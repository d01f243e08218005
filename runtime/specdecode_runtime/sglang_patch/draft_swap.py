"""The draft of one TP rank as the in-place swap writes it (:class:`~specdecode_runtime.draft_swap.DraftTarget`).

**What the draft owns (the pinned SGLang).** ``EagleDraftWorker.init_lm_head`` replaces parts of the draft model by the
target's after the draft checkpoint was loaded, so those parts are the target's and a swap must never write them:

* EAGLE-3 (``LlamaForCausalLMEagle3``): ``set_embed`` makes the draft's ``embed_tokens`` the target's embedding
  (S's gathered shard with a split draft), unless the draft's ``hidden_size`` differs from its
  ``target_hidden_size`` (then the draft keeps the embedding its checkpoint holds). Its ``lm_head`` is its own
  (a ``draft_vocab_size`` head) unless ``load_lm_head_from_target`` (no ``draft_vocab_size`` in the config:
  ``set_embed_and_head`` takes the target's head too) or ``tie_word_embeddings`` (the head is the embedding).
  ``d2t`` (draft -> target token ids) becomes the worker's ``hot_token_id``, which the captured draft graphs index:
  it is written in place too; ``t2d`` is not used.
* EAGLE (``LlamaForCausalLMEagle``): ``set_embed_and_head`` takes both the embedding and the head from the target.

Everything else is the draft's: its decoder layers, ``fc``, the norms. A parameter is written only if it is none
of those and shares no storage with a target parameter or a gathered vocabulary shard (checked by storage, so
another model class that shares something else is safe too). The checkpoint goes through the model's own
``load_weights`` (its name mapping and each parameter's TP-sharding ``weight_loader``), with every loader guarded:
a loader called for a shared parameter does nothing. Before and after, every parameter and buffer's storage,
shape and dtype are compared: a loader that reallocated would leave the captured graphs on the old storage, and
the swap then fails and is rolled back.

Refused in place (``unsupported``): a quantized draft (its weights are transformed after loading) and weights
repacked for the CPU's AMX kernels.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Iterator, Mapping

from ..draft_checkpoint import _tensor_bytes
from . import process_state as state

log = logging.getLogger("specdecode.draft_swap")

HOT_TOKEN_ID = "hot_token_id"  # the snapshot's key for the worker's d2t map


def _storage(t: Any) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:  # noqa: BLE001 - a tensor without storage (meta): never shared
        return -1


def _sync(device: Any) -> None:
    import torch

    if device is not None and getattr(device, "type", str(device)) == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)


class SGLangDraftTarget:
    """Built once per rank from the ``EAGLEWorkerV2`` after graph capture; never raises (a draft it cannot handle
    is ``unsupported``, and swaps are then refused with that reason)."""

    def __init__(self, worker: Any) -> None:
        self.model: Any = None
        self.draft_worker: Any = None
        self.source = ""
        self.unsupported: str | None = None
        self.shared_names: set[str] = set()
        self._shared_storage: set[int] = set()
        self.device: Any = None
        try:
            self._bind(worker)
        except Exception as e:  # noqa: BLE001 - serving never depends on swaps
            log.warning("specdecode: draft swaps unavailable on this rank: %s: %s", type(e).__name__, e)
            self.unsupported = f"{type(e).__name__}: {e}"

    @property
    def holds_draft(self) -> bool:
        return self.model is not None

    def _bind(self, worker: Any) -> None:
        server_args = getattr(worker, "server_args", None)
        self.source = str(getattr(server_args, "speculative_draft_model_path", "") or "")
        dw = getattr(worker, "_draft_worker", None)
        runner = getattr(dw, "draft_runner", None)
        model = getattr(runner, "model", None)  # None outside S: the remote draft worker holds no weights
        if model is None:
            return
        self.model, self.draft_worker = model, dw
        self.device = next((p.device for p in model.parameters()), None)
        self.source = str(getattr(getattr(runner, "model_config", None), "model_path", "") or self.source)
        target_model = getattr(getattr(getattr(worker, "_target_worker", None), "model_runner", None), "model", None)
        if target_model is not None:
            self._shared_storage.update(_storage(p) for p in target_model.parameters())
        st = state.split
        if st is not None:
            self._shared_storage.update(_storage(t) for t in st.gathered if t is not None)
        self._shared_storage.discard(-1)
        self.shared_names = self._shared_by_rule(dw, model)
        self.unsupported = self._why_unsupported(model)

    @staticmethod
    def _shared_by_rule(dw: Any, model: Any) -> set[str]:
        """The parameters ``init_lm_head`` took from the target (module docstring)."""
        names = dict(model.named_parameters())
        embed = next((n for n in names if n.endswith("embed_tokens.weight")), None)
        head = "lm_head.weight" if "lm_head.weight" in names else None
        cfg: Any = getattr(model, "config", None)
        eagle3 = bool(getattr(getattr(dw, "speculative_algorithm", None), "is_eagle3", lambda: False)())
        out: set[str] = set()
        if eagle3:
            # LlamaForCausalLMEagle3.set_embed keeps the draft's own embedding exactly then
            own_embed = hasattr(cfg, "target_hidden_size") and cfg.target_hidden_size != cfg.hidden_size
            if embed and not own_embed:
                out.add(embed)
            if head and (
                getattr(model, "load_lm_head_from_target", False) or getattr(cfg, "tie_word_embeddings", False)
            ):
                out.add(head)
        else:
            out.update(n for n in (embed, head) if n)
        return out

    @staticmethod
    def _why_unsupported(model: Any) -> str | None:
        if not callable(getattr(model, "load_weights", None)):
            return f"{type(model).__name__} has no load_weights"
        if getattr(model, "quant_config", None) is not None:
            return "a quantized draft (its weights are transformed after loading)"
        if any(getattr(m, "use_intel_amx_backend", False) for m in model.modules()):
            return "weights repacked for the CPU's AMX kernels after loading"
        return None

    # ---- what a swap writes ------------------------------------------------------------------------------------------
    def _shared(self, name: str, p: Any) -> bool:
        return name in self.shared_names or _storage(p) in self._shared_storage

    def owned(self) -> list[tuple[str, Any]]:
        """The draft's own parameters, in name order."""
        return sorted((n, p) for n, p in self.model.named_parameters() if not self._shared(n, p))

    def _hot(self) -> Any:
        return getattr(self.draft_worker, "hot_token_id", None)

    def snapshot(self) -> dict[str, Any]:
        import torch

        _sync(self.device)
        with torch.no_grad():
            out = {n: p.detach().to("cpu", copy=True) for n, p in self.owned()}
            hot = self._hot()
            if hot is not None:
                out[HOT_TOKEN_ID] = hot.detach().to("cpu", copy=True)
        return out

    def restore(self, backup: Mapping[str, Any]) -> None:
        import torch

        _sync(self.device)
        with torch.no_grad():
            for n, p in self.owned():
                if n in backup:
                    p.data.copy_(backup[n])
            hot = self._hot()
            if hot is not None and HOT_TOKEN_ID in backup:
                hot.copy_(backup[HOT_TOKEN_ID])
        _sync(self.device)

    def _layout(self) -> dict[str, tuple]:
        out = {f"param {n}": (p.data_ptr(), tuple(p.shape), p.dtype) for n, p in self.model.named_parameters()}
        out.update({f"buffer {n}": (b.data_ptr(), tuple(b.shape), b.dtype) for n, b in self.model.named_buffers()})
        hot = self._hot()
        if hot is not None:
            out[HOT_TOKEN_ID] = (hot.data_ptr(), tuple(hot.shape), hot.dtype)
        return out

    def load(self, tensors: Mapping[str, Any]) -> None:
        """Write ``tensors`` (a validated checkpoint, CPU) into the served draft in place."""
        import torch

        model = self.model
        before = self._layout()
        hot_before = getattr(model, "hot_token_id", None)
        written: list[str] = []
        guards = self._guard_loaders(written)
        _sync(self.device)
        try:
            with torch.no_grad():
                model.load_weights(iter(sorted(tensors.items())))
                hot = self._hot()
                new_hot = getattr(model, "hot_token_id", None)
                if hot is not None and "d2t" in tensors and new_hot is not None and new_hot is not hot_before:
                    hot.copy_(new_hot.to(hot.device, hot.dtype))  # the map the captured draft graphs index
        finally:
            self._unguard(guards)
            if hasattr(model, "hot_token_id"):
                model.hot_token_id = hot_before
        _sync(self.device)
        after = self._layout()
        moved = sorted(k for k in before if after.get(k) != before[k])
        if moved or set(after) != set(before):
            raise RuntimeError(f"the load reallocated {moved[:4] or sorted(set(after) ^ set(before))[:4]}")
        if not written:
            raise RuntimeError("the checkpoint wrote none of the draft's parameters")

    def _guard_loaders(self, written: list[str]) -> list[tuple[Any, bool, Any]]:
        """Every parameter's ``weight_loader`` (the attribute ``load_weights`` looks up) wrapped: shared
        parameters are skipped, the others loaded by their own loader. Returns what to put back."""
        from sglang.srt.model_loader.weight_utils import default_weight_loader

        saved: list[tuple[Any, bool, Any]] = []
        for name, p in self.model.named_parameters():
            had = "weight_loader" in p.__dict__
            orig = p.__dict__.get("weight_loader", default_weight_loader)
            if not had and hasattr(p, "weight_loader"):  # a loader that is not a plain attribute (a property)
                self._unguard(saved)
                raise RuntimeError(f"{name}: its weight_loader cannot be guarded")
            p.weight_loader = self._guarded(name, p, orig, written)
            saved.append((p, had, orig))
        return saved

    def _guarded(self, name: str, param: Any, orig: Any, written: list[str]) -> Any:
        shared = self._shared(name, param)

        def weight_loader(p: Any, loaded: Any, *args: Any, **kwargs: Any) -> Any:
            if shared:
                return None  # the target's tensor: never written by a draft swap
            written.append(name)
            return orig(p, loaded, *args, **kwargs)

        return weight_loader

    @staticmethod
    def _unguard(saved: list[tuple[Any, bool, Any]]) -> None:
        for p, had, orig in saved:
            if had:
                p.weight_loader = orig
            else:
                p.__dict__.pop("weight_loader", None)

    # ---- observation (the self-test) ------------------------------------------------------------------------------
    def params_digest(self) -> str | None:
        """sha256 over this rank's owned parameter shards and the d2t map (name order): what the swap wrote here."""
        if self.model is None:
            return None
        h = hashlib.sha256()
        for name, t in self._observed():
            h.update(name.encode())
            h.update(_tensor_bytes(t.detach().to("cpu")))
        return "sha256:" + h.hexdigest()

    def _observed(self) -> Iterator[tuple[str, Any]]:
        yield from self.owned()
        hot = self._hot()
        if hot is not None:
            yield HOT_TOKEN_ID, hot
