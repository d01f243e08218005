"""Torch implementations of the pinned SGLang's Triton / custom kernels that EAGLE and EAGLE-3 reach on a CPU.

Each function has the signature of the SGLang wrapper it replaces (named in its docstring) and writes its
outputs in place exactly as the kernel does, program by program: the loops run over the kernel's grid (requests,
draft tokens), which is tiny on a CPU run. ``tests/runtime/test_cpu_kernels.py`` checks every one against
SGLang's own kernel executed by Triton's interpreter.
"""

from __future__ import annotations

import ctypes

import torch


def assign_req_to_token_pool_func(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size):
    """``sglang.srt.mem_cache.allocation.assign_req_to_token_pool_func``: request ``i`` gets the next
    ``end-start`` entries of ``out_cache_loc`` at columns ``start..end`` of its ``req_to_token`` row."""
    starts, ends = start_offset[:batch_size].tolist(), end_offset[:batch_size].tolist()
    rows = req_pool_indices[:batch_size].tolist()
    pos = 0
    for row, s, e in zip(rows, starts, ends):
        n = e - s
        if n > 0:
            req_to_token[row, s:e] = out_cache_loc[pos : pos + n].to(req_to_token.dtype)
        pos += max(n, 0)


def _byte_view(address: int, nbytes: int) -> torch.Tensor:
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=torch.uint8)


def copy_all_layer_kv_cache_func(data_ptrs, strides, tgt_loc, src_loc, num_locs, num_locs_upper, kv_copy_config):
    """``sglang.kernels.ops.kvcache.cache_move.copy_all_layer_kv_cache_func``: for every buffer (raw address and
    row stride in bytes) copy rows ``src_loc[:num_locs]`` onto rows ``tgt_loc[:num_locs]``; all source rows are
    read before any row is written (the kernel's load-then-store per tile)."""
    n = int(num_locs)
    if n <= 0:
        return
    src, tgt = src_loc[:n].long(), tgt_loc[:n].long()
    rows = int(torch.maximum(src.max(), tgt.max()).item()) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist()):
        view = _byte_view(int(address), rows * int(stride)).view(rows, int(stride))
        view[tgt] = view[src].clone()


def assign_draft_cache_locs_contiguous_func(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, topk, num_cols, positions=None, mrope=None
):
    """``sglang.kernels.ops.speculative.cache_locs.assign_draft_cache_locs_contiguous_func``: request ``i``'s
    ``topk * num_cols`` slots from column ``seq_lens[i]`` on go to ``out_cache_loc[i*topk*num_cols:]``;
    with ``positions``, each of its ``topk`` entries gets ``seq_lens[i]`` (and each mrope axis likewise)."""
    width = topk * num_cols
    bs = seq_lens.shape[0]
    for i, (row, start) in enumerate(zip(req_pool_indices[:bs].tolist(), seq_lens.tolist())):
        out_cache_loc[i * width : (i + 1) * width] = req_to_token[row, start : start + width].to(out_cache_loc.dtype)
        if positions is not None:
            positions[i * topk : (i + 1) * topk] = start
            if mrope is not None:
                for axis in range(3):
                    mrope.view(-1)[axis * bs * topk + i * topk : axis * bs * topk + (i + 1) * topk] = start


def build_tree_kernel_efficient_func(
    parent_list,
    top_scores_index,
    seq_lens,
    tree_mask,
    positions,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    topk,
    spec_steps,
    num_verify_tokens,
    tree_mask_mode,
):
    """``sglang.kernels.ops.speculative.spec_tree.build_tree_kernel_efficient_func`` (SGLang's Triton
    ``sgl_build_tree_kernel_efficient_triton``): the draft tree's retrieve links, mask and positions."""
    mode = int(tree_mask_mode)
    if mode == 2:
        raise NotImplementedError("QLEN_ONLY_BITPACKING tree masks are not used by the torch-native backend")
    n = int(num_verify_tokens)
    bs = seq_lens.shape[0]
    lens = seq_lens.tolist()
    prefix = 0
    parents = parent_list.view(bs, -1) if parent_list.numel() else parent_list.view(bs, 0)
    sel = top_scores_index.view(bs, -1).tolist()
    mask, pos = tree_mask.view(-1), positions.view(-1)
    r_idx, r_next, r_sib = retrieve_index.view(-1), retrieve_next_token.view(-1), retrieve_next_sibling.view(-1)
    for b in range(bs):
        seq_len = lens[b]
        seq_tree_idx = n * n * b + prefix * n
        prefix += seq_len
        pos[b * n] = seq_len
        base = b * n
        row_sel = sel[b]
        row_par = parents[b].tolist()
        for i in range(n - 1, 0, -1):
            r_idx[base + i] = base + i
            parent_tb = row_sel[i - 1] // topk
            parent_position, found = 0, parent_tb == 0
            if not found:
                parent_token = row_par[parent_tb]
                for pp in range(n - 1):
                    if row_sel[pp] == parent_token:
                        parent_position, found = pp + 1, True
                        break
            if found:
                nxt = int(r_next[base + parent_position])
                r_next[base + parent_position] = i
                if nxt != -1:
                    r_sib[base + i] = nxt
        r_idx[base] = base
        for x in range(n):
            if mode == 0:
                tok = seq_tree_idx + (seq_len + n) * x + seq_len + 1
            else:
                tok = n * n * b + n * x + 1
            mask[tok - 1] = True
            mask[tok : tok + n - 1] = False
            if x > 0:
                cur, depth_pos = x - 1, 0
                for _ in range(spec_steps):
                    depth_pos += 1
                    mask[tok + cur] = True
                    parent_tb = row_sel[cur] // topk
                    if parent_tb == 0:
                        break
                    parent_token = row_par[parent_tb]
                    for cp in range(n - 1):
                        if row_sel[cp] == parent_token:
                            cur = cp
                            break
                    else:
                        break
                pos[base + x] = depth_pos + seq_len


def verify_tree_greedy_func(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    target_predict,
    topk=-1,
):
    """``sglang.kernels.ops.speculative.spec_tree.verify_tree_greedy_func``: walk the tree from the root,
    accepting at each level the first child (in sibling order) whose token is the target's prediction."""
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    cand, r_idx = candidates.tolist(), retrieve_index.tolist()
    r_next, r_sib = retrieve_next_token.tolist(), retrieve_next_sibling.tolist()
    target = target_predict.view(-1)
    for b in range(bs):
        last = r_idx[b][0]
        accept_index[b, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = r_next[b][cur]
            want = int(target[last])
            matched = False
            while cur != -1:
                if cand[b][cur] == want:
                    predicts[last] = want
                    accepted += 1
                    accept_index[b, accepted] = r_idx[b][cur]
                    last = r_idx[b][cur]
                    matched = True
                    break
                cur = r_sib[b][cur]
            if not matched:
                break
        accept_token_num[b] = accepted
        predicts[last] = target[last]
    return predicts, accept_index, accept_token_num


def fill_bonus_tokens_func(accept_tokens, accept_lens, bonus_tokens, accept_stride, batch_size):
    """``sglang.kernels.ops.speculative.eagle.fill_bonus_tokens_func``: request ``i``'s bonus token is its last
    accepted token, ``accept_tokens.flat[accept_stride*i + accept_lens[i] - 1]``."""
    flat = accept_tokens.reshape(-1)
    for i, n in enumerate(accept_lens[:batch_size].tolist()):
        bonus_tokens[i] = flat[accept_stride * i + n - 1]


def fill_accept_out_cache_loc_func(accept_index, out_cache_loc, accept_out_cache_loc, size):
    """``sglang.kernels.ops.speculative.eagle.fill_accept_out_cache_loc_func``: the slots of the accepted
    entries (``accept_index`` != -1, in order) packed to the front of ``accept_out_cache_loc``."""
    flat = accept_index.reshape(-1)[:size]
    keep = flat[flat > -1].long()
    accept_out_cache_loc[: keep.numel()] = out_cache_loc[keep]


def assign_extend_cache_locs_func(
    req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device
):
    """``sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func``: request ``i``'s
    ``req_to_token`` columns ``start..end`` (its slots), concatenated in request order."""
    out = torch.empty((batch_size * draft_token_num,), dtype=torch.int64, device=device)
    pos = 0
    for row, s, e in zip(
        req_pool_indices[:batch_size].tolist(), start_offset[:batch_size].tolist(), end_offset[:batch_size].tolist()
    ):
        n = max(e - s, 0)
        out[pos : pos + n] = req_to_token[row, s:e]
        pos += n
    return out


def fill_front_out_cache_loc_func(num_front, out_cache_loc, front_out_cache_loc):
    """``sglang.kernels.ops.speculative.cache_locs.fill_front_out_cache_loc_func``: the first ``num_front[i]``
    slots of request ``i``'s window of ``out_cache_loc``, packed in request order."""
    bs = num_front.numel()
    window = out_cache_loc.view(bs, -1)
    pos = 0
    for i, n in enumerate(num_front.tolist()):
        front_out_cache_loc[pos : pos + n] = window[i, :n]
        pos += n
