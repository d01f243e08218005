"""Split-draft defects found by reading the patch against the pinned SGLang, each pinned by a test that runs SGLang's
own code where it can run on a CPU (its tree-building helpers) or real collectives (gloo processes)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from runtime_testlib import sglang_or_skip  # noqa: E402

from specdecode_runtime.draft_group import ProposalLayout  # noqa: E402


def _sglang_tree(bs: int, topk: int, steps: int, n: int):
    """Run SGLang's own per-step top-k selection and ``organize_draft_results`` on random draft scores."""
    sglang_or_skip()
    from sglang.srt.speculative.eagle_utils import organize_draft_results
    from sglang.srt.speculative.spec_utils import select_top_k_tokens

    g = torch.Generator().manual_seed(3)
    vocab, hidden = 50, 8
    topk_p = torch.rand(bs, topk, generator=g).softmax(-1)
    topk_index = torch.randint(0, vocab, (bs, topk), generator=g)
    hs = torch.randn(bs, hidden, generator=g)
    scores = None
    score_list, token_list, parents_list = [], [], []
    for i in range(steps):
        _, hs, scores, (tree_scores, tree_tokens, tree_parents) = select_top_k_tokens(
            i, topk_p, topk_index, hs, scores, topk
        )
        score_list.append(tree_scores)
        token_list.append(tree_tokens)
        parents_list.append(tree_parents)
        if i + 1 < steps:  # the next step's candidates: topk per surviving branch
            topk_p = torch.rand(bs * topk, topk, generator=g).softmax(-1)
            topk_index = torch.randint(0, vocab, (bs * topk, topk), generator=g)
    return organize_draft_results(score_list, token_list, parents_list, n)


@pytest.mark.parametrize("steps,topk,n", [(1, 2, 3), (1, 4, 5), (2, 2, 4), (3, 2, 6), (3, 4, 8)])
def test_tree_layout_matches_sglang_widths(steps, topk, n):
    """The packed widths equal what SGLang's tree code produces, including a single-step tree (no parents)."""
    parent_list, top_scores_index, draft_tokens = _sglang_tree(3, topk, steps, n)
    layout = ProposalLayout(steps, topk, n)
    assert layout.parent_cols == parent_list.shape[1]
    assert layout.token_cols == draft_tokens.shape[1]
    assert layout.score_cols == top_scores_index.shape[1]
    t, p, s = layout.unpack(layout.pack(draft_tokens, parent_list, top_scores_index), 3)
    assert torch.equal(t, draft_tokens) and torch.equal(p, parent_list) and torch.equal(s, top_scores_index)


# ---- S is chosen once, on TP rank 0, and every rank uses that choice ------------------------------------------

_TOPO_NEAR_2 = """\
        GPU0    GPU1    GPU2    GPU3
GPU0     X      SYS     PIX     SYS
GPU1    SYS      X      SYS     PIX
GPU2    PIX     SYS      X      SYS
GPU3    SYS     PIX     SYS      X
"""
_TOPO_NEAR_3 = _TOPO_NEAR_2.replace("GPU0     X      SYS     PIX     SYS", "GPU0     X      SYS     SYS     PIX")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _decide_worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    from specdecode_runtime.draft_group import decide_draft_ranks, parse_nvidia_smi_topo

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4)
    calls = []

    def detect():  # rank 1's nvidia-smi fails, rank 3 sees another matrix: only rank 0's view may count
        calls.append(rank)
        if rank == 1:
            return None
        return parse_nvidia_smi_topo(_TOPO_NEAR_3 if rank == 3 else _TOPO_NEAR_2)

    chosen = decide_draft_ranks(4, 2, None, group=None, src=0, detect=detect)
    given = decide_draft_ranks(4, 2, [1, 3] if rank == 0 else [0, 1], group=None, src=0, detect=detect)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"chosen": chosen, "given": given, "calls": calls}))
    dist.destroy_process_group()


def test_draft_ranks_decided_on_rank0_and_broadcast(tmp_path):
    import torch.multiprocessing as mp

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(_decide_worker, args=(_free_port(), str(tmp_path)), nprocs=4, start_method="spawn", join=True)
    res = [json.loads(Path(tmp_path, f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["chosen"] for r in res] == [[0, 2]] * 4  # rank 0's topology: GPU2 shares its PCIe switch
    assert [r["given"] for r in res] == [[1, 3]] * 4  # rank 0's config wins even if another rank's differs
    assert res[0]["calls"] == [0] and all(r["calls"] == [] for r in res[1:])  # nvidia-smi on rank 0 only
