"""The draft canary's decision: is the new draft's acceptance at least ``minAcceptRatio`` of the old one's?

Pure: counter deltas in, a verdict out. Acceptance is compared per draft position (position k is accepted only
when 1..k-1 were, so a mix of step counts changes the pooled rate but not the per-position one), each position
weighted by the tokens both drafts drafted there. An interval counts once it drafted at least ``min_attempts``
tokens on each side it measures (an idle interval says nothing); the verdict comes after ``intervals`` counted
intervals of each draft: promote at a ratio of at least ``min_ratio``, roll back below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .snapshot import PodSnapshot


@dataclass(frozen=True)
class Acceptance:
    """Drafted and accepted tokens per draft position over some time (summed over batch buckets)."""

    attempts: dict[int, float] = field(default_factory=dict)
    accepted: dict[int, float] = field(default_factory=dict)

    @property
    def drafted(self) -> float:
        return sum(self.attempts.values())

    def plus(self, other: Acceptance) -> Acceptance:
        att, acc = dict(self.attempts), dict(self.accepted)
        for p, v in other.attempts.items():
            att[p] = att.get(p, 0.0) + v
        for p, v in other.accepted.items():
            acc[p] = acc.get(p, 0.0) + v
        return Acceptance(att, acc)

    def rate(self) -> float | None:
        return sum(self.accepted.values()) / self.drafted if self.drafted > 0 else None


def totals(snap: PodSnapshot) -> Acceptance:
    att: dict[int, float] = {}
    acc: dict[int, float] = {}
    for b in snap.buckets.values():
        for p, v in b.attempts.items():
            att[p] = att.get(p, 0.0) + v
        for p, v in b.accepted.items():
            acc[p] = acc.get(p, 0.0) + v
    return Acceptance(att, acc)


def delta(prev: PodSnapshot | None, cur: PodSnapshot | None) -> Acceptance | None:
    """What ``cur`` counted since ``prev``; None when either is missing or unreadable, or a counter went back (the
    pod restarted: the interval is not attributable)."""
    if prev is None or cur is None or not prev.ok or not cur.ok:
        return None
    a, b = totals(prev), totals(cur)
    att: dict[int, float] = {}
    acc: dict[int, float] = {}
    for p, v in b.attempts.items():
        d_att, d_acc = v - a.attempts.get(p, 0.0), b.accepted.get(p, 0.0) - a.accepted.get(p, 0.0)
        if d_att < 0 or d_acc < 0:
            return None
        if d_att > 0:
            att[p], acc[p] = d_att, min(d_acc, d_att)
    return Acceptance(att, acc)


def ratio(new: Acceptance, old: Acceptance) -> float | None:
    """The new draft's acceptance over the old one's, on the positions both drafted at (weighted by tokens drafted
    there by both); None when they share no position."""
    common = [p for p in new.attempts if new.attempts[p] > 0 and old.attempts.get(p, 0.0) > 0]
    if not common:
        return None
    weight = {p: new.attempts[p] + old.attempts[p] for p in common}
    total = sum(weight.values())
    rate_new = sum(weight[p] * new.accepted.get(p, 0.0) / new.attempts[p] for p in common) / total
    rate_old = sum(weight[p] * old.accepted.get(p, 0.0) / old.attempts[p] for p in common) / total
    if rate_old <= 0:
        return 1.0 if rate_new <= 0 else float("inf")
    return rate_new / rate_old


Action = Literal["wait", "promote", "rollback"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    ratio: float | None
    message: str


@dataclass
class CanaryGate:
    intervals: int
    min_ratio: float
    min_attempts: float = 32.0
    new: Acceptance = field(default_factory=Acceptance)
    old: Acceptance = field(default_factory=Acceptance)
    counted_new: int = 0
    counted_old: int = 0

    def add(self, new: Acceptance | None = None, old: Acceptance | None = None) -> None:
        """One interval's measurements: the candidate's, the old draft's, or both (several replicas: the canary and
        the others over the same interval). Both given: the interval counts only if both drafted enough."""
        ok_new = new is not None and new.drafted >= self.min_attempts
        ok_old = old is not None and old.drafted >= self.min_attempts
        if new is not None and old is not None and not (ok_new and ok_old):
            return
        if ok_new and new is not None:
            self.new, self.counted_new = self.new.plus(new), self.counted_new + 1
        if ok_old and old is not None:
            self.old, self.counted_old = self.old.plus(old), self.counted_old + 1

    def decide(self) -> Verdict:
        done = min(self.counted_new, self.counted_old)
        if done < self.intervals:
            return Verdict(
                "wait",
                None,
                f"measured {self.counted_new} of {self.intervals} intervals of the new draft and "
                f"{self.counted_old} of the old (an interval counts with at least {self.min_attempts:g} drafted "
                "tokens)",
            )
        r = ratio(self.new, self.old)
        rn, ro = self.new.rate(), self.old.rate()
        figures = (
            f"acceptance {rn:.3f} (new) vs {ro:.3f} (old) over {done} intervals"
            if rn is not None and ro is not None
            else "no acceptance figures"
        )
        if r is None:
            return Verdict("rollback", None, f"the two drafts drafted at no common position; {figures}")
        if r >= self.min_ratio:
            return Verdict("promote", r, f"per-position acceptance ratio {r:.3f} >= {self.min_ratio:g}; {figures}")
        return Verdict("rollback", r, f"per-position acceptance ratio {r:.3f} < {self.min_ratio:g}; {figures}")
