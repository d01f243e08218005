"""Compares every CPU stand-in with the pinned SGLang's own implementation on seeded random inputs and prints one JSON
object: {check name: {"cases": n, "mismatches": [...]}}.

Run in its own process with ``TRITON_INTERPRET=1`` (set before anything imports triton): SGLang's Triton kernels
then execute in Triton's CPU interpreter, so each stand-in is compared with the kernel itself, not a re-reading of
it. Where SGLang ships a pure-torch reference (``move_kv_cache_native``, ``RotaryEmbedding.forward_native``) that
is the oracle.
"""

from __future__ import annotations

import json
import os
import random
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime"))

import torch  # noqa: E402

from specdecode_runtime.cpu import import_paths  # noqa: E402

import_paths.install_in_process()
from sglang.kernels.ops.speculative import cache_locs, eagle, spec_tree  # noqa: E402
from sglang.srt.mem_cache import allocation  # noqa: E402
from sglang.srt.mem_cache.memory_pool import move_kv_cache_native  # noqa: E402
from sglang.srt.utils import next_power_of_2  # noqa: E402

from specdecode_runtime.cpu import attention as A  # noqa: E402
from specdecode_runtime.cpu import kernels as K  # noqa: E402
from specdecode_runtime.cpu.rotary import rotary_embedding  # noqa: E402

CASES = int(os.environ.get("ORACLE_CASES", "12"))
results: dict[str, dict] = {}


def record(name: str, case: int, ok: bool, detail: str = "") -> None:
    r = results.setdefault(name, {"cases": 0, "mismatches": []})
    r["cases"] += 1
    if not ok:
        r["mismatches"].append(f"case {case}: {detail}")


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))


def pool_inputs(rng: random.Random, bs: int, pool_len: int = 64):
    rows = rng.sample(range(8), bs)
    req_to_token = torch.randint(0, 500, (8, pool_len), dtype=torch.int32)
    return torch.tensor(rows, dtype=torch.int64), req_to_token


def check_assign_req_to_token_pool(rng, case):
    bs = rng.randint(1, 5)
    rpi, r2t = pool_inputs(rng, bs)
    start = torch.tensor([rng.randint(0, 20) for _ in range(bs)])
    end = start + torch.tensor([rng.randint(0, 9) for _ in range(bs)])
    out = torch.randint(0, 500, (int((end - start).sum()) + 1,), dtype=torch.int64)
    mine, ref = r2t.clone(), r2t.clone()
    K.assign_req_to_token_pool_func(rpi, mine, start, end, out, bs)
    allocation.assign_req_to_token_pool[(bs,)](rpi, ref, start, end, out, ref.shape[1], next_power_of_2(bs))
    record("assign_req_to_token_pool", case, same(mine, ref))


def check_copy_all_layer_kv_cache(rng, case):
    layers, rows = rng.randint(1, 3), 40
    k = [torch.randn(rows, 2, 4) for _ in range(layers)]
    v = [torch.randn(rows, 2, 4) for _ in range(layers)]
    n = rng.randint(1, 10)
    locs = rng.sample(range(rows), 2 * n)
    tgt, src = torch.tensor(locs[:n]), torch.tensor(locs[n:])
    if case % 3 == 0:  # chained move: a target row is also a later source row
        src[-1] = tgt[0]
    ref_k, ref_v = [t.clone() for t in k], [t.clone() for t in v]
    move_kv_cache_native(ref_k, ref_v, tgt, src)
    bufs = [*k, *v]
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in bufs])
    K.copy_all_layer_kv_cache_func(ptrs, strides, tgt, src, n, next_power_of_2(n), {})
    record("copy_all_layer_kv_cache", case, all(same(a, b) for a, b in zip([*k, *v], [*ref_k, *ref_v])))


def check_assign_draft_cache_locs(rng, case):
    bs, topk, steps = rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 4)
    rpi, r2t = pool_inputs(rng, bs)
    seq_lens = torch.tensor([rng.randint(1, 30) for _ in range(bs)])
    width = topk * steps
    mine, ref = torch.zeros(bs * width, dtype=torch.int64), torch.zeros(bs * width, dtype=torch.int64)
    pos_mine, pos_ref = torch.zeros(bs * topk, dtype=torch.int64), torch.zeros(bs * topk, dtype=torch.int64)
    with_pos = case % 2 == 0
    K.assign_draft_cache_locs_contiguous_func(
        rpi, r2t, seq_lens, mine, topk, steps, positions=pos_mine if with_pos else None
    )
    cache_locs.assign_draft_cache_locs_contiguous[(bs,)](
        rpi,
        r2t,
        seq_lens,
        ref,
        r2t.shape[1],
        topk,
        steps,
        positions=pos_ref if with_pos else None,
        mrope=None,
        BS=bs,
        WRITE_POSITIONS=with_pos,
        WRITE_MROPE=False,
    )
    record("assign_draft_cache_locs_contiguous", case, same(mine, ref) and same(pos_mine, pos_ref))


def check_assign_extend_cache_locs(rng, case):
    bs = rng.randint(1, 4)
    rpi, r2t = pool_inputs(rng, bs)
    ndt = rng.randint(1, 6)
    start = torch.tensor([rng.randint(0, 30) for _ in range(bs)])
    end = start + ndt
    mine = K.assign_extend_cache_locs_func(rpi, r2t, start, end, bs, ndt, "cpu")
    ref = torch.empty(bs * ndt, dtype=torch.int64)
    cache_locs.assign_extend_cache_locs[(bs,)](rpi, r2t, start, end, ref, r2t.shape[1], next_power_of_2(bs))
    record("assign_extend_cache_locs", case, same(mine, ref))


def check_fill_front_out_cache_loc(rng, case):
    bs, width = rng.randint(1, 4), rng.randint(2, 6)
    out_cache_loc = torch.randint(0, 500, (bs * width,), dtype=torch.int64)
    num_front = torch.tensor([rng.randint(0, width) for _ in range(bs)])
    mine = torch.full((bs * width,), -7, dtype=torch.int64)
    ref = mine.clone()
    K.fill_front_out_cache_loc_func(num_front, out_cache_loc, mine)
    window = out_cache_loc.view(bs, -1)
    cache_locs.assign_extend_cache_locs[(bs,)](
        torch.arange(bs), window, torch.zeros_like(num_front), num_front, ref, window.shape[1], next_power_of_2(bs)
    )
    record("fill_front_out_cache_loc", case, same(mine, ref))


def check_fill_bonus_and_accept(rng, case):
    bs, stride = rng.randint(1, 4), rng.randint(1, 5)
    tokens = torch.randint(0, 100, (bs, stride))
    lens = torch.tensor([rng.randint(1, stride) for _ in range(bs)], dtype=torch.int32)
    mine, ref = torch.zeros(bs, dtype=torch.int64), torch.zeros(bs, dtype=torch.int64)
    K.fill_bonus_tokens_func(tokens, lens, mine, stride, bs)
    eagle.fill_bonus_tokens[(bs,)](tokens, lens, ref, stride)
    record("fill_bonus_tokens", case, same(mine, ref))
    size = bs * stride
    accept_index = torch.tensor([rng.choice([-1, rng.randint(0, size - 1)]) for _ in range(size)], dtype=torch.int32)
    out_cache_loc = torch.randint(0, 500, (size,), dtype=torch.int64)
    mine, ref = torch.full((size,), -3, dtype=torch.int64), torch.full((size,), -3, dtype=torch.int64)
    K.fill_accept_out_cache_loc_func(accept_index, out_cache_loc, mine, size)
    eagle.fill_accept_out_cache_loc[(size,)](accept_index, out_cache_loc, ref, next_power_of_2(size))
    record("fill_accept_out_cache_loc", case, same(mine, ref))


def tree_inputs(rng, bs, topk, steps, ndt):
    parent_width = topk * (steps - 1) + 1
    space = topk + (steps - 1) * topk * topk
    sel = torch.tensor([sorted(rng.sample(range(space), ndt - 1)) for _ in range(bs)], dtype=torch.int64)
    parents = torch.tensor(
        [[-1] + [rng.randint(0, space - 1) for _ in range(parent_width - 1)] for _ in range(bs)], dtype=torch.int64
    )
    seq_lens = torch.tensor([rng.randint(1, 12) for _ in range(bs)], dtype=torch.int64)
    return parents, sel, seq_lens


def build_tree(fn, parents, sel, seq_lens, topk, steps, ndt, mode, fill=False):
    bs = seq_lens.shape[0]
    size = ndt * int((seq_lens + ndt).sum()) if mode == 0 else bs * ndt * ndt
    out = dict(
        tree_mask=torch.full((size,), fill, dtype=torch.bool),
        positions=torch.zeros(bs * ndt, dtype=torch.int64),
        retrieve_index=torch.full((bs, ndt), -1, dtype=torch.int64),
        retrieve_next_token=torch.full((bs, ndt), -1, dtype=torch.int64),
        retrieve_next_sibling=torch.full((bs, ndt), -1, dtype=torch.int64),
    )
    fn(
        parents,
        sel,
        seq_lens,
        out["tree_mask"],
        out["positions"],
        out["retrieve_index"],
        out["retrieve_next_token"],
        out["retrieve_next_sibling"],
        topk,
        steps,
        ndt,
        spec_tree.TreeMaskMode(mode),
    )
    return out


def check_tree(rng, case):
    bs, topk, steps = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 4)
    ndt = rng.randint(2, min(topk + (steps - 1) * topk * topk, 8) + 1)
    parents, sel, seq_lens = tree_inputs(rng, bs, topk, steps, ndt)
    for mode in (0, 1):
        mine = build_tree(K.build_tree_kernel_efficient_func, parents, sel, seq_lens, topk, steps, ndt, mode)
        ref = build_tree(spec_tree.sgl_build_tree_kernel_triton, parents, sel, seq_lens, topk, steps, ndt, mode)
        bad = [k for k in mine if not same(mine[k], ref[k])]
        record("build_tree_kernel_efficient", case, not bad, f"mode {mode} differs in {bad}")
    # greedy verify over that tree, with tokens from a 3-word vocabulary so that matches are frequent
    tree = build_tree(K.build_tree_kernel_efficient_func, parents, sel, seq_lens, topk, steps, ndt, 0)
    candidates = torch.randint(0, 3, (bs, ndt))
    target = torch.randint(0, 3, (bs, ndt))
    outs = []
    for fn in (K.verify_tree_greedy_func, spec_tree.verify_tree_greedy_triton):
        predicts = torch.full((bs * ndt,), -1, dtype=torch.int64)
        accept_index = torch.full((bs, steps + 1), -1, dtype=torch.int64)
        accept_num = torch.zeros(bs, dtype=torch.int64)
        fn(
            predicts=predicts,
            accept_index=accept_index,
            accept_token_num=accept_num,
            candidates=candidates,
            retrieve_index=tree["retrieve_index"],
            retrieve_next_token=tree["retrieve_next_token"],
            retrieve_next_sibling=tree["retrieve_next_sibling"],
            target_predict=target,
        )
        outs.append((predicts, accept_index, accept_num))
    record("verify_tree_greedy", case, all(same(a, b) for a, b in zip(*outs)), f"{outs}")


def check_draft_step_rows(rng, case):
    bs, topk, steps = rng.randint(1, 3), rng.randint(1, 3), rng.randint(2, 4)
    rpi, r2t = pool_inputs(rng, bs)
    seq_lens = torch.tensor([rng.randint(1, 20) for _ in range(bs)], dtype=torch.int64)
    width = int(seq_lens.sum()) * topk + bs * topk * steps
    kv_indices = torch.full((steps, width), -1, dtype=torch.int64)
    kv_indptr = torch.zeros((steps, bs * topk + 1), dtype=torch.int32)
    positions = seq_lens.repeat_interleave(topk)
    cache_locs.generate_draft_decode_kv_indices[(steps, bs, topk)](
        rpi,
        r2t,
        seq_lens,
        kv_indices,
        kv_indptr,
        positions,
        r2t.shape[1],
        kv_indices.shape[1],
        kv_indptr.shape[1],
        next_power_of_2(bs),
        next_power_of_2(steps),
        next_power_of_2(bs * topk),
        1,
    )
    ok = True
    for step in range(steps - 1):
        rows = A.draft_step_rows(r2t, rpi, seq_lens, topk, steps, step)
        ptr = kv_indptr[step].tolist()
        ref = [kv_indices[step, ptr[i] : ptr[i + 1]] for i in range(bs * topk)]
        ok &= len(rows) == len(ref) and all(same(a, b.long()) for a, b in zip(rows, ref))
    record("draft_decode_kv_rows", case, ok)


def check_rotary(rng, case):
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

    head, rot = rng.choice([(8, 8), (16, 8), (16, 16)])
    neox = case % 2 == 0
    emb = RotaryEmbedding(head, rot, 128, 10000, neox, torch.float32)
    emb._apply_rotary_emb_wrapped = __import__(
        "sglang.srt.layers.rotary_embedding.utils", fromlist=["apply_rotary_emb"]
    ).apply_rotary_emb
    n = rng.randint(1, 6)
    pos = torch.tensor([rng.randint(0, 100) for _ in range(n)])
    q, k = torch.randn(n, 3 * head), torch.randn(n, head)
    ref_q, ref_k = emb.forward_native(pos, q.clone(), k.clone())
    mine_q, mine_k = q.clone(), k.clone()
    rotary_embedding(pos, mine_q, mine_k, head, emb.cos_sin_cache, neox)
    record(
        "rotary_embedding",
        case,
        bool(torch.allclose(mine_q, ref_q, atol=1e-5) and torch.allclose(mine_k, ref_k, atol=1e-5)),
    )


def check_verify_mask(rng, case):
    """The FULL_MASK rows the tree builder writes, sliced per request by the verify attention."""
    bs, topk, steps = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 3)
    ndt = rng.randint(2, min(topk + (steps - 1) * topk * topk, 6) + 1)
    parents, sel, seq_lens = tree_inputs(rng, bs, topk, steps, ndt)
    tree = build_tree(spec_tree.sgl_build_tree_kernel_triton, parents, sel, seq_lens, topk, steps, ndt, 0, fill=True)
    offset, ok = 0, True
    for L in seq_lens.tolist():
        m = A.verify_mask(L, ndt, tree["tree_mask"], offset, torch.device("cpu"))
        full = tree["tree_mask"][offset : offset + ndt * (L + ndt)].view(ndt, L + ndt)
        # every row sees the prefix, the root and itself, and exactly the cells the kernel set
        ok &= bool(m[:, : L + 1].all()) and bool(m[:, L:].diagonal().all()) and torch.equal(m, full)
        offset += ndt * (L + ndt)
    record("verify_mask_slices", case, ok and offset == tree["tree_mask"].numel())


CHECKS = [
    check_assign_req_to_token_pool,
    check_copy_all_layer_kv_cache,
    check_assign_draft_cache_locs,
    check_assign_extend_cache_locs,
    check_fill_front_out_cache_loc,
    check_fill_bonus_and_accept,
    check_tree,
    check_draft_step_rows,
    check_rotary,
    check_verify_mask,
]

if __name__ == "__main__":
    torch.manual_seed(0)
    for check in CHECKS:
        rng = random.Random(check.__name__)
        for case in range(CASES):
            try:
                check(rng, case)
            except Exception as e:  # noqa: BLE001 - reported per check, the test names it
                record(check.__name__.removeprefix("check_"), case, False, f"{type(e).__name__}: {e}")
    print(json.dumps(results))
