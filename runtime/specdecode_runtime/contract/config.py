"""The runtime configuration file: the contract between the renderer (which writes it into a ConfigMap) and the
launcher (which reads it in the pod). Values computed from it live in :mod:`.derived`."""

from __future__ import annotations

from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .algorithms import DEFAULT_ALGORITHM, Algorithm
from .input_files import InputError, load_documents, parse_yaml_documents, validate_model
from .metric_names import DEFAULT_BUCKETS

CONFIG_MOUNT_DIR = "/etc/specdecode"
CONFIG_FILE_NAME = "runtime.yaml"
CONFIG_PATH = f"{CONFIG_MOUNT_DIR}/{CONFIG_FILE_NAME}"
TOKEN_MOUNT_DIR = "/var/run/secrets/specdecode"
TOKEN_FILE_NAME = "token"
TOKEN_PATH = f"{TOKEN_MOUNT_DIR}/{TOKEN_FILE_NAME}"
# Traffic capture (``capture``): where the pods mount the capture claim, and the bounds the CRD and this file share.
CAPTURE_MOUNT_DIR = "/var/lib/specdecode/capture"
CAPTURE_DEFAULT_BYTES = 1 << 30  # 1Gi
CAPTURE_MIN_BYTES = 1 << 20  # 1Mi: room for a few hundred records of a long prompt
CAPTURE_MAX_BYTES = 1 << 40  # 1Ti
CAPTURE_DEFAULT_RETENTION_SECONDS = 24 * 3600
CAPTURE_MIN_RETENTION_SECONDS = 60
CAPTURE_MAX_RETENTION_SECONDS = 90 * 24 * 3600
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: same output, 10x faster


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)


class TargetConfig(_Model):
    model: str
    tensor_parallel_size: int = Field(alias="tensorParallelSize")
    quantization: str | None = None
    context_length: int | None = Field(default=None, alias="contextLength")


class DraftConfig(_Model):
    model: str
    algorithm: Algorithm = DEFAULT_ALGORITHM
    tensor_parallel_size: int = Field(alias="tensorParallelSize")
    ranks: list[int] | None = None


class AutotuneConfig(_Model):
    mode: Literal["Off", "Live", "Rollout"] = "Off"
    min_steps: int = Field(default=1, alias="minSteps")
    max_steps: int = Field(default=7, alias="maxSteps")


class SpeculativeConfig(_Model):
    num_steps: int = Field(alias="numSteps")
    eagle_top_k: int = Field(default=1, alias="eagleTopK")
    num_draft_tokens: int | None = Field(default=None, alias="numDraftTokens")
    candidate_steps: list[int] = Field(alias="candidateSteps")
    autotune: AutotuneConfig = AutotuneConfig()


class NcclConfig(_Model):
    profile: Literal["PCIe", "NVLink", "None"]
    env: dict[str, str] = {}
    # Start-up NCCL preflight over the TP group (``preflight.run_preflight``, exported as
    # ``specdecode_nccl_latency_seconds``). None = on; omitted from the dump so existing runtime.yaml files are unchanged.
    preflight: bool | None = None


class ServerConfig(_Model):
    port: int = Field(default=30000, ge=1, le=65535)
    control_port: int = Field(default=30001, ge=1, le=65535, alias="controlPort")
    token_file: str = Field(default=TOKEN_PATH, alias="tokenFile")
    buckets: list[int] = Field(default=list(DEFAULT_BUCKETS))


class ServedCalibrationConfig(_Model):
    """Served calibration (``served_probe``): before the pod reports healthy, every captured tier decodes ``tokens``
    tokens per request at each batch size of ``batches`` through the pod's own server, and the cycle it served is
    exported as ``specdecode_cost_seconds{stage="cycle"}``. The stage replays cannot see the scheduler's host work
    per cycle, which on a target with a short decode is as large as the GPU work; these points put it into the
    profile the tuner and the planner start from. ``timeoutSeconds`` bounds the whole calibration: past it the pod
    starts serving with the replayed profile alone."""

    batches: list[Annotated[int, Field(ge=1, le=4096)]] = Field(default=[1], min_length=1, max_length=8)
    tokens: int = Field(default=64, ge=8, le=4096)
    timeout_seconds: float = Field(default=300.0, gt=0, le=3600, alias="timeoutSeconds")


class CostProbeConfig(_Model):
    """Start-up cost probe (``cost_probe`` + ``sglang_patch.cost_runner``): after graph capture every TP rank times
    the tiers' forwards on dummy batches, rank 0 exports ``specdecode_cost_seconds``. ``budgetMs`` bounds each point.
    ``served`` (off unless given) adds the served calibration."""

    enabled: bool = True
    budget_ms: float = Field(default=2.0, gt=0, le=100, alias="budgetMs")
    served: ServedCalibrationConfig | None = None


class CaptureConfig(_Model):
    """Capture of served traffic (:mod:`specdecode_runtime.capture`): TP rank 0 appends a sampled share
    (``sampleRatio``) of finished requests, prompt and output token ids, to JSON-lines files under ``dir``; this
    pod's files stay within ``maxBytes`` (oldest removed first) and every capture file older than
    ``retentionSeconds`` is removed. Absent: nothing is captured and the scheduler is not hooked at all."""

    dir: str = Field(default=CAPTURE_MOUNT_DIR, min_length=1)
    max_bytes: int = Field(default=CAPTURE_DEFAULT_BYTES, ge=CAPTURE_MIN_BYTES, le=CAPTURE_MAX_BYTES, alias="maxBytes")
    retention_seconds: int = Field(
        default=CAPTURE_DEFAULT_RETENTION_SECONDS,
        ge=CAPTURE_MIN_RETENTION_SECONDS,
        le=CAPTURE_MAX_RETENTION_SECONDS,
        alias="retentionSeconds",
    )
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0, alias="sampleRatio")


class TopologyConfig(_Model):
    nodes: int = 1
    gpus_per_node: int = Field(default=8, alias="gpusPerNode")
    interconnect: Literal["PCIe", "NVLink"] = "PCIe"


class RuntimeConfig(_Model):
    """What ``specdecode-runtime launch`` needs; written by the renderer as ``runtime.yaml``."""

    api_version: Literal["specdecode.io/runtime/v1"] = Field(default="specdecode.io/runtime/v1", alias="apiVersion")
    name: str
    target: TargetConfig
    draft: DraftConfig
    speculative: SpeculativeConfig
    nccl: NcclConfig
    server: ServerConfig = ServerConfig()
    topology: TopologyConfig = TopologyConfig()
    # None = on with the defaults (omitted from the dump so existing runtime.yaml files are unchanged).
    cost_probe: CostProbeConfig | None = Field(default=None, alias="costProbe")
    extra_args: list[str] = Field(default=[], alias="extraArgs")
    # None = no capture (omitted from the dump: runtime.yaml without it is unchanged).
    capture: CaptureConfig | None = None
    # Where SGLang runs. None = cuda (omitted from the dump so existing runtime.yaml files are unchanged); cpu runs
    # real SGLang with the runtime's CPU kernel stand-ins (specdecode_runtime.cpu), for tests and pre-flight checks.
    device: Literal["cpu", "cuda"] | None = None

    @property
    def target_device(self) -> str:
        return self.device or "cuda"

    def to_yaml(self) -> str:
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return yaml.dump(data, Dumper=_DUMPER, sort_keys=True)

    @classmethod
    def from_yaml(cls, text: str, source: str = CONFIG_FILE_NAME) -> RuntimeConfig:
        """Parsed with the bounded loader; problems raise ``InputError`` with ``field.path: message`` lines."""
        docs = parse_yaml_documents(text, source)
        return _validate(docs, source)


def _validate(docs: list[object], source: str) -> RuntimeConfig:
    """One document, checked as a runtime config. The document count is checked on the list of documents, not on
    the document: a single document that is a YAML list is a wrong type, not "1 YAML documents"."""
    if len(docs) > 1:
        raise InputError(source, [f"holds {len(docs)} YAML documents; expected one runtime config"])
    data = docs[0] if docs else None
    if isinstance(data, dict) and (data.get("kind") == "SpecDecodeDeployment" or "spec" in data):
        raise InputError(
            source,
            [
                f"this is a {data.get('kind') or 'Kubernetes object'}, not a runtime config; runtime.yaml is rendered "
                "from a SpecDecodeDeployment into its <name>-runtime ConfigMap (`specdecode render -f SDD -o runtime-config` prints it)"
            ],
        )
    return validate_model(RuntimeConfig, data, source, what="runtime config")


def load_runtime_config(path: str) -> RuntimeConfig:
    """``runtime.yaml`` from disk through the bounded reader (size, UTF-8, depth, duplicate keys)."""
    docs = load_documents(path)
    return _validate(docs, str(path))
