"""On S, the draft's raw proposals go out from S's leader to every TP rank before the verify input is built.

``build_eagle_verify_input`` (as bound in ``eagle_worker_v2``) is the one place every rank passes between the draft
graph replay and the target verify, so the broadcast happens there: eagerly, never inside a CUDA graph. Ranks
outside S receive the same broadcast in :class:`.remote_draft_worker` ``draft()`` and build their own verify input
from it. Draft probabilities are not broadcast: S passes ``None`` for them, as the ranks outside S do.
"""

from __future__ import annotations

from ..draft_group import ProposalLayout
from . import process_state as state


def wrap_build(orig):
    def build_eagle_verify_input(batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, **kw):
        st = state.split
        if st is None or batch.forward_mode.is_idle():
            return orig(batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, **kw)

        topk = kw["topk"]
        layout = ProposalLayout(kw["num_steps"], topk, kw["num_draft_tokens"])
        bs = batch.seq_lens.shape[0]
        tokens, p, s = st.broadcaster.broadcast(
            bs,
            draft_tokens,
            parent_list if topk > 1 else None,
            top_scores_index if topk > 1 else None,
            layout=layout,
        )
        if topk > 1:
            parent_list, top_scores_index = p, s
        return orig(batch, draft_input, parent_list, top_scores_index, tokens, None, **kw)

    return build_eagle_verify_input
