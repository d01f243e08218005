"""The local directory SGLang is given for each model of runtime.yaml.

A path stays as it is; ``pvc://CLAIM/PATH`` becomes the claim's mount path; ``hf://ORG/NAME[@REVISION]`` becomes the
snapshot directory in the hub cache that the ``fetch-models`` init container filled. The hub is never contacted
here: the lookup is ``snapshot_download(..., local_files_only=True)``, which reads the cache's refs and checks the
snapshot is complete, so a missing or half-fetched model stops the launch with its name before any GPU work.
"""

from __future__ import annotations

from .contract import model_source as ms
from .contract.config import RuntimeConfig


class ModelNotCached(ms.ModelSourceError):
    """An hf:// model the hub cache does not hold (completely)."""


def hub_snapshot(source: ms.HubSource, field: str) -> str:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(source.repo_id, revision=source.revision, local_files_only=True)
    except LocalEntryNotFoundError:
        raise ModelNotCached(
            f"{field}: {source.uri} is not (completely) in the hub cache {constants.HF_HUB_CACHE}; the "
            "fetch-models init container fills it (its log says why it could not)"
        ) from None


def local_path(model: str, field: str) -> str:
    source = ms.parse(model, field)
    if isinstance(source, ms.HubSource):
        return hub_snapshot(source, field)
    return source.local_path()


def resolve(cfg: RuntimeConfig) -> RuntimeConfig:
    """``cfg`` with every model a local directory; :class:`~.contract.model_source.ModelSourceError` (a ValueError)
    naming the field otherwise."""
    target = local_path(cfg.target.model, "target.model")
    draft = local_path(cfg.draft.model, "draft.model")
    if (target, draft) == (cfg.target.model, cfg.draft.model):
        return cfg
    return cfg.model_copy(
        update={
            "target": cfg.target.model_copy(update={"model": target}),
            "draft": cfg.draft.model_copy(update={"model": draft}),
        }
    )
