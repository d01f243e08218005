"""SpecDecodeDeployment -> RuntimeConfig: what the pod's launcher reads from the ConfigMap."""

from __future__ import annotations

from specdecode_runtime.contract.config import (
    AutotuneConfig,
    DraftConfig,
    NcclConfig,
    RuntimeConfig,
    ServerConfig,
    SpeculativeConfig,
    TargetConfig,
    TopologyConfig,
)
from specdecode_runtime.contract.derived import autotune_steps, draft_tokens_per_cycle
from specdecode_runtime.contract.nccl import resolve_profile

from ..api.models import SpecDecodeDeployment


def nodes_of(sdd: SpecDecodeDeployment) -> int:
    tp, per_node = sdd.spec.target.tensorParallelSize, sdd.spec.placement.gpusPerNode
    return 1 if tp <= per_node else tp // per_node


def runtime_config(sdd: SpecDecodeDeployment, tuned_steps: int | None = None) -> RuntimeConfig:
    """``tuned_steps`` (Rollout mode) replaces the starting step count; spec itself is never changed."""
    spec = sdd.spec
    at = spec.speculative.autotune
    steps, candidates = autotune_steps(at.mode, at.minSteps, at.maxSteps,
                                       tuned_steps if tuned_steps is not None else spec.speculative.numSteps)
    num_draft_tokens = draft_tokens_per_cycle(steps, spec.speculative.eagleTopK, spec.speculative.numDraftTokens)
    return RuntimeConfig(
        name=sdd.metadata.name,
        target=TargetConfig(
            model=spec.target.model,
            tensorParallelSize=spec.target.tensorParallelSize,
            quantization=spec.target.quantization,
            contextLength=spec.target.contextLength,
        ),
        draft=DraftConfig(
            model=spec.draft.model,
            algorithm=spec.draft.algorithm,
            tensorParallelSize=spec.draft.tensorParallelSize,
            ranks=spec.draft.ranks,
        ),
        speculative=SpeculativeConfig(
            numSteps=steps,
            eagleTopK=spec.speculative.eagleTopK,
            numDraftTokens=num_draft_tokens,
            candidateSteps=candidates,
            autotune=AutotuneConfig(mode=at.mode, minSteps=at.minSteps, maxSteps=at.maxSteps),
        ),
        nccl=NcclConfig(
            profile=resolve_profile(spec.nccl.profile, spec.placement.interconnect),
            env=dict(sorted(spec.nccl.env.items())),
        ),
        server=ServerConfig(port=spec.runtime.port, controlPort=spec.runtime.controlPort),
        topology=TopologyConfig(
            nodes=nodes_of(sdd),
            gpusPerNode=spec.placement.gpusPerNode,
            interconnect=spec.placement.interconnect,
        ),
        extraArgs=list(spec.runtime.extraArgs),
    )
