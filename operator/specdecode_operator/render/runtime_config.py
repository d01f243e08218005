"""SpecDecodeDeployment -> RuntimeConfig: what the pod's launcher reads from the ConfigMap."""

from __future__ import annotations

from specdecode_runtime.contract.capabilities import autotune_steps
from specdecode_runtime.contract.capabilities import serving_problems as contract_serving_problems
from specdecode_runtime.contract.config import (
    AutotuneConfig,
    CaptureConfig,
    CostProbeConfig,
    DraftConfig,
    NcclConfig,
    RuntimeConfig,
    ServedCalibrationConfig,
    ServerConfig,
    SpeculativeConfig,
    TargetConfig,
    TopologyConfig,
)
from specdecode_runtime.contract.derived import draft_tokens_per_cycle
from specdecode_runtime.contract.nccl import resolve_profile

from ..api.models import SpecDecodeDeployment
from ..api.validate import Problem


def nodes_of(sdd: SpecDecodeDeployment) -> int:
    tp, per_node = sdd.spec.target.tensorParallelSize, sdd.spec.placement.gpusPerNode
    return 1 if tp <= per_node else tp // per_node


def runtime_config(sdd: SpecDecodeDeployment, tuned_steps: int | None = None) -> RuntimeConfig:
    """``tuned_steps`` (Rollout mode) replaces the starting step count; spec itself is never changed."""
    spec = sdd.spec
    at = spec.speculative.autotune
    steps, candidates = autotune_steps(
        at.mode, at.minSteps, at.maxSteps, tuned_steps if tuned_steps is not None else spec.speculative.numSteps
    )
    num_draft_tokens = draft_tokens_per_cycle(steps, spec.speculative.eagleTopK, spec.speculative.numDraftTokens)
    return RuntimeConfig(
        name=sdd.metadata.name,
        target=TargetConfig(
            model=spec.target.model,
            tensor_parallel_size=spec.target.tensorParallelSize,
            quantization=spec.target.quantization,
            context_length=spec.target.contextLength,
        ),
        draft=DraftConfig(
            model=spec.draft.model,
            algorithm=spec.draft.algorithm,
            tensor_parallel_size=spec.draft.tensorParallelSize,
            ranks=spec.draft.ranks,
        ),
        speculative=SpeculativeConfig(
            num_steps=steps,
            eagle_top_k=spec.speculative.eagleTopK,
            num_draft_tokens=num_draft_tokens,
            candidate_steps=candidates,
            autotune=AutotuneConfig(mode=at.mode, min_steps=at.minSteps, max_steps=at.maxSteps),
        ),
        nccl=NcclConfig(
            profile=resolve_profile(spec.nccl.profile, spec.placement.interconnect),
            env=dict(sorted(spec.nccl.env.items())),
        ),
        server=ServerConfig(port=spec.runtime.port, control_port=spec.runtime.controlPort),
        topology=TopologyConfig(
            nodes=nodes_of(sdd),
            gpus_per_node=spec.placement.gpusPerNode,
            interconnect=spec.placement.interconnect,
        ),
        extra_args=list(spec.runtime.extraArgs),
        cost_probe=_cost_probe(sdd),
        capture=capture_config(sdd),
    )


def capture_config(sdd: SpecDecodeDeployment) -> CaptureConfig | None:
    """The traffic capture's section, only when spec.draft.adaptation is enabled (and so names its claim, mounted at
    the contract's directory by ``pod.pod_template``); otherwise None and runtime.yaml carries nothing of it."""
    adaptation = sdd.spec.draft.adaptation
    if adaptation is None or not adaptation.enabled or adaptation.capture.claimName is None:
        return None
    capture = adaptation.capture
    return CaptureConfig(
        max_bytes=capture.maxBytes,
        retention_seconds=capture.retentionSeconds,
        sample_ratio=capture.sampleRatio,
    )


def _cost_probe(sdd: SpecDecodeDeployment) -> CostProbeConfig | None:
    """None (the probe's defaults, omitted from runtime.yaml) unless the served calibration is asked for."""
    served = sdd.spec.runtime.servedCalibration
    if served is None:
        return None
    return CostProbeConfig(
        served=ServedCalibrationConfig(
            batches=list(served.batches), tokens=served.tokens, timeout_seconds=float(served.timeoutSeconds)
        )
    )


def serving_problems(sdd: SpecDecodeDeployment) -> list[Problem]:
    """What the specdecode launcher would refuse for this object's pods, as spec field problems: the same
    :func:`~specdecode_runtime.contract.capabilities.serving_problems` ``specdecode-runtime launch`` runs, on the
    ``runtime.yaml`` rendered here, so ``specdecode validate`` and the operator never accept what a pod refuses.
    A stock SGLang image (``runtime.launcher: sglang``) runs without the launcher and its refusals."""
    if sdd.spec.runtime.launcher != "specdecode":
        return []
    return [Problem(spec_field(p.field), p.message) for p in contract_serving_problems(runtime_config(sdd))]


def spec_field(runtime_field: str) -> str:
    """The SpecDecodeDeployment field a ``runtime.yaml`` field is rendered from."""
    renamed = {
        "extraArgs": "spec.runtime.extraArgs",
        "costProbe.served": "spec.runtime.servedCalibration",
        "capture": "spec.draft.adaptation.capture",
    }
    return renamed.get(runtime_field, f"spec.{runtime_field}")
