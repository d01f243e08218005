"""NCCL profiles as data, each value with the reason it is set.

Shared by the renderer (pod environment) and the launcher (re-applied after SGLang overwrites some variables).
The profiles come from the PCIe lesson: on an 8-GPU PCIe box, small-message all-reduce latency decides decode
speed, NCCL often mis-detects the topology, and LL128 is unsafe on PCIe. No profile ever turns NVLink multicast
(NVLS) on: every profile, including ``None``, pins it off.
"""

from __future__ import annotations

from dataclasses import dataclass

PROFILE_NAMES = ("PCIe", "NVLink", "None")
AUTO = "Auto"


@dataclass(frozen=True)
class NcclSetting:
    name: str
    value: str
    reason: str
    single_node_only: bool = False


# Always set, whatever the profile: NVLink multicast stays off (it is not needed for decode-sized messages and
# it is unsafe on shared machines), and symmetric-memory / NVSHMEM multicast follow the same rule.
MULTICAST_OFF: tuple[NcclSetting, ...] = (
    NcclSetting("NCCL_NVLS_ENABLE", "0", "NVLink SHARP/multicast stays off; decode all-reduces are latency-bound"),
    NcclSetting("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "keep torch symmetric memory off multicast, like NVLS"),
    NcclSetting("NVSHMEM_DISABLE_NVLS", "1", "keep NVSHMEM off NVLink multicast, like NVLS"),
)

PROFILES: dict[str, tuple[NcclSetting, ...]] = {
    "PCIe": (
        NcclSetting(
            "NCCL_P2P_LEVEL",
            "SYS",
            "8-GPU TP spans both CPU sockets on most PCIe boxes; without SYS, cross-socket pairs fall back to SHM "
            "(90 vs 70 tok/s at one request with vs without P2P). Override with PHB on single-root boxes that hang.",
        ),
        NcclSetting(
            "NCCL_PROTO",
            "^LL128",
            "small decode all-reduces want LL; LL128 relies on ordered 128-byte stores that PCIe does not guarantee "
            "(silent corruption risk), so it is excluded, never forced",
        ),
        NcclSetting(
            "NCCL_MIN_NCHANNELS",
            "8",
            "PCIe boxes often get 2 channels; 8 raised bus bandwidth 22.2 -> 37.6 GB/s for prefill-sized messages",
        ),
        NcclSetting(
            "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
            "1",
            "dedicated LL buffers, as in the community 8-GPU PCIe recipes",
        ),
        NcclSetting(
            "NCCL_IB_DISABLE",
            "1",
            "a single PCIe node has no InfiniBand to probe; skipping the probe avoids start-up delays",
            single_node_only=True,
        ),
        NcclSetting(
            "NCCL_CUMEM_ENABLE",
            "0",
            "cuMem allocations add nothing on PCIe; SGLang sets this itself, so the launcher re-applies it",
        ),
    ),
    "NVLink": (
        NcclSetting(
            "NCCL_CUMEM_ENABLE",
            "0",
            "matches SGLang's own default; the launcher re-applies it after SGLang's environment set-up",
        ),
    ),
    "None": (),
}


def resolve_profile(profile: str, interconnect: str) -> str:
    """``Auto`` follows the declared interconnect; any other name is returned as is."""
    if profile == AUTO:
        return "NVLink" if interconnect == "NVLink" else "PCIe"
    if profile not in PROFILES:
        raise ValueError(f"unknown NCCL profile {profile!r}; allowed: Auto, {', '.join(PROFILE_NAMES)}")
    return profile


def profile_settings(name: str, *, multi_node: bool = False) -> list[NcclSetting]:
    """The settings of a resolved profile, multicast-off first, in a stable order."""
    if name not in PROFILES:
        raise ValueError(f"unknown NCCL profile {name!r}; allowed: {', '.join(PROFILE_NAMES)}")
    chosen = [s for s in PROFILES[name] if not (multi_node and s.single_node_only)]
    return [*MULTICAST_OFF, *chosen]


def profile_env(name: str, *, multi_node: bool = False, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a profile; ``overrides`` (the user's ``nccl.env``) win, except that multicast stays off."""
    env = {s.name: s.value for s in profile_settings(name, multi_node=multi_node)}
    for key, value in (overrides or {}).items():
        env[key] = str(value)
    for s in MULTICAST_OFF:
        env[s.name] = s.value
    return dict(sorted(env.items()))
