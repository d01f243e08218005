"""The engine-independent half of the split draft: a draft process group S inside the target's TP group.

Everything here speaks plain ``torch.distributed`` and knows nothing about SGLang, so it runs under gloo on a CPU
(tests) and under NCCL in a pod. ``sglang_patch`` binds it into the pinned SGLang. torch is imported lazily, inside
the functions that need it, so the launcher can validate a placement (:func:`choose_draft_ranks`) without torch.

The pieces, one module each (every public name is re-exported here):

* ``topology`` + ``placement``: :func:`choose_draft_ranks` picks S: ``draft.ranks`` when given, else the ranks
  that share rank 0's PCIe switch / NVLink island (:class:`GpuTopology`, parsed from ``nvidia-smi topo -m``), else
  ranks ``0..d-1``; :func:`decide_draft_ranks` makes that choice once, on the target group's first rank, and
  broadcasts it; :class:`DraftPlacement` names S and the target group in global ranks.
* ``groups``: :class:`DraftGroups` creates, on **every** rank and in a fixed order, the draft group (S) and a
  dedicated broadcast communicator over the whole target group. Group creation is collective over the default
  group, so a rank that skipped it or changed the order would hang everyone: the order is fixed there, once.
* ``init_collectives``: :meth:`DraftGroups.gather_vocab_shards` all-gathers a vocab-sharded tensor (the target's
  embedding, a shared lm_head) once at init, over the target group, so S holds the full tensor (and its own
  |S|-way shard of it).
* ``proposal_layout`` + ``broadcaster``: :class:`ProposalLayout` / :class:`ProposalBroadcaster` pack the proposals
  into one int64 buffer and broadcast it from S's leader: topk=1 sends only ``draft_tokens [bs, steps]`` (the tree
  is a constant chain), topk>1 adds ``parent_list [bs, topk*(steps-1)+1]`` and ``top_scores_index [bs, n-1]``.
  Shapes are never sent: bs, steps and topk are known on every rank (identical schedulers).
* Graph safety (``broadcaster``): the broadcast is eager and refuses to run while the current stream is capturing
  a CUDA graph. A draft graph is replayed on S only, so a collective inside it would hang the ranks outside S.
* ``draft_only`` + ``collective_hooks``: :func:`draft_only_scope` turns a collective issued on S alone over a
  group that reaches outside S (a hidden world barrier, a distributed free-memory probe) into an immediate
  :class:`SubsetCollectiveError` instead of a hang; :class:`CollectiveCounter` counts collectives per group (tests
  and ``NCCL_DEBUG``-free diagnosis).
"""

from __future__ import annotations

from .broadcaster import ProposalBroadcaster
from .collective_hooks import COLLECTIVES, CollectiveCounter
from .draft_only import draft_only_scope, in_draft_only_scope
from .errors import DraftGroupError, SubsetCollectiveError
from .groups import DraftGroups
from .placement import DraftPlacement, choose_draft_ranks, decide_draft_ranks
from .proposal_layout import ProposalLayout
from .topology import GpuTopology, detect_topology, parse_nvidia_smi_topo

__all__ = [
    "COLLECTIVES",
    "CollectiveCounter",
    "DraftGroupError",
    "DraftGroups",
    "DraftPlacement",
    "GpuTopology",
    "ProposalBroadcaster",
    "ProposalLayout",
    "SubsetCollectiveError",
    "choose_draft_ranks",
    "decide_draft_ranks",
    "detect_topology",
    "draft_only_scope",
    "in_draft_only_scope",
    "parse_nvidia_smi_topo",
]
