#!/usr/bin/env python3
"""Split draft vs sharded draft on real multi-GPU NCCL: the measurement behind the draft-TP recommendation.

Why: whether running the EAGLE-3 draft on its own small process group S (plus one proposal broadcast per cycle)
beats sharding it over the whole target TP group is a per-cluster question. This script measures both on the
machine it runs on, with the runtime's own ``draft_group`` module (``DraftGroups`` for the groups,
``ProposalBroadcaster`` for the packed-proposal broadcast), so the simulator's H200 scenario can be calibrated from
real numbers instead of assumed ones.

What runs (one process per GPU, world size N = GPUs; gloo + CPU with ``--cpu`` for the smoke test):

1. **Draft step**, CUDA graphs on, per batch size: the draft sharded over all N ranks (2 all-reduces in the layer +
   the all-gather of the vocab-sharded logits, as SGLang's LogitsProcessor does; also a variant with the
   vocab-parallel embedding's all-reduce, SGLang's ``VocabParallelEmbedding``), vs the draft on S = {0} (and on
   S of size d for every d < N dividing N) plus one ``ProposalBroadcaster.broadcast`` of the packed proposals.
2. **Full cycle** for steps = 1..7: draft extend (steps+1 tokens/seq, with EAGLE-3's fc fusion) + the draft steps
   (+ the broadcast when split) + a target-like verify stand-in: a stack of TP-sharded dense layers with 2
   all-reduces each (no attention compute), its depth calibrated so one decode step (batch 1, 1 token) takes the
   scenario's ``verify.base + verify.perToken`` (read from ``bench/scenarios/h200-nvlink.yaml``).
3. **NCCL profiles**: 1-2 are repeated under each profile (``specdecode_runtime.contract.nccl.profile_env``): ``nvlink``
   (the runtime's NVLink profile on this box's defaults) and ``pcie-emulated`` (the runtime's PCIe profile plus
   ``NCCL_P2P_DISABLE=1``, which routes GPU-GPU traffic through host memory: an EMULATION on an NVLink box, not a
   PCIe box), plus the all-reduce latency per message size (4 KB .. 1 MB), in a CUDA graph and eager.

Every profile runs in fresh processes (NCCL reads its environment once per process). NVLink multicast stays off
everywhere (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1), in this process and
in every environment it builds. A hard ``--time-limit`` bounds the whole run: each phase gets a deadline that the
ranks agree on (rank 0 decides, over a gloo control group, so no rank skips a collective alone) and the parent
kills workers that outlive it; partial results are written after every part.

Timing: rank 0 (always S's leader) records CUDA events around ``--reps`` back-to-back replays; a sample is their
mean; ``--samples`` samples (a gloo barrier before each) give the median and p10/p90 reported.

Usage (2x H200):  python3 bench/gpu/micro/multigpu_draft.py --out $OUT
CPU smoke test:   python3 bench/gpu/micro/multigpu_draft.py --cpu --tiny --world 2 --out /tmp/x
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import shapes  # noqa: E402

from specdecode_runtime.contract.nccl import MULTICAST_OFF, profile_env  # noqa: E402
from specdecode_runtime.draft_group import (  # noqa: E402
    DraftGroups,
    DraftPlacement,
    ProposalBroadcaster,
    ProposalLayout,
)

MULTICAST_ENV = {s.name: s.value for s in MULTICAST_OFF}
os.environ.update(MULTICAST_ENV)  # before anything can create a communicator; children inherit it

PROFILES = {
    "nvlink": ("runtime NCCL profile 'NVLink' (this box's NCCL defaults + NCCL_CUMEM_ENABLE=0)", {}),
    "pcie-emulated": (
        "runtime NCCL profile 'PCIe' + NCCL_P2P_DISABLE=1: GPU-GPU traffic through host memory. An EMULATION of a "
        "PCIe box on NVLinked GPUs, not a PCIe measurement",
        {"NCCL_P2P_DISABLE": "1"},
    ),
}
PROFILE_RUNTIME_NAME = {"nvlink": "NVLink", "pcie-emulated": "PCIe"}
AR_SIZES = [4096, 16384, 65536, 262144, 1048576]
STEPS_ORDER = [1, 3, 5, 7, 2, 4, 6]  # if the deadline cuts part 2, whole step counts go, every batch size stays


@dataclass(frozen=True)
class Shape(shapes.DraftHead):
    ctx: int = 2048
    verify_ffn: int = 18432  # the verify stand-in's layer: qkv-sized + o-sized + MLP, dense, TP-sharded

    @classmethod
    def tiny(cls, **more: int) -> Shape:
        return super().tiny(ctx=16, verify_ffn=128, **more)  # type: ignore[return-value]

    def draft_weight_bytes(self) -> int:
        h, qkv = self.hidden, (self.heads + 2 * self.kv_heads) * self.head_dim
        return 2 * (qkv * 2 * h + h * self.heads * self.head_dim + 3 * self.ffn * h + self.draft_vocab * h)


# --------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _w(gen: torch.Generator, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    t = torch.empty(shape, device=device, dtype=dtype)
    t.normal_(0.0, shape[-1] ** -0.5, generator=gen)  # random, never zeros (zeros time faster)
    return t


def _gen(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _all_gather_rows(local: torch.Tensor, t: int, group) -> torch.Tensor:
    """[t, *local.shape] gathered over ``group`` (all_gather_into_tensor on NCCL; list form on gloo)."""
    out = torch.empty((t, *local.shape), device=local.device, dtype=local.dtype)
    if local.is_cuda:
        dist.all_gather_into_tensor(out, local.contiguous(), group=group)
    else:
        parts = [torch.empty_like(local) for _ in range(t)]
        dist.all_gather(parts, local.contiguous(), group=group)
        out.copy_(torch.stack(parts))
    return out


class Draft:
    """An EAGLE-3-sized draft (one decoder layer + 32k lm_head), sharded t ways over ``group`` (rank ``r``).

    Shards as SGLang does at draft TP t: qkv/gate_up column-parallel, o/down row-parallel (one all-reduce each),
    lm_head vocab-parallel with an all-gather of the logits before the argmax (topk = 1). EAGLE-3's fc (3H -> H)
    is replicated. The embedding is held whole; ``embed_allreduce`` looks it up vocab-parallel (masked lookup in
    this rank's rows + an all-reduce), the extra collective of SGLang's ``VocabParallelEmbedding``.
    """

    def __init__(
        self,
        s: Shape,
        t: int,
        r: int,
        group,
        max_bs: int,
        device: torch.device,
        dtype: torch.dtype,
        embed_allreduce: bool = False,
    ):
        self.s, self.t, self.r, self.group, self.embed_allreduce = s, t, r, group, embed_allreduce
        g = _gen(device, 1000 + r)
        h = s.hidden
        self.hq, self.hkv = s.heads // t, max(1, s.kv_heads // t)
        qkv_out = (self.hq + 2 * self.hkv) * s.head_dim
        self.embed = _w(g, (s.target_vocab, h), device, dtype)
        self.vshard = s.target_vocab // t
        self.fc = _w(g, (h, 3 * h), device, dtype)
        self.qkv = _w(g, (qkv_out, 2 * h), device, dtype)
        self.o = _w(g, (h, self.hq * s.head_dim), device, dtype)
        self.gate_up = _w(g, (2 * (s.ffn // t), h), device, dtype)
        self.down = _w(g, (h, s.ffn // t), device, dtype)
        self.lm_head = _w(g, (s.draft_vocab // t, h), device, dtype)
        self.norms = [torch.ones(h, device=device, dtype=dtype) for _ in range(4)]
        self.k_cache = _w(g, (max_bs, self.hkv, s.ctx, s.head_dim), device, dtype)
        self.v_cache = _w(g, (max_bs, self.hkv, s.ctx, s.head_dim), device, dtype)
        self.d2t = torch.arange(s.draft_vocab, device=device, dtype=torch.int64)

    def _ar(self, x: torch.Tensor) -> torch.Tensor:
        if self.t > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if not (self.embed_allreduce and self.t > 1):
            return self.embed[tokens]
        lo = self.r * self.vshard
        local = tokens - lo
        mask = (local >= 0) & (local < self.vshard)
        rows = self.embed[lo : lo + self.vshard][local.clamp(0, self.vshard - 1)]
        return self._ar(rows * mask[..., None].to(rows.dtype))

    def forward(self, tokens: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [bs, q], hidden [bs, q, H] -> (next tokens [bs, q], hidden [bs, q, H])."""
        s = self.s
        bs, q = tokens.shape
        n1, n2, n3, n4 = self.norms
        emb = self._embed(tokens)
        inp = torch.cat((_rms(emb, n1), _rms(hidden, n2)), -1)
        qkv = inp @ self.qkv.T
        qh, kh, vh = qkv.split([self.hq * s.head_dim, self.hkv * s.head_dim, self.hkv * s.head_dim], -1)
        qh = qh.view(bs, q, self.hq, s.head_dim).transpose(1, 2)
        self.k_cache[:bs, :, s.ctx - q :].copy_(kh.view(bs, q, self.hkv, s.head_dim).transpose(1, 2))
        self.v_cache[:bs, :, s.ctx - q :].copy_(vh.view(bs, q, self.hkv, s.head_dim).transpose(1, 2))
        att = F.scaled_dot_product_attention(qh, self.k_cache[:bs], self.v_cache[:bs], enable_gqa=True)
        x = hidden + self._ar(att.transpose(1, 2).reshape(bs, q, -1) @ self.o.T)
        gate, up = (_rms(x, n3) @ self.gate_up.T).chunk(2, -1)
        x = x + self._ar((F.silu(gate) * up) @ self.down.T)
        logits = (_rms(x, n4) @ self.lm_head.T).reshape(bs * q, -1)
        if self.t > 1:  # the vocab gather: [t, n, V/t] -> [n, V]
            logits = _all_gather_rows(logits, self.t, self.group).permute(1, 0, 2).reshape(bs * q, -1)
        return self.d2t[logits.argmax(-1)].view(bs, q), x


class Verify:
    """Target verify stand-in: ``layers`` TP-sharded dense layers (qkv-sized column + o-sized row + all-reduce,
    gate_up column + down row + all-reduce), weights cycled over a few sets far larger than L2 so every layer
    streams its weights from HBM, as a real decode step does."""

    def __init__(
        self, s: Shape, n: int, r: int, group, layers: int, device: torch.device, dtype: torch.dtype, sets: int = 4
    ):
        g = _gen(device, 2000 + r)
        h, qkv = s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim
        self.group, self.n, self.layers, self.attn_cols = group, n, layers, s.heads * s.head_dim // n
        self.sets = [
            dict(
                qkv=_w(g, (qkv // n, h), device, dtype),
                o=_w(g, (h, s.heads * s.head_dim // n), device, dtype),
                gate_up=_w(g, (2 * (s.verify_ffn // n), h), device, dtype),
                down=_w(g, (h, s.verify_ffn // n), device, dtype),
            )
            for _ in range(sets)
        ]
        self.norm = torch.ones(h, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.layers):
            w = self.sets[i % len(self.sets)]
            a = (_rms(x, self.norm) @ w["qkv"].T)[..., : self.attn_cols]
            o = a @ w["o"].T
            if self.n > 1:
                dist.all_reduce(o, group=self.group)
            x = x + o
            gate, up = (_rms(x, self.norm) @ w["gate_up"].T).chunk(2, -1)
            d = (F.silu(gate) * up) @ w["down"].T
            if self.n > 1:
                dist.all_reduce(d, group=self.group)
            x = x + d
        return x


# --------------------------------------------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------------------------------------------


class Ctx:
    """Per-rank run context: device, groups, the gloo control group and the shared deadline."""

    def __init__(self, rank: int, world: int, device: torch.device, deadline: float):
        self.rank, self.world, self.device, self.deadline = rank, world, device, deadline
        self.cuda = device.type == "cuda"
        self.ctl = dist.new_group(backend="gloo")

    def barrier(self) -> None:
        dist.barrier(group=self.ctl)

    def go(self, need_s: float = 0.0) -> bool:
        """Rank 0's verdict on 'time left for this item', shared so no rank skips a collective alone."""
        flag = torch.tensor([1 if time.time() + need_s < self.deadline else 0], dtype=torch.int64)
        dist.broadcast(flag, src=0, group=self.ctl)
        return bool(flag.item())

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def graph(self, fn, active: bool = True):
        """Capture ``fn`` in a CUDA graph (warm-up first, so communicators exist); eager on a CPU. Ranks that are
        not ``active`` capture nothing (a graph replayed on S only must not be captured elsewhere)."""
        if not active:
            return None
        if not self.cuda:
            return fn
        st = torch.cuda.Stream(self.device)
        st.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(st):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(st)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        self.sync()
        return g.replay

    def timed(self, fn, reps: int, samples: int, active: bool = True, warm: int = 2) -> list[float]:
        """Per-call milliseconds: ``samples`` means of ``reps`` back-to-back calls, timed on this rank (events on a
        GPU). Inactive ranks only join the barriers. Every rank must call this with the same reps/samples."""
        out: list[float] = []
        if active:
            for _ in range(warm):
                fn()
        self.sync()
        for _ in range(samples):
            self.sync()
            self.barrier()
            if not active:
                continue
            if self.cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(reps):
                    fn()
                e1.record()
                e1.synchronize()
                out.append(e0.elapsed_time(e1) / reps)
            else:
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                out.append((time.perf_counter() - t0) * 1e3 / reps)
        self.sync()
        return out


def stats(v: list[float]) -> dict:
    if not v:
        return {}
    s = sorted(v)
    return {
        "median_ms": statistics.median(s),
        "p10_ms": s[len(s) // 10],
        "p90_ms": s[min(len(s) - 1, (len(s) * 9) // 10)],
        "min_ms": s[0],
        "max_ms": s[-1],
        "n": len(s),
    }


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


# --------------------------------------------------------------------------------------------------------------
# The worker: one process per GPU, one profile
# --------------------------------------------------------------------------------------------------------------


def _worker(rank: int, cfg: dict) -> None:
    world = cfg["world"]
    os.environ.update(MULTICAST_ENV)
    if cfg["cpu"]:
        device, backend, dtype = torch.device("cpu"), "gloo", torch.float32
        torch.set_num_threads(1)
    else:
        device, backend, dtype = torch.device("cuda", rank), "nccl", torch.bfloat16
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank, world_size=world)
    ctx = Ctx(rank, world, device, cfg["deadline"])
    s = Shape(**cfg["shape"])
    res: dict = {"profile": cfg["profile"], "world": world, "parts_done": []}
    if rank == 0:
        res["env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_"))}
        res["torch"] = torch.__version__
        if ctx.cuda:
            res["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
            res["gpu"] = torch.cuda.get_device_name(device)

    def save() -> None:
        if rank == 0:
            Path(cfg["result_file"]).write_text(json.dumps(res, indent=1, sort_keys=True))

    # Groups, created in the same order on every rank: the target TP group, then the runtime's draft groups for
    # every split size d < N (S = ranks 0..d-1; choose_draft_ranks' no-topology default).
    tp_group = dist.new_group(list(range(world)))
    splits = [d for d in (1, 2, 4) if d < world and world % d == 0]
    draft_groups = {
        d: DraftGroups.create(DraftPlacement(target_ranks=tuple(range(world)), draft_ranks=tuple(range(d))), rank=rank)
        for d in splits
    }
    reps, samples = cfg["reps"], cfg["samples"]
    batches, max_bs = cfg["batches"], max(cfg["batches"])
    layout_max = ProposalLayout(steps=max(cfg["ks"]))

    # ---- part 3a: all-reduce latency per message size (first: cheap, and it tells what a collective costs) ----
    ar: dict = {}
    for nbytes in cfg["ar_sizes"]:
        if not ctx.go(5):
            break
        elem = 2 if dtype == torch.bfloat16 else 4
        buf = torch.randn(nbytes // elem, device=device).to(dtype)
        inner = 10

        def ar_many(buf=buf):
            for _ in range(inner):
                dist.all_reduce(buf, group=tp_group)

        g = ctx.graph(ar_many)
        ar[nbytes] = {
            "graph": stats([t / inner for t in ctx.timed(g, reps, samples)]),
            "eager": stats([t / inner for t in ctx.timed(ar_many, reps, samples)]),
        }
        del g
    res["allreduce"] = ar
    res["parts_done"].append("allreduce")
    save()

    # ---- models ----
    full = Draft(s, world, rank, tp_group, max_bs, device, dtype)
    split_models = {}
    for d, dg in draft_groups.items():
        if dg.in_draft:
            split_models[d] = Draft(s, d, rank, dg.draft_group, max_bs, device, dtype)
    bcasters = {d: ProposalBroadcaster(dg, layout_max, max_bs=max_bs, device=device) for d, dg in draft_groups.items()}

    # ---- part 1: one draft step, sharded over N vs on S (+ broadcast) ----
    part1: dict = {}
    for bs in batches:
        if not ctx.go(10):
            break
        row: dict = {}
        tok = torch.randint(0, s.draft_vocab, (bs, 1), device=device)
        hid = torch.randn(bs, 1, s.hidden, device=device).to(dtype)

        def step(m):
            def f():
                t, h = m.forward(tok, hid)
                tok.copy_(t)
                hid.copy_(h)

            return f

        g = ctx.graph(step(full))
        row["full"] = stats(ctx.timed(g, reps, samples))
        full.embed_allreduce = True
        g = ctx.graph(step(full))
        row["full_embed_ar"] = stats(ctx.timed(g, reps, samples))
        full.embed_allreduce = False
        del g
        for d, dg in draft_groups.items():
            m = split_models.get(d)
            g = ctx.graph(step(m), active=m is not None)
            row[f"split{d}_step"] = stats(ctx.timed(g, reps, samples, active=m is not None))
            del g
            bc = bcasters[d]
            for steps in sorted({1, 3, max(cfg["ks"])}):
                bc.set_layout(ProposalLayout(steps=steps))
                props = torch.randint(0, s.draft_vocab, (bs, steps), device=device)

                def bcast(bc=bc, props=props, lead=dg.is_leader):
                    bc.broadcast(bs, props if lead else None)

                row[f"split{d}_bcast_k{steps}"] = stats(ctx.timed(bcast, reps, samples))
                row[f"split{d}_bcast_k{steps}"]["bytes"] = ProposalLayout(steps=steps).nbytes(bs)
        part1[bs] = row
        res["draft_step"] = part1
        save()
    res["parts_done"].append("draft_step")
    save()

    # ---- part 2: full cycles with a verify stand-in ----
    layers = cfg.get("verify_layers")
    target_ms = cfg["verify_target_ms"]
    if layers is None and ctx.go(20):
        probe_layers = 8 if ctx.cuda else 2
        probe = Verify(s, world, rank, tp_group, probe_layers, device, dtype)
        x = torch.randn(1, 1, s.hidden, device=device).to(dtype)
        g = ctx.graph(lambda: probe.forward(x))
        per_layer = statistics.median(ctx.timed(g, max(1, reps // 2), samples)) / probe_layers
        want = torch.tensor([max(1, round(target_ms / per_layer))], dtype=torch.int64)
        dist.broadcast(want, src=0, group=ctx.ctl)  # rank 0's choice for everyone
        layers = int(want.item())
        res["verify_calibration"] = {"per_layer_ms_1tok": per_layer, "target_ms": target_ms, "layers": layers}
        del g, probe
        if ctx.cuda:
            torch.cuda.empty_cache()
    cycles: dict = {}
    if layers is not None:
        verify = Verify(s, world, rank, tp_group, layers, device, dtype)
        res["verify_layers"] = layers
        # plain decode (steps = 0) per batch size: the verify stand-in alone on bs tokens
        decode: dict = {}
        for bs in batches:
            if not ctx.go(10):
                break
            x = torch.randn(bs, 1, s.hidden, device=device).to(dtype)
            g = ctx.graph(lambda x=x: verify.forward(x))
            decode[bs] = stats(ctx.timed(g, max(1, reps // 4), samples))
            del g
        res["decode"] = decode
        save()
        for steps in cfg["ks"]:
            for bs in batches:
                if not ctx.go(15):
                    break
                q = steps + 1
                xv = torch.randn(bs, q, s.hidden, device=device).to(dtype)
                tok_e = torch.randint(0, s.draft_vocab, (bs, q), device=device)
                hid3 = torch.randn(bs, q, 3 * s.hidden, device=device).to(dtype)
                tok = torch.randint(0, s.draft_vocab, (bs, 1), device=device)
                hid = torch.randn(bs, 1, s.hidden, device=device).to(dtype)
                props = torch.zeros(bs, steps, device=device, dtype=torch.int64)
                vtok = torch.zeros(bs, q, device=device, dtype=torch.int64)

                def mk_extend(m):
                    def f():
                        t, h = m.forward(tok_e, hid3 @ m.fc.T)  # EAGLE-3 fusion of 3 target hidden states
                        tok.copy_(t[:, -1:])
                        hid.copy_(h[:, -1:])

                    return f

                def mk_step(m, i):
                    def f():
                        t, h = m.forward(tok, hid)
                        tok.copy_(t)
                        hid.copy_(h)
                        props[:, i : i + 1].copy_(t)

                    return f

                def verify_fn():
                    vtok[:, 1:].copy_(props)  # the verify reads the proposals it was handed
                    verify.forward(xv)

                gv = ctx.graph(verify_fn)
                row = {}
                # (a) draft sharded over all N ranks: every rank runs every graph.
                ge = ctx.graph(mk_extend(full))
                gs = [ctx.graph(mk_step(full, i)) for i in range(steps)]

                def cycle_full():
                    ge()
                    for f in gs:
                        f()
                    gv()

                row["full"] = stats(ctx.timed(cycle_full, cfg["cycle_reps"], samples))
                del ge, gs
                # (b) draft on S = {0..d-1} + one proposal broadcast per cycle, for every split size d.
                for d_split in splits:
                    dg, m, bc = draft_groups[d_split], split_models.get(d_split), bcasters[d_split]
                    bc.set_layout(ProposalLayout(steps=steps))
                    ge = ctx.graph(mk_extend(m), active=m is not None)
                    gs = [ctx.graph(mk_step(m, i), active=m is not None) for i in range(steps)]

                    def cycle_split(ge=ge, gs=gs, m=m, bc=bc, lead=dg.is_leader):
                        if m is not None:
                            ge()
                            for f in gs:
                                f()
                        got, _, _ = bc.broadcast(bs, props if lead else None)
                        if not lead:
                            props.copy_(got)
                        gv()

                    row[f"split{d_split}"] = stats(ctx.timed(cycle_split, cfg["cycle_reps"], samples))

                    # The same cycle without the broadcast (the others verify stale proposals; the verify's
                    # all-reduces still line the ranks up): split - this = the broadcast's cost inside a cycle,
                    # where its host-side launch overlaps the draft graphs already queued on the GPU.
                    def cycle_nobcast(ge=ge, gs=gs, m=m):
                        if m is not None:
                            ge()
                            for f in gs:
                                f()
                        gv()

                    row[f"split{d_split}_nobcast"] = stats(ctx.timed(cycle_nobcast, cfg["cycle_reps"], samples))
                    del ge, gs
                del gv
                cycles.setdefault(steps, {})[bs] = row
                res["cycles"] = cycles
                save()
    res["parts_done"].append("cycles")
    save()
    ctx.sync()
    ctx.barrier()
    for dg in draft_groups.values():
        dg.destroy()
    dist.destroy_process_group()


# --------------------------------------------------------------------------------------------------------------
# The parent: profiles, environment, hard limit, report
# --------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def _sh(cmd: list[str]) -> str:
    exe = shutil.which(cmd[0])
    if exe is None:
        return f"({cmd[0]} not found)"
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"({' '.join(cmd)} failed: {e})"


def profile_environment(name: str) -> dict[str, str]:
    """The full NCCL environment of a profile: the runtime's profile, the emulation extras, multicast off."""
    env = profile_env(PROFILE_RUNTIME_NAME[name])
    env.update(PROFILES[name][1])
    env.update(MULTICAST_ENV)
    return dict(sorted(env.items()))


def run_profile(name: str, cfg: dict, budget_s: float, log_dir: Path) -> dict:
    """Spawn one worker per rank under ``name``'s environment; kill them if they outlive the budget + grace."""
    import torch.multiprocessing as mp

    saved = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    for k in saved:
        del os.environ[k]
    env = profile_environment(name)
    os.environ.update(env)
    nccl_log = log_dir / name
    nccl_log.mkdir(parents=True, exist_ok=True)
    if not cfg["cpu"]:
        os.environ.update(
            NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,P2P,SHM,NET", NCCL_DEBUG_FILE=str(nccl_log / "nccl.%h.%p.log")
        )
    result_file = log_dir / f"{name}.json"
    wcfg = dict(cfg, profile=name, port=_free_port(), deadline=time.time() + budget_s, result_file=str(result_file))
    t0 = time.time()
    ctx = mp.start_processes(_worker, args=(wcfg,), nprocs=cfg["world"], join=False, start_method="spawn")
    status = "ok"
    hard = t0 + budget_s + 60
    try:
        while not ctx.join(timeout=5):
            if time.time() > hard:
                status = "killed at the hard limit"
                for p in ctx.processes:
                    if p.is_alive():
                        p.terminate()
                break
    except Exception as e:  # noqa: BLE001 - a worker failed: report it, keep what was saved
        status = f"worker failed: {str(e)[-2000:]}"
        for p in ctx.processes:  # the others would wait forever in a collective
            if p.is_alive():
                p.terminate()
    for k in list(os.environ):
        if k.startswith("NCCL_"):
            del os.environ[k]
    os.environ.update(saved)
    out = json.loads(result_file.read_text()) if result_file.exists() else {"profile": name}
    out["status"], out["wall_s"], out["label"], out["profile_env"] = status, time.time() - t0, PROFILES[name][0], env
    lines: list[str] = []
    for f in sorted(nccl_log.glob("*.log")):
        for ln in f.read_text(errors="replace").splitlines():
            if re.search(r"Channel \d+", ln) and not re.search(r"Channel 00\b", ln):
                continue  # one channel line per direction says the transport
            if re.search(r"via |NCCL version|P2P|SHM|Using network|NCCL_PROTO|channels", ln):
                lines.append(re.sub(r"^\S+:\d+:\d+ ", "", ln.strip()))
    out["nccl_log_lines"] = sorted(set(lines))[:60]
    return out


def _scenario_verify(path: Path) -> tuple[float, float]:
    import yaml

    data = yaml.safe_load(path.read_text())
    v = data["cost"]["verify"]
    return float(v["base"]), float(v.get("perToken", 0.0))


def derive(report: dict) -> dict:
    """Calibration numbers for the scenario's draftTp block, from the 'nvlink' profile (DERIVED from measurements)."""
    out: dict = {}
    for name, p in report["profiles"].items():
        steps = p.get("draft_step") or {}
        bss = sorted(int(b) for b in steps)
        if not bss:
            continue
        row = lambda b: steps[str(b)] if str(b) in steps else steps[b]  # noqa: E731
        d: dict = {}
        if all("split1_step" in row(b) and row(b)["split1_step"] for b in bss):
            t1 = [row(b)["split1_step"]["median_ms"] for b in bss]
            base, slope = fit_line([float(b) for b in bss], t1)
            d["tp1_compute_ms"] = {"base": base, "perSeq": slope, "points": dict(zip(bss, t1))}
            n = p["world"]
            for key, colls in (("full", 3), ("full_embed_ar", 4)):
                per = [(row(b)[key]["median_ms"] - row(b)["split1_step"]["median_ms"] / n) / colls * 1e3 for b in bss]
                d[f"effective_collective_us_{key}"] = {
                    "per_batch": dict(zip(bss, per)),
                    "mean": sum(per) / len(per),
                    "collectives": colls,
                    "tp": n,
                }
            fb, fs = fit_line([float(b) for b in bss], [row(b)["full"]["median_ms"] for b in bss])
            d[f"tp{n}_sharded_step_fit_ms"] = {"base": fb, "perSeq": fs}
            bc = [v["median_ms"] * 1e3 for b in bss for kk, v in row(b).items() if kk.startswith("split1_bcast")]
            d["broadcast_us_median"] = statistics.median(bc) if bc else None
        cyc = p.get("cycles") or {}
        inc = [
            (r["split1"]["median_ms"] - r["split1_nobcast"]["median_ms"]) * 1e3
            for kv in cyc.values()
            for r in kv.values()
            if r.get("split1") and r.get("split1_nobcast")
        ]
        if inc:
            d["broadcast_in_cycle_us"] = {
                "median": statistics.median(inc),
                "min": min(inc),
                "max": max(inc),
                "n": len(inc),
            }
        out[name] = d
    return out


def to_markdown(report: dict) -> str:
    m = report["meta"]
    L = [
        "# Split draft (own process group) vs sharded draft (full TP group), real NCCL",
        "",
        f"Command: `{m['command']}`",
        "",
        f"Machine: {m['gpus']}; torch {m['torch']}; world size N = {m['world']}; {m['dtype']}; CUDA graphs: "
        f"{not m['cpu']}. Draft: EAGLE-3-sized, hidden {m['shape']['hidden']}, 1 decoder layer, draft vocab "
        f"{m['shape']['draft_vocab']}, attention over a {m['shape']['ctx']}-token window, "
        f"{m['draft_weight_gb']:.2f} GB of layer+lm_head weights (embedding lookup only). Each figure: median "
        f"(p10-p90) over {m['samples']} samples; a sample is the mean of {m['reps']} back-to-back graph replays "
        f"({m['cycle_reps']} for whole cycles), timed with CUDA events on rank 0.",
        "",
        "## Interconnect (`nvidia-smi topo -m`)",
        "",
        "```",
        m["topo"],
        "```",
        "",
        m["interconnect_note"],
        "",
    ]

    def f(st: dict | None, scale: float = 1.0, nd: int = 3) -> str:
        if not st:
            return "n/a"
        return f"{st['median_ms'] * scale:.{nd}f} ({st['p10_ms'] * scale:.{nd}f}-{st['p90_ms'] * scale:.{nd}f})"

    for name, p in report["profiles"].items():
        L += [
            f"## Profile `{name}`",
            "",
            f"{p.get('label')}. Status: {p.get('status')}; wall {p.get('wall_s', 0):.0f} s; "
            f"NCCL {p.get('nccl_version', '?')}; parts done: {', '.join(p.get('parts_done', [])) or 'none'}.",
            "",
            "NCCL environment: `" + " ".join(f"{k}={v}" for k, v in p.get("profile_env", {}).items()) + "`",
            "",
        ]
        ar = p.get("allreduce") or {}
        if ar:
            L += [
                "### All-reduce latency (bf16, TP group of N), microseconds",
                "",
                "| message | in a CUDA graph | eager |",
                "|---:|---:|---:|",
            ]
            for nb, v in sorted(ar.items(), key=lambda kv: int(kv[0])):
                L.append(f"| {int(nb) // 1024} KB | {f(v['graph'], 1e3, 1)} | {f(v['eager'], 1e3, 1)} |")
            L.append("")
        steps = p.get("draft_step") or {}
        if steps:
            L += [
                "### One draft step (ms) and the proposal broadcast (µs)",
                "",
                "`full`: sharded over all N ranks (2 all-reduces + logits all-gather); `+embAR`: plus the "
                "vocab-parallel embedding all-reduce; `S=1`: the whole draft on rank 0; bcast: "
                "`ProposalBroadcaster.broadcast` (eager, pack included) of [bs, k] int64. Ratio = (S=1 step + "
                "bcast k=1) / full step, i.e. one step per cycle, the split's worst case.",
                "",
                "| batch | full | +embAR | S=1 | bcast k=1 µs | bcast k=7 µs | S=1/full step | (S=1+bcast)/full |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for bs, r in sorted(steps.items(), key=lambda kv: int(kv[0])):
                s1, fu = r.get("split1_step"), r.get("full")
                b1 = r.get("split1_bcast_k1")
                bk = next(
                    (
                        r[k]
                        for k in sorted(r, reverse=True)
                        if k.startswith("split1_bcast_k") and k != "split1_bcast_k1"
                    ),
                    None,
                )
                ratio = ratio2 = "n/a"
                if s1 and fu:
                    ratio = f"{s1['median_ms'] / fu['median_ms']:.2f}"
                    if b1:
                        ratio2 = f"{(s1['median_ms'] + b1['median_ms']) / fu['median_ms']:.2f}"
                L.append(
                    f"| {bs} | {f(fu)} | {f(r.get('full_embed_ar'))} | {f(s1)} | {f(b1, 1e3, 1)} | "
                    f"{f(bk, 1e3, 1)} | {ratio} | {ratio2} |"
                )
            L.append("")
        dec = p.get("decode") or {}
        cyc = p.get("cycles") or {}
        if dec or cyc:
            vc = p.get("verify_calibration") or {}
            L += [
                "### Full cycle: extend + k steps (+ broadcast) + verify stand-in (ms)",
                "",
                f"Verify stand-in: {p.get('verify_layers')} TP-sharded dense layers, 2 all-reduces each"
                + (
                    f" (calibrated here: {vc['per_layer_ms_1tok'] * 1e3:.0f} µs/layer at 1 token -> target "
                    f"{vc['target_ms']:.2f} ms)"
                    if vc
                    else " (layer count from the nvlink calibration)"
                )
                + ".",
                "",
            ]
            if dec:
                L.append(
                    "Plain decode (k = 0, verify stand-in on bs tokens): "
                    + "; ".join(f"bs {b}: {f(v)}" for b, v in sorted(dec.items(), key=lambda kv: int(kv[0])))
                    + "."
                )
                L.append("")
            bss = sorted({int(b) for kv in cyc.values() for b in kv})
            if bss:
                L += [
                    "Per batch: full = draft sharded over all N; S=1 = draft on rank 0 + broadcast; ratio = "
                    "S=1 / full; bc µs = the broadcast's cost inside the cycle (S=1 minus the same cycle without "
                    "the broadcast; differences of medians, can be noise-negative).",
                    "",
                    "| k | " + " | ".join(f"bs {b} full | bs {b} S=1 | ratio | bc µs" for b in bss) + " |",
                    "|---:|" + "---:|" * (4 * len(bss)),
                ]
                for steps in sorted(cyc, key=int):
                    cells = []
                    for b in bss:
                        r = cyc[steps].get(str(b)) or cyc[steps].get(b) or {}
                        fu, sp = r.get("full"), r.get("split1")
                        nb = r.get("split1_nobcast")
                        cells += [
                            f(fu, nd=2),
                            f(sp, nd=2),
                            f"{sp['median_ms'] / fu['median_ms']:.3f}" if fu and sp else "n/a",
                            f"{(sp['median_ms'] - nb['median_ms']) * 1e3:.0f}" if sp and nb else "n/a",
                        ]
                    L.append(f"| {steps} | " + " | ".join(cells) + " |")
                L.append("")
    der = report.get("derived") or {}
    if der:
        L += ["## Derived calibration (DERIVED from the medians above; linear fits)", ""]
        for name, d in der.items():
            if not d:
                continue
            tp1 = d.get("tp1_compute_ms", {})
            L.append(
                f"- `{name}`: TP1 draft step fit base {tp1.get('base', float('nan')):.4f} ms + "
                f"{tp1.get('perSeq', float('nan')):.5f} ms/seq; effective cost per collective in the sharded "
                f"step (full - TP1/N)/3 = {d.get('effective_collective_us_full', {}).get('mean', float('nan')):.1f} µs "
                f"(per batch: "
                + ", ".join(
                    f"{b}: {v:.1f}" for b, v in d.get("effective_collective_us_full", {}).get("per_batch", {}).items()
                )
                + f"); with the embedding all-reduce, /4 = {d.get('effective_collective_us_full_embed_ar', {}).get('mean', float('nan')):.1f} µs; "
                f"proposal broadcast back-to-back median {d.get('broadcast_us_median') or float('nan'):.1f} µs"
                + (
                    f"; inside a cycle (split - split without broadcast, over all k and batches) median "
                    f"{d['broadcast_in_cycle_us']['median']:.1f} µs (range {d['broadcast_in_cycle_us']['min']:.1f}"
                    f" .. {d['broadcast_in_cycle_us']['max']:.1f})"
                    if d.get("broadcast_in_cycle_us")
                    else ""
                )
                + (
                    f"; sharded TP{p_n} step fit {d[f'tp{p_n}_sharded_step_fit_ms']['base']:.4f} ms + "
                    f"{d[f'tp{p_n}_sharded_step_fit_ms']['perSeq']:.5f} ms/seq"
                    if (p_n := report["meta"]["world"]) and f"tp{p_n}_sharded_step_fit_ms" in d
                    else ""
                )
                + "."
            )
        L.append("")
    L += m.get("notes", [])
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU (smoke test; timings meaningless)")
    ap.add_argument("--tiny", action="store_true", help="toy shapes")
    ap.add_argument("--world", type=int, default=None, help="ranks (default: all GPUs; 2 on --cpu)")
    ap.add_argument("--profiles", default="nvlink,pcie-emulated")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--ks", default="1,2,3,4,5,6,7")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cycle-reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--ctx", type=int, default=None, help="draft attention window (default 2048, tiny 16)")
    ap.add_argument("--verify-layers", type=int, default=None, help="skip the calibration and use this many")
    ap.add_argument("--scenario", default=str(ROOT / "bench/scenarios/h200-nvlink.yaml"))
    ap.add_argument("--time-limit", type=float, default=420.0, help="seconds for the whole run (hard)")
    ap.add_argument("--name", default=None, help="output stem (default multigpu_draft_<gpu>x<N>)")
    args = ap.parse_args(argv)
    t_start = time.time()
    world = args.world or (2 if args.cpu else torch.cuda.device_count())
    if world < 2:
        raise SystemExit(f"need >= 2 ranks, have {world}")
    shape = Shape.tiny() if args.tiny else Shape()
    if args.ctx:
        shape = replace(shape, ctx=args.ctx)
    vbase, vper = _scenario_verify(Path(args.scenario))
    step_counts = [int(x) for x in args.ks.split(",")]
    cfg = dict(
        world=world,
        cpu=args.cpu,
        shape=asdict(shape),
        batches=[int(b) for b in args.batches.split(",")],
        ks=[n for n in STEPS_ORDER if n in step_counts] + [n for n in step_counts if n not in STEPS_ORDER],
        reps=args.reps,
        cycle_reps=args.cycle_reps,
        samples=args.samples,
        ar_sizes=AR_SIZES if not args.tiny else AR_SIZES[:2],
        verify_target_ms=vbase + vper * 1,
        verify_layers=args.verify_layers,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = "cpu" if args.cpu else torch.cuda.get_device_name(0)
    stem = args.name or ("multigpu_draft_cpu" if args.cpu else f"multigpu_draft_{gpu.split()[-1].lower()}x{world}")
    topo = _sh(["nvidia-smi", "topo", "-m"])
    links = set(re.findall(r"\bNV\d+\b", topo))
    interconnect_note = (
        f"Interconnect: NVLink ({', '.join(sorted(links))}) between the GPUs. This box is NOT PCIe-only: the "
        "`pcie-emulated` profile below only emulates PCIe (host-memory transport via NCCL_P2P_DISABLE=1), and the "
        "simulator's PCIe figures (bench/scenarios/pcie8-seed.yaml) come from its own profile, not from this run."
        if links
        else "Interconnect: no NVLink seen in `nvidia-smi topo -m` (or no nvidia-smi)."
    )
    meta = dict(
        command="python3 bench/gpu/micro/multigpu_draft.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        gpus=(_sh(["nvidia-smi", "-L"]).replace("\n", "; ") if not args.cpu else platform.processor() or "cpu"),
        torch=torch.__version__,
        world=world,
        dtype="float32" if args.cpu else "bfloat16",
        cpu=args.cpu,
        shape=asdict(shape),
        draft_weight_gb=shape.draft_weight_bytes() / 1e9,
        reps=args.reps,
        cycle_reps=args.cycle_reps,
        samples=args.samples,
        topo=topo,
        interconnect_note=interconnect_note,
        verify_target_ms=cfg["verify_target_ms"],
        scenario=args.scenario,
        time_limit_s=args.time_limit,
        multicast_env=MULTICAST_ENV,
        notes=[
            "Notes:",
            "",
            "- Timings are measured on this machine; everything under 'Derived' is a fit of those medians.",
            "- The verify stand-in has no attention compute and no MoE: it is sized by time (a decode step of the "
            "scenario's length), not by model.",
            f"- Draft on S of size d for d < N dividing N; with N = {world} only "
            + (
                "S = {0} is distinct from the full group (S of 2 ranks IS the full group here)."
                if world == 2
                else "the sizes listed in the JSON were run."
            ),
            "- The proposal broadcast is eager (it cannot sit in a graph replayed on S only); it is timed as "
            "back-to-back calls, and again inside the split cycles.",
        ],
    )
    report: dict = {"meta": meta, "profiles": {}}
    names = [p for p in args.profiles.split(",") if p]
    with tempfile.TemporaryDirectory(prefix="mgd_") as tmp:
        for i, name in enumerate(names):
            left = args.time_limit - (time.time() - t_start) - 70  # 60 s kill grace + writing
            share = left if i == len(names) - 1 else left * (0.55 if len(names) == 2 else 1 / (len(names) - i))
            if share < 30:
                report["profiles"][name] = {
                    "status": f"not run: {share:.0f} s left in the time limit",
                    "label": PROFILES[name][0],
                }
                continue
            print(f"[multigpu_draft] profile {name}: budget {share:.0f} s", flush=True)
            report["profiles"][name] = run_profile(name, cfg, share, Path(tmp))
            if cfg["verify_layers"] is None and report["profiles"][name].get("verify_layers"):
                cfg["verify_layers"] = report["profiles"][name]["verify_layers"]  # same model under every profile
            report["derived"] = derive(report)
            (out / f"{stem}.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
            (out / f"{stem}.md").write_text(to_markdown(report))
    report["meta"]["wall_s"] = time.time() - t_start
    report["derived"] = derive(report)
    md = to_markdown(report)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    (out / f"{stem}.md").write_text(md)
    print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
