"""draft_group with real collectives: gloo, 4 processes = one target TP group of 4.

One spawn runs every scenario (process start-up dominates on 2 cores): draft on the full TP group, then draft
TP 1 (S={0}) and draft TP 2 (S={0,1}), for a chain (topk=1) and a tree (topk=2). Each rank writes what it saw to
a file; the assertions run in the parent against a single-process reference of the same random-weight draft.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny_draft import TinyConfig, TinyDraft, full_weights  # noqa: E402

from specdecode_runtime.draft_group import (  # noqa: E402
    DraftGroupError,
    DraftPlacement,
    GpuTopology,
    ProposalLayout,
    choose_draft_ranks,
    parse_nvidia_smi_topo,
)

WORLD = 4
STEPS = 3
BS = 5
PROMPT = 6
TREE_TOPK = 2
TREE_N = 6  # num_draft_tokens for the tree case
CFG = TinyConfig()
SCENARIOS = [  # (name, draft ranks or None for the full group, topk)
    ("full_chain", None, 1),
    ("s1_chain", (0,), 1),
    ("s2_chain", (0, 1), 1),
    ("full_tree", None, TREE_TOPK),
    ("s1_tree", (0,), TREE_TOPK),
    ("s2_tree", (0, 1), TREE_TOPK),
]


def _prompt() -> torch.Tensor:
    return torch.randint(0, CFG.vocab, (BS, PROMPT), generator=torch.Generator().manual_seed(7))


def _worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_draft import TinyDraft, full_weights, shard_weights

    from specdecode_runtime.draft_group import (
        CollectiveCounter,
        DraftGroups,
        DraftPlacement,
        ProposalBroadcaster,
        ProposalLayout,
        SubsetCollectiveError,
        draft_only_scope,
    )

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    full = full_weights(CFG)
    prompt = _prompt()
    target = tuple(range(WORLD))
    # The target holds its shared lm_head vocab-sharded 4 ways: the draft must gather it.
    target_head_shard = full["lm_head"].chunk(WORLD, 0)[rank].contiguous()
    results: dict = {}
    for name, s_ranks, topk in SCENARIOS:
        n = TREE_N if topk > 1 else STEPS + 1
        layout = ProposalLayout(steps=STEPS, topk=topk, num_draft_tokens=n)
        rec: dict = {}
        if s_ranks is None:
            # Stock SGLang: the draft is sharded over the whole target group, every rank runs every step.
            model = TinyDraft(CFG, shard_weights(full, CFG, rank, WORLD), group=None, tp_size=WORLD)
            with CollectiveCounter() as cc:
                tokens, parents, scores = model.propose(prompt, STEPS, topk, n)
            rec["target_group_collectives"] = cc.count(ranks=target)
            rec["all_reduce"] = cc.count("all_reduce", target)
            rec["all_gather"] = cc.count("all_gather", target)
        else:
            placement = DraftPlacement.from_tp_ranks(target, s_ranks)
            groups = DraftGroups.create(placement, rank=rank)
            # Init: gather the vocab-sharded head once (every rank), S keeps its |S|-way shard.
            full_head = groups.gather_vocab_shards(target_head_shard)
            rec["has_full_head"] = full_head is not None
            bcaster = ProposalBroadcaster(groups, layout, max_bs=16)
            with CollectiveCounter() as cc:
                if groups.in_draft:
                    d = placement.draft_tp
                    w = shard_weights(full, CFG, placement.rank_in_draft(rank), d)
                    w["lm_head"] = groups.draft_shard(full_head)
                    model = TinyDraft(CFG, w, group=groups.draft_group, tp_size=d)
                    with draft_only_scope(placement.draft_ranks, "draft forward"):
                        t, p, s = model.propose(prompt, STEPS, topk, n)
                        # A hidden group-wide collective on S alone is refused before it can hang.
                        try:
                            dist.barrier()
                            rec["guard"] = "missed"
                        except SubsetCollectiveError:
                            rec["guard"] = "raised"
                    tokens, parents, scores = bcaster.broadcast(BS, t, p, s)
                else:
                    tokens, parents, scores = bcaster.broadcast(BS)
            rec["target_group_collectives"] = cc.count(ranks=target)
            rec["broadcasts"] = cc.count("broadcast", target)
            rec["draft_group_collectives"] = cc.count(ranks=placement.draft_ranks) if len(s_ranks) > 1 else 0
            rec["bytes"] = layout.nbytes(BS)
        rec["tokens"] = tokens.tolist()
        rec["parents"] = None if parents is None else parents.tolist()
        rec["scores"] = None if scores is None else scores.tolist()
        results[name] = rec
        dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory):
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("gloo")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(_worker, args=(_free_port(), str(out)), nprocs=WORLD, start_method="spawn", join=True)
    return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(WORLD)]


def _reference(topk: int):
    model = TinyDraft(CFG, full_weights(CFG))
    n = TREE_N if topk > 1 else STEPS + 1
    t, p, s = model.propose(_prompt(), STEPS, topk, n)
    return t.tolist(), None if p is None else p.tolist(), None if s is None else s.tolist()


@pytest.mark.engine  # 4 gloo processes (module fixture)
@pytest.mark.slow
@pytest.mark.parametrize("name,s_ranks,topk", SCENARIOS)
def test_proposals_identical_on_every_rank_and_equal_reference(gloo_results, name, s_ranks, topk):
    ref_t, ref_p, ref_s = _reference(topk)
    for rank, res in enumerate(gloo_results):
        rec = res[name]
        assert rec["tokens"] == ref_t, f"{name}: rank {rank} tokens differ from the single-process reference"
        assert rec["parents"] == ref_p, f"{name}: rank {rank} parent_list differs"
        assert rec["scores"] == ref_s, f"{name}: rank {rank} top_scores_index differs"


@pytest.mark.engine  # 4 gloo processes (module fixture)
@pytest.mark.slow
def test_collectives_per_cycle_full_vs_split(gloo_results):
    per_step_full = 2 * CFG.layers + 1  # two all-reduces per layer + the vocab all-gather, every step
    for rank, res in enumerate(gloo_results):
        full = res["full_chain"]
        assert full["all_reduce"] == 2 * CFG.layers * STEPS
        assert full["all_gather"] == STEPS
        assert full["target_group_collectives"] == per_step_full * STEPS
        for name in ("s1_chain", "s2_chain", "s1_tree", "s2_tree"):
            split = res[name]
            # One broadcast per cycle over the target group, whatever the rank; nothing else reaches it.
            assert split["broadcasts"] == 1, (name, rank)
            assert split["target_group_collectives"] == 1, (name, rank)
        # Draft TP 2: the per-layer collectives stay inside S = {0, 1}; ranks 2 and 3 see none of them.
        if rank in (0, 1):
            assert res["s2_chain"]["draft_group_collectives"] == per_step_full * STEPS
        else:
            assert res["s2_chain"]["draft_group_collectives"] == 0


@pytest.mark.engine  # 4 gloo processes (module fixture)
@pytest.mark.slow
def test_vocab_gather_and_guard(gloo_results):
    for rank, res in enumerate(gloo_results):
        assert res["s1_chain"]["has_full_head"] == (rank == 0)
        assert res["s2_chain"]["has_full_head"] == (rank in (0, 1))
        if rank == 0:
            assert res["s1_chain"]["guard"] == "raised"
        assert res["s1_chain"]["bytes"] == BS * STEPS * 8


# ---- pure unit tests (no processes) ------------------------------------------------------------------------------


def test_layout_roundtrip_chain_and_tree():
    chain = ProposalLayout(steps=5)
    tok = torch.arange(64 * 5).view(64, 5)
    buf = chain.pack(tok)
    assert buf.numel() == 320 and chain.nbytes(64) == 2560  # 2.5 KB at bs=64, s=5
    t, p, s = chain.unpack(buf, 64)
    assert torch.equal(t, tok) and p is None and s is None
    tree = ProposalLayout(steps=3, topk=4, num_draft_tokens=8)
    assert (tree.token_cols, tree.parent_cols, tree.score_cols) == (7, 9, 7)
    tok, par, sc = torch.randint(0, 9, (3, 7)), torch.randint(-1, 9, (3, 9)), torch.randint(0, 12, (3, 7))
    t, p, s = tree.unpack(tree.pack(tok, par, sc), 3)
    assert torch.equal(t, tok) and torch.equal(p, par) and torch.equal(s, sc)
    with pytest.raises(ValueError):
        tree.pack(tok)
    assert ProposalLayout(steps=1).chain_parents(1)[0].shape == (1, 0)
    parents, scores = chain.chain_parents(2)
    assert parents[0].tolist() == [-1, 0, 1, 2, 3] and scores[0].tolist() == [0, 1, 2, 3, 4]


TOPO_PCIE = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    CPU Affinity    NUMA Affinity
GPU0     X      PIX     PXB     PXB     SYS     SYS     SYS     SYS     0-31            0
GPU1    PIX      X      PXB     PXB     SYS     SYS     SYS     SYS     0-31            0
GPU2    PXB     PXB      X      PIX     SYS     SYS     SYS     SYS     0-31            0
GPU3    PXB     PXB     PIX      X      SYS     SYS     SYS     SYS     0-31            0
GPU4    SYS     SYS     SYS     SYS      X      PIX     PXB     PXB     32-63           1
GPU5    SYS     SYS     SYS     SYS     PIX      X      PXB     PXB     32-63           1
GPU6    SYS     SYS     SYS     SYS     PXB     PXB      X      PIX     32-63           1
GPU7    SYS     SYS     SYS     SYS     PXB     PXB     PIX      X      32-63           1

Legend:
  X    = Self
"""

TOPO_NV = """\
        GPU0    GPU1    GPU2    GPU3
GPU0     X      SYS     NV4     SYS
GPU1    SYS      X      SYS     NV4
GPU2    NV4     SYS      X      SYS
GPU3    SYS     NV4     SYS      X
"""


def test_choose_draft_ranks():
    assert choose_draft_ranks(8, 1) == (0,)
    assert choose_draft_ranks(8, 2) == (0, 1)
    assert choose_draft_ranks(8, 2, ranks=[5, 4]) == (4, 5)
    pcie = parse_nvidia_smi_topo(TOPO_PCIE)
    assert pcie.size == 8 and pcie.island(0) == [0, 1, 2, 3]
    assert choose_draft_ranks(8, 4, topology=pcie) == (0, 1, 2, 3)
    assert choose_draft_ranks(8, 2, topology=pcie) == (0, 1)  # PIX before PXB
    nv = parse_nvidia_smi_topo(TOPO_NV)
    assert choose_draft_ranks(4, 2, topology=nv) == (0, 2)  # rank 0's NVLink peer, not rank 1
    for bad in [dict(ranks=[0, 0]), dict(ranks=[0]), dict(ranks=[0, 8])]:
        with pytest.raises(DraftGroupError):
            choose_draft_ranks(8, 2, **bad)
    with pytest.raises(DraftGroupError, match="divide"):
        choose_draft_ranks(8, 3)
    with pytest.raises(DraftGroupError, match="inside"):
        DraftPlacement(target_ranks=(0, 1, 2, 3), draft_ranks=(4,))
    assert isinstance(pcie, GpuTopology)
