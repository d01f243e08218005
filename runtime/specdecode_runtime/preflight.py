"""NCCL preflight: time small all-reduces and the proposal broadcast on the TP group at startup.

Decode on a TP8 box is bound by small-collective latency, and that latency varies by 2-10x with topology detection,
protocol and P2P settings (anchors-perf.md §3.2). Measuring it once at startup, in the pod, with the NCCL
environment the operator rendered, turns "is this box's NCCL healthy, and is a split draft worth it" into a number the
operator can put in status and the planner can use.

All ranks must call ``run_preflight`` together (it is a sequence of collectives). Every rank returns the same numbers:
the per-rank means are max-reduced, because a collective is as slow as its slowest rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

DEFAULT_ALL_REDUCE_BYTES = (4096, 65536, 1 << 20)


@dataclass(frozen=True)
class CollectiveTiming:
    op: str  # "all_reduce" | "broadcast"
    nbytes: int
    seconds: float  # mean latency of one call, max over ranks
    iterations: int


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_op(fn, iterations: int, warmup: int, device) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / iterations


def run_preflight(
    group=None,
    device=None,
    all_reduce_bytes: Iterable[int] = DEFAULT_ALL_REDUCE_BYTES,
    broadcast_shape: tuple[int, int] = (1, 6),
    iterations: int = 200,
    warmup: int = 20,
    src: int = 0,
) -> list[CollectiveTiming]:
    """Back-to-back timing (as nccl-tests does) of bf16 all-reduces of each size and of the int64
    ``broadcast_shape`` proposal broadcast ([batch, steps+1] draft tokens) from ``src``. On CPU/gloo bf16 is
    replaced by float32 (gloo has no bf16 sum); sizes stay in bytes."""
    import torch
    import torch.distributed as dist

    if iterations < 1 or warmup < 0:
        raise ValueError(f"iterations must be >= 1 and warmup >= 0, got {iterations}, {warmup}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    results: list[CollectiveTiming] = []

    def _agree(seconds: float) -> float:
        t = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return float(t.item())

    for nbytes in all_reduce_bytes:
        if nbytes < elem:
            raise ValueError(f"all-reduce size must be >= {elem} bytes, got {nbytes}")
        buf = torch.ones(nbytes // elem, dtype=dtype, device=device)
        mean = _time_op(lambda buf=buf: dist.all_reduce(buf, group=group), iterations, warmup, device)
        results.append(CollectiveTiming("all_reduce", int(nbytes), _agree(mean), iterations))

    tokens = torch.zeros(broadcast_shape, dtype=torch.int64, device=device)
    mean = _time_op(lambda: dist.broadcast(tokens, src=src, group=group), iterations, warmup, device)
    results.append(CollectiveTiming("broadcast", tokens.numel() * tokens.element_size(), _agree(mean), iterations))
    return results


def export(results: Iterable[CollectiveTiming], metrics) -> None:
    """Publish on ``specdecode_nccl_latency_seconds{op,bytes}`` (a ``metrics.SpecMetrics``)."""
    for r in results:
        metrics.set_nccl_latency(r.op, r.nbytes, r.seconds)


def summary(results: Iterable[CollectiveTiming]) -> dict[str, dict[str, float]]:
    """Microseconds by op and size, the shape the operator copies into ``status.runtime.ncclLatencyUs``."""
    out: dict[str, dict[str, float]] = {}
    for r in results:
        out.setdefault(r.op, {})[str(r.nbytes)] = round(r.seconds * 1e6, 2)
    return out
