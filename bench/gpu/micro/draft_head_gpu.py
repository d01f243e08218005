#!/usr/bin/env python3
"""Latency of one EAGLE-3-sized draft head on one GPU: the numbers that calibrate the tuner's cost model.

Pure PyTorch (no SGLang), so it runs on any CUDA machine with torch >= 2.5. The head is the EAGLE-3 shape for a
DeepSeek-V3 / Kimi-K2 class target (hidden 7168), in bf16:

    embed        [129280, 7168]   target vocabulary, shared with the target (lookup only)
    fc           [7168, 3*7168]   EAGLE-3 fusion of three target hidden states (draft extend only)
    qkv          [(56+2*8)*128 = 9216, 2*7168]   one decoder layer; input = cat(norm(embed), norm(hidden))
    o            [7168, 7168]
    gate_up      [2*18432, 7168]
    down         [7168, 18432]
    lm_head      [32000, 7168]    32k draft vocabulary (d2t mapped), greedy argmax (topk = 1)
    KV cache     [bs, 8, ctx, 128] x 2 per layer; ctx = --ctx (default 1024) tokens attended per sequence

Measured, each with CUDA graphs (one graph per batch size, captured once, replayed):

* ``draft_step``: one autoregressive draft step (1 token per sequence): embed, norms, qkv, rotary, attention over
  the cache, o, MLP, lm_head, argmax, KV write. Median over ``--iters`` replays.
* ``draft_extend``: the draft extend after a verify, ``steps + 1`` tokens per sequence (``--extend-tokens``, default 4),
  including the fc fusion of 3H target hidden states.
* ``pack``: packing the proposals ``[bs, steps]`` into the broadcast buffer (``draft_group.ProposalLayout``).
* ``bcast``: ``ProposalBroadcaster.broadcast`` on a one-rank NCCL group. With one GPU this measures only the
  launch and the local copy, a lower bound: the cross-GPU cost is not measurable on a one-GPU machine.

Then a least-squares fit ``draft_step_ms = draft_base + draft_per_seq * bs`` (and the same for extend per token)
gives the ``CycleCost`` fields of ``specdecode_runtime.contract.goodput``.

Usage:  python3 bench/gpu/micro/draft_head_gpu.py --out bench/results            (GPU, full size)
        python3 bench/gpu/micro/draft_head_gpu.py --tiny --device cpu --iters 3  (smoke test on a CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "runtime"), str(ROOT / "bench")]
import shapes  # noqa: E402

from specdecode_runtime.draft_group import (  # noqa: E402
    DraftGroups,
    DraftPlacement,
    ProposalBroadcaster,
    ProposalLayout,
)


@dataclass(frozen=True)
class HeadShape(shapes.DraftHead):
    layers: int = 1

    def weight_bytes(self, elem: int = 2) -> int:
        h, qkv = self.hidden, (self.heads + 2 * self.kv_heads) * self.head_dim
        per_layer = qkv * 2 * h + h * self.heads * self.head_dim + 2 * self.ffn * h + h * self.ffn
        return elem * (self.layers * per_layer + self.draft_vocab * h + h * 3 * h)


class DraftHead:
    """One EAGLE-3 decoder layer + lm_head with a static KV cache, shaped for CUDA-graph capture."""

    def __init__(self, s: HeadShape, max_bs: int, ctx: int, device: torch.device, dtype: torch.dtype):
        g = torch.Generator(device=device).manual_seed(0)

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g, dtype=dtype, device=device) / shape[-1] ** 0.5).to(dtype)

        self.s, self.ctx, self.device, self.dtype = s, ctx, device, dtype
        h, qkv = s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim
        self.embed = w(s.target_vocab, h)
        self.fc = w(h, 3 * h)
        self.layers = [
            dict(
                qkv=w(qkv, 2 * h),
                o=w(h, s.heads * s.head_dim),
                gate_up=w(2 * s.ffn, h),
                down=w(h, s.ffn),
                n_in=torch.ones(h, device=device, dtype=dtype),
                n_hid=torch.ones(h, device=device, dtype=dtype),
                n_post=torch.ones(h, device=device, dtype=dtype),
                k_cache=torch.zeros(max_bs, s.kv_heads, ctx, s.head_dim, device=device, dtype=dtype),
                v_cache=torch.zeros(max_bs, s.kv_heads, ctx, s.head_dim, device=device, dtype=dtype),
            )
            for _ in range(s.layers)
        ]
        self.n_final = torch.ones(h, device=device, dtype=dtype)
        self.lm_head = w(s.draft_vocab, h)
        self.d2t = torch.arange(s.draft_vocab, device=device, dtype=torch.int64)
        inv = 1.0 / (10000 ** (torch.arange(0, s.head_dim, 2, device=device, dtype=torch.float32) / s.head_dim))
        self.inv_freq = inv

    @staticmethod
    def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        ang = pos.float()[..., None] * self.inv_freq  # [..., d/2]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def forward(
        self, tokens: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [bs, q], hidden [bs, q, H], pos [bs, q] -> (next tokens [bs, q], hidden [bs, q, H])."""
        s = self.s
        bs, q = tokens.shape
        emb = self.embed[tokens]
        x = hidden
        for L in self.layers:
            inp = torch.cat((self._rms(emb, L["n_in"]), self._rms(x, L["n_hid"])), -1)
            qkv = inp @ L["qkv"].T
            qh, kh, vh = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], -1)
            grp = s.heads // s.kv_heads
            qh = self._rope(qh.view(bs, q, s.heads, s.head_dim), pos[..., None])
            # GQA as plain attention: the `grp` query heads of one KV head become grp*q query rows of it, so the
            # fused (flash / memory-efficient) kernels apply; the window is attended in full (no causal mask).
            qh = (
                qh.view(bs, q, s.kv_heads, grp, s.head_dim)
                .permute(0, 2, 1, 3, 4)
                .reshape(bs, s.kv_heads, q * grp, s.head_dim)
            )
            kh = self._rope(kh.view(bs, q, s.kv_heads, s.head_dim), pos[..., None]).transpose(1, 2)
            vh = vh.view(bs, q, s.kv_heads, s.head_dim).transpose(1, 2)
            # KV write at the last q slots of the static window (positions are relative to the window).
            L["k_cache"][:bs, :, self.ctx - q :].copy_(kh)
            L["v_cache"][:bs, :, self.ctx - q :].copy_(vh)
            att = F.scaled_dot_product_attention(qh, L["k_cache"][:bs], L["v_cache"][:bs])
            att = (
                att.view(bs, s.kv_heads, q, grp, s.head_dim).permute(0, 2, 1, 3, 4).reshape(bs, q, s.heads * s.head_dim)
            )
            x = x + att @ L["o"].T
            gu = self._rms(x, L["n_post"]) @ L["gate_up"].T
            gate, up = gu.chunk(2, -1)
            x = x + (F.silu(gate) * up) @ L["down"].T
        logits = self._rms(x, self.n_final) @ self.lm_head.T
        return self.d2t[logits.argmax(-1)], x


def _timed(fn, iters: int, device: torch.device) -> list[float]:
    out = []
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(iters):
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def _graph(fn, device: torch.device, warmup: int = 3):
    """Capture ``fn`` in a CUDA graph (eager on CPU); returns the replay callable."""
    if device.type != "cuda":
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def _stats(v: list[float]) -> dict:
    v = sorted(v)
    return {"median_ms": statistics.median(v), "p10_ms": v[len(v) // 10], "p90_ms": v[(len(v) * 9) // 10]}


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = HeadShape.tiny() if args.tiny else HeadShape(layers=args.layers)
    batches = [int(b) for b in args.batches.split(",")]
    max_bs = max(batches)
    head = DraftHead(shape, max_bs, args.ctx, device, dtype)
    q_ext = args.extend_tokens
    results: dict = {"draft_step": {}, "draft_extend": {}, "pack": {}, "bcast": {}}

    # One-rank process group for the broadcast path (NCCL on a GPU, gloo on a CPU).
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    groups = DraftGroups.create(DraftPlacement(target_ranks=(0,), draft_ranks=(0,)), rank=0)
    layout = ProposalLayout(steps=args.steps)
    bcaster = ProposalBroadcaster(groups, layout, max_bs=max_bs, device=device)

    for bs in batches:
        tok = torch.randint(0, shape.target_vocab, (bs, 1), device=device)
        hid = torch.randn(bs, 1, shape.hidden, device=device, dtype=dtype)
        pos = torch.full((bs, 1), args.ctx - 1, device=device, dtype=torch.int64)
        out_tok = torch.empty(bs, 1, device=device, dtype=torch.int64)

        def step():
            t, h = head.forward(tok, hid, pos)
            out_tok.copy_(t)
            hid.copy_(h)
            tok.copy_(t)

        results["draft_step"][bs] = _stats(_timed(_graph(step, device), args.iters, device))

        tok_e = torch.randint(0, shape.target_vocab, (bs, q_ext), device=device)
        tgt_hid = torch.randn(bs, q_ext, 3 * shape.hidden, device=device, dtype=dtype)
        pos_e = torch.arange(args.ctx - q_ext, args.ctx, device=device).repeat(bs, 1)
        out_e = torch.empty(bs, q_ext, device=device, dtype=torch.int64)

        def extend():
            h = tgt_hid @ head.fc.T  # EAGLE-3 fusion of 3 target layers
            t, _ = head.forward(tok_e, h, pos_e)
            out_e.copy_(t)

        results["draft_extend"][bs] = _stats(_timed(_graph(extend, device), args.iters, device))

        proposals = torch.randint(0, shape.draft_vocab, (bs, args.steps), device=device)
        results["pack"][bs] = _stats(_timed(lambda: layout.pack(proposals, out=bcaster.buffer), args.iters, device))
        results["bcast"][bs] = _stats(_timed(lambda: bcaster.broadcast(bs, proposals), args.iters, device))
        results["bcast"][bs]["bytes"] = layout.nbytes(bs)
        if device.type == "cuda":
            torch.cuda.synchronize()

    xs = [float(b) for b in batches]
    step_base, step_per_seq = _fit(xs, [results["draft_step"][b]["median_ms"] for b in batches])
    ext_base, ext_per_tok = _fit([b * q_ext for b in xs], [results["draft_extend"][b]["median_ms"] for b in batches])
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": str(dtype).replace("torch.", ""),
        "shape": asdict(shape),
        "weight_bytes": shape.weight_bytes(2 if dtype == torch.bfloat16 else 4),
        "ctx": args.ctx,
        "steps": args.steps,
        "extend_tokens_per_seq": q_ext,
        "iters": args.iters,
        "cuda_graphs": device.type == "cuda",
        "env": {
            k: os.environ.get(k)
            for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
        },
    }
    fit = {
        "draft_base_ms": step_base,
        "draft_per_seq_ms": step_per_seq,
        "extend_base_ms": ext_base,
        "extend_per_token_ms": ext_per_tok,
        "broadcast_ms_one_rank_lower_bound": statistics.median(results["bcast"][b]["median_ms"] for b in batches),
    }
    groups.destroy()
    dist.destroy_process_group()
    return {"meta": meta, "results": results, "cost_model_fit": fit}


def to_markdown(report: dict, command: str) -> str:
    m, r, f = report["meta"], report["results"], report["cost_model_fit"]
    lines = [
        "# EAGLE-3-sized draft head on one GPU",
        "",
        f"Command: `{command}`",
        "",
        f"Device: {m['device']}; torch {m['torch']} (CUDA {m['cuda']}); {m['dtype']}; CUDA graphs: {m['cuda_graphs']}; "
        f"{m['iters']} replays per point, median reported.",
        "",
        f"Shape: {json.dumps(m['shape'])}; weights {m['weight_bytes'] / 2**30:.2f} GiB (lm_head + fc + layer); "
        f"attention over a {m['ctx']}-token KV window per sequence; draft extend with "
        f"{m['extend_tokens_per_seq']} tokens per sequence; proposals of {m['steps']} steps (topk 1).",
        "",
        "| batch | draft step median ms (p10-p90) | draft extend median ms | pack us | 1-rank broadcast us | packed bytes |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for b in r["draft_step"]:
        d, e, p, c = r["draft_step"][b], r["draft_extend"][b], r["pack"][b], r["bcast"][b]
        lines.append(
            f"| {b} | {d['median_ms']:.4f} ({d['p10_ms']:.4f}-{d['p90_ms']:.4f}) | {e['median_ms']:.4f} | "
            f"{p['median_ms'] * 1e3:.1f} | {c['median_ms'] * 1e3:.1f} | {c['bytes']} |"
        )
    lines += [
        "",
        "Least-squares fit for `specdecode_runtime.contract.goodput.CycleCost` (this draft head, one GPU, draft TP 1):",
        "",
        f"- `draft_base` = {f['draft_base_ms']:.4f} ms, `draft_per_seq` = {f['draft_per_seq_ms']:.6f} ms",
        f"- `extend_base` = {f['extend_base_ms']:.4f} ms, `extend_per_token` = {f['extend_per_token_ms']:.6f} ms",
        f"- `broadcast` lower bound (one-rank NCCL, launch + copy only) = {f['broadcast_ms_one_rank_lower_bound']:.4f} ms",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--extend-tokens", type=int, default=4)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--tiny", action="store_true", help="toy sizes for a CPU smoke test")
    ap.add_argument("--out", default=None, help="directory for draft_head_<gpu>.json/.md")
    args = ap.parse_args(argv)
    report = run(args)
    command = "python3 bench/gpu/micro/draft_head_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = to_markdown(report, command)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = (
            "draft_head_h200"
            if "H200" in report["meta"]["device"]
            else "draft_head_" + ("tiny" if args.tiny else "run")
        )
        (out / f"{stem}.json").write_text(json.dumps(report, indent=2, sort_keys=True))
        (out / f"{stem}.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
