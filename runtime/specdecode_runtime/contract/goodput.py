"""The one goodput model: expected accepted tokens per cycle and the cycle-time cost model.

Shared by the tuner (which step count to run), the simulator (how fast a step count runs) and the planner (which
draft TP to run), so a decision and the world it is judged in can never disagree about arithmetic.

Acceptance is given per position as *conditional* rates: ``alphas[j-1]`` is the probability that draft position j
is accepted given that position j-1 was; positions past the end of the list repeat the last value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence


def alpha_at(alphas: Sequence[float], position: int) -> float:
    """Conditional acceptance of 1-based ``position``; the last value repeats past the end."""
    if not alphas:
        return 0.0
    return float(alphas[min(position, len(alphas)) - 1])


def expected_tokens(alphas: Sequence[float], steps: int) -> float:
    """E(steps) = 1 + sum_{j<=steps} prod_{i<=j} alpha_i: tokens emitted by one verify of a chain of ``steps``
    draft steps (bonus included)."""
    total, survive = 1.0, 1.0
    for j in range(1, steps + 1):
        survive *= alpha_at(alphas, j)
        total += survive
    return total


def expected_tokens_tree(alphas: Sequence[float], steps: int, topk: int) -> float:
    """Tree drafts (topk > 1): each level offers ``topk`` candidates, so a level is accepted with
    1 - (1 - alpha)^topk under independence between siblings. Optimistic, used only where no tree data exists."""
    if topk <= 1:
        return expected_tokens(alphas, steps)
    widened = [1.0 - (1.0 - alpha_at(alphas, j)) ** topk for j in range(1, steps + 1)]
    return expected_tokens(widened, steps)


@dataclass(frozen=True)
class CycleCost:
    """Cycle-time cost model in milliseconds for one batch size.

    A speculative cycle of ``steps`` draft steps costs ``verify + steps * draftStep + draftExtend + overhead`` where
    verify and draft-extend process batch*(steps+1) tokens and a draft step processes one token per sequence.
    steps = 0 is the target-only cycle: ``verify.base + verify.perToken * batch + overhead``, plus ``warm_extend_*``:
    what the cycle spends keeping the draft's KV current so a later tier drafts from a warm state. 0 for the
    runtime, whose tier 0 is plain decoding (the draft catches up in the next speculative cycle instead); the stock
    pinned SGLang's tier 0 runs the draft extend over the new token of every sequence (measured on one H200 it was a
    quarter of a batch-1 steps-0 cycle), which these terms can model.

    ``host_base + host_per_step * steps`` is the scheduler's host work that a speculative cycle adds and that no
    replay of a captured stage sees (building the verify tree, accepting, the overlap scheduler's bookkeeping). It
    comes from served cycles (the start-up served calibration, stage ``cycle``); 0 where only stage replays were
    timed. On a target whose decode is short it is as large as the GPU work: on one H200 a 304M target's served
    speculative cycle was 1.1-1.6x what its stage replays add up to.
    """

    verify_base: float
    verify_per_token: float
    draft_base: float
    draft_per_seq: float
    extend_base: float
    extend_per_token: float
    overhead: float
    broadcast: float = 0.0  # proposal broadcast per cycle when the draft runs on a subset of the TP ranks
    warm_extend_base: float = 0.0  # steps 0: the draft extend over one token per sequence, fixed part
    warm_extend_per_seq: float = 0.0  # ... and per sequence
    host_base: float = 0.0  # host work per speculative cycle that stage replays do not see, fixed part
    host_per_step: float = 0.0  # ... and per draft step

    def host_ms(self, steps: int) -> float:
        """The speculative cycle's host work beyond the timed stages (0 at steps 0, whose host work is overhead)."""
        return self.host_base + self.host_per_step * steps if steps > 0 else 0.0

    def warm_extend_ms(self, batch: float) -> float:
        """What a steps-0 cycle spends extending the draft's KV (0 where steps 0 is plain decoding)."""
        return self.warm_extend_base + self.warm_extend_per_seq * batch

    def verify_ms(self, steps: int, batch: float) -> float:
        return self.verify_base + self.verify_per_token * batch * (steps + 1)

    def draft_step_ms(self, batch: float) -> float:
        return self.draft_base + self.draft_per_seq * batch

    def extend_ms(self, steps: int, batch: float) -> float:
        return self.extend_base + self.extend_per_token * batch * (steps + 1)

    def cycle_ms(self, steps: int, batch: float) -> float:
        if steps <= 0:
            return self.verify_base + self.verify_per_token * batch + self.overhead + self.warm_extend_ms(batch)
        return (
            self.verify_ms(steps, batch)
            + steps * self.draft_step_ms(batch)
            + self.extend_ms(steps, batch)
            + self.overhead
            + self.broadcast
            + self.host_ms(steps)
        )


class CostModel(Protocol):
    """What the goodput model reads of a cost: the cycle time at a step count and batch size. ``CycleCost`` is one;
    the tuner's online-refined cost is another."""

    def cycle_ms(self, steps: int, batch: float) -> float: ...


def goodput(alphas: Sequence[float], cost: CostModel, steps: int, batch: float) -> float:
    """Tokens per second for the whole batch at ``steps`` draft steps per cycle (0: no speculation)."""
    tokens = batch * (expected_tokens(alphas, steps) if steps > 0 else 1.0)
    return tokens / cost.cycle_ms(steps, batch) * 1000.0


def best_steps(alphas: Sequence[float], cost: CostModel, batch: float, candidates: Iterable[int]) -> tuple[int, float]:
    """The candidate step count with the highest goodput (ties go to the smaller one: less draft work, same tokens)."""
    chosen, best_g = -1, -math.inf
    for steps in sorted(set(candidates)):
        g = goodput(alphas, cost, steps, batch)
        if g > best_g * (1.0 + 1e-12):
            chosen, best_g = steps, g
    if chosen < 0:
        raise ValueError("no candidate step counts given")
    return chosen, best_g


def inter_token_latency_ms(alphas: Sequence[float], cost: CostModel, steps: int, batch: float) -> float:
    """Mean time between tokens of one sequence: a cycle emits E(steps) tokens per sequence."""
    tokens = expected_tokens(alphas, steps) if steps > 0 else 1.0
    return cost.cycle_ms(steps, batch) / tokens
