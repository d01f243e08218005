#!/usr/bin/env python3
"""Cross-GPU cost of the split draft's collectives, with real NCCL: N processes, one GPU each.

* ``bcast``: ``draft_group.ProposalBroadcaster.broadcast`` of packed proposals (topk 1, ``[bs, steps]`` int64) from
  S's leader to the whole group on the dedicated communicator: what the split draft pays once per cycle.
* ``allreduce``: one all-reduce of ``[bs, hidden]`` bf16 over the whole group: what a TP-sharded draft pays twice
  per layer per draft step (attention output and MLP down projections), plus a vocab all-gather.
* ``check``: every rank's received proposals equal the leader's.

Timings are medians of eager calls bracketed by CUDA events on rank 0 (after a barrier), so they include launch
overhead, like the eager broadcast between graph replays in the runtime.

Usage: python3 bench/gpu/micro/draft_group_nccl.py --nprocs 2 --out bench/results   (gloo on CPU: --device cpu)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "runtime"))


def _worker(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    from specdecode_runtime.draft_group import DraftGroups, DraftPlacement, ProposalBroadcaster, ProposalLayout

    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=args.nprocs,
        **({"device_id": dev} if cuda else {}),
    )
    world = tuple(range(args.nprocs))
    groups = DraftGroups.create(DraftPlacement(target_ranks=world, draft_ranks=(0,)), rank=rank)
    layout = ProposalLayout(steps=args.steps)
    batches = [int(b) for b in args.batches.split(",")]
    bc = ProposalBroadcaster(groups, layout, max_bs=max(batches), device=dev)
    res: dict = {"bcast": {}, "allreduce": {}, "check": {}}

    def timed(fn) -> float:
        ts = []
        for i in range(args.warmup + args.iters):
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                t = s.elapsed_time(e)
            else:
                t0 = time.perf_counter()
                fn()
                t = (time.perf_counter() - t0) * 1e3
            if i >= args.warmup:
                ts.append(t)
        return statistics.median(ts)

    for bs in batches:
        gen = torch.Generator(device="cpu").manual_seed(bs)
        proposals = torch.randint(0, 32000, (bs, args.steps), generator=gen).to(dev)
        res["bcast"][bs] = timed(lambda: bc.broadcast(bs, proposals if rank == 0 else None))
        got, _, _ = bc.broadcast(bs, proposals if rank == 0 else None)
        res["check"][bs] = bool(torch.equal(got.cpu(), proposals.cpu()))
        x = torch.randn(bs, args.hidden, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
        res["allreduce"][bs] = timed(lambda: dist.all_reduce(x))
    if rank == 0:
        Path(out).write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = Path(args.out or ".") / f".nccl_{os.getpid()}.json"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    mp.start_processes(_worker, args=(args, port, str(tmp)), nprocs=args.nprocs, start_method="spawn", join=True)
    res = json.loads(tmp.read_text())
    tmp.unlink()
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (gloo)"
    cmd = "python3 bench/gpu/micro/draft_group_nccl.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        f"# Split-draft collectives across {args.nprocs} ranks ({name})",
        "",
        f"Command: `{cmd}`",
        "",
        f"Medians of {args.iters} eager calls after {args.warmup} warm-up, rank 0's CUDA events. A TP-sharded draft "
        f"pays 2 all-reduces per layer ({args.layers} layer) per draft step plus a vocab all-gather; the split draft "
        "pays one proposal broadcast per cycle.",
        "",
        "| batch | proposal broadcast us (bytes) | all-reduce [bs, hidden] us | TP draft step collectives us (2 x layers all-reduce) | received == sent |",
        "|---:|---:|---:|---:|:---:|",
    ]
    for bs in res["bcast"]:
        b, a = res["bcast"][bs], res["allreduce"][bs]
        lines.append(
            f"| {bs} | {b * 1e3:.1f} ({int(bs) * args.steps * 8}) | {a * 1e3:.1f} | "
            f"{2 * args.layers * a * 1e3:.1f} | {res['check'][bs]} |"
        )
    md = "\n".join(lines) + "\n"
    print(md)
    if args.out:
        stem = f"draft_group_nccl_{args.nprocs}x" + ("h200" if "H200" in name else "cpu")
        Path(args.out, stem + ".json").write_text(json.dumps({"device": name, "args": vars(args), **res}, indent=2))
        Path(args.out, stem + ".md").write_text(md)
    return 0 if all(res["check"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
