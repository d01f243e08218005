"""A change of ``spec.draft.model`` alone, rolled out in place: canary on one replica, then promote or roll back.
The same for a draft trained from the capture and passed by the offline gate (tuning/adaptation.py): it is wanted
through status.draft.adaptation (``draft_source.wanted_model``), never through spec.

Why in place: a draft checkpoint is small and the runtime can load one into running pods
(``POST /specdecode/v1/draft``, validated before it replaces anything); restarting every GPU pod for it would cost
minutes of capacity per replica. Why a canary: a new draft that loads fine can still be worse at predicting the
target; acceptance is what it is for, and the pods already count it per draft position.

The renderer keeps naming the served draft (``status.draft.serving``, render/draft_source.py) while this runs, so
the pods' template does not change. One step per tuning interval (tuning/loop.py), after the pods were scraped:

* no rollout yet: ``serving`` is recorded (phase Serving);
* a change the pods cannot load in place (hf://, a new claim): recorded as served at once, so the reconciler
  renders it and the pods restart (the message says why);
* otherwise Canary: the candidate is POSTed to one replica; each interval the per-position acceptance deltas of
  that replica (new) and of the others (old) feed the gate (tuner/draft_gate.py). With one replica it alternates
  between the drafts, one interval each. After ``spec.draft.rollout.intervals`` counted intervals: Promoting (POST
  to every other replica) then Serving with the new draft, or RolledBack (the old draft POSTed back);
* a pod that refuses the candidate (4xx: unreadable, mismatched, missing checkpoint): Failed with its message, a
  DraftRollout condition and a Warning Event; the old draft keeps serving. A canary pod that serves another draft
  than expected (it restarted, and loaded the config's) restarts the canary, at most ``MAX_RESTARTS`` times;
* a newer spec change supersedes a canary: the old one is rolled back first.

Everything is written to ``status.draft`` under its own field manager ``specdecode-draft``; spec is never written.
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import aiohttp

from specdecode_runtime.contract.draft_swap import DRAFT_PATH

from ..api.models import API_VERSION, KIND, PLURAL, DraftRollout
from ..kube_client import resource_path
from ..object_state import ObjectState
from ..render import draft_source
from ..tuner.draft_gate import CanaryGate, delta
from ..tuner.snapshot import PodSnapshot
from .hooks import newest_draft_status as newest_status
from .pods import Target

log = logging.getLogger("specdecode.draft")

DRAFT_MANAGER = "specdecode-draft"
HISTORY_LIMIT = 5
MAX_RESTARTS = 3
CONDITION = "DraftRollout"
MAX_ANSWER_BYTES = 16 * 1024


@dataclass(frozen=True)
class Answer:
    """A pod's answer: ``status`` None when it could not be reached."""

    status: int | None
    body: dict
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def refused(self) -> bool:
        """The pod judged the request (a 4xx, or a 5xx naming its cause); the old draft serves on. 409 (another
        swap runs), 401/403/503 and an unreachable pod are tried again next interval."""
        if self.status is None or self.status in (401, 403, 409, 429, 503):
            return False
        return 400 <= self.status < 500 or bool(self.body.get("cause"))

    @property
    def source(self) -> str | None:
        """The path of the draft the pod serves (GET) or serves now (POST)."""
        return (self.body.get("draft") or {}).get("source")

    @property
    def digest(self) -> str | None:
        return (self.body.get("draft") or {}).get("digest")

    def why(self) -> str:
        if self.status is None:
            return self.detail
        msg = self.body.get("message") or self.body.get("error") or self.detail
        cause = self.body.get("cause")
        return f"HTTP {self.status}" + (f" {cause}" if cause else "") + (f": {msg}" if msg else "")


class PodsApi:
    """GET/POST the draft endpoint of one pod with a bearer token (the step-control token)."""

    def __init__(self, session: aiohttp.ClientSession, token: Callable[[], Awaitable[str | None]], timeout_s: float):
        self.session, self.token, self.timeout_s = session, token, timeout_s

    async def call(self, base_url: str, source: str | None = None) -> Answer:
        token = await self.token()
        if token is None:
            return Answer(None, {}, "no control token yet")
        url = base_url.rstrip("/") + DRAFT_PATH
        headers = {"Authorization": f"Bearer {token}"}
        # a swap reads and checks the whole checkpoint on every rank: much longer than a step-table push
        timeout = aiohttp.ClientTimeout(total=self.timeout_s if source is None else max(self.timeout_s, 120.0))
        try:
            if source is None:
                req = self.session.get(url, headers=headers, timeout=timeout)
            else:
                req = self.session.post(url, json={"source": source}, headers=headers, timeout=timeout)
            async with req as resp:
                raw = (await resp.content.read(MAX_ANSWER_BYTES)).decode("utf-8", "replace")
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                return Answer(resp.status, body if isinstance(body, dict) else {}, raw[:300])
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return Answer(None, {}, f"{type(exc).__name__}: {exc}")

    async def get(self, base_url: str) -> Answer:
        return await self.call(base_url)

    async def post(self, base_url: str, source: str) -> Answer:
        return await self.call(base_url, source)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def settings(sdd) -> DraftRollout:
    return sdd.spec.draft.rollout or DraftRollout()


def _ref(draft: dict) -> dict:
    """A draft reference as status.draft holds it: a digest not yet known is left out (the schema types it string,
    and the API server refuses a null there)."""
    return {k: v for k, v in draft.items() if v is not None}


@dataclass
class Canary:
    candidate: str  # spec form
    path: str  # in the pods
    old: str
    old_path: str
    pod: str
    gate: CanaryGate
    single: bool  # one replica: it alternates between the drafts
    loaded: bool = True  # the canary pod serves the candidate now
    digest: str | None = None
    restarts: int = 0
    prev: dict[str, PodSnapshot] = field(default_factory=dict)


class DraftRollouts:
    """One object's draft rollout; ``step`` runs once per tuning interval.

    ``write(draft_status)`` applies status.draft; ``event(type, reason, message)`` posts an Event;
    ``changed()`` is awaited when the reconciler must run (the DraftRollout condition or the rendered draft
    changed)."""

    def __init__(
        self,
        state: ObjectState,
        api: Any,
        write: Callable[[dict], Awaitable[None]],
        event: Callable[[str, str, str], None],
        changed: Callable[[], Awaitable[None]],
    ):
        self.state, self.api, self._write, self.event, self.changed = state, api, write, event, changed
        self.canary: Canary | None = None

    # ------------------------------------------------------------------ status
    async def _set(
        self,
        current: dict,
        phase: str,
        message: str,
        *,
        serving: dict | None = None,
        candidate: dict | None | bool = False,
        reason: str | None = None,
        warning: bool = False,
    ) -> None:
        out = {k: v for k, v in current.items() if k in ("serving", "candidate", "history")}
        if serving is not None:
            out["serving"] = _ref(serving)
        if candidate is not False:
            if isinstance(candidate, dict):
                out["candidate"] = _ref(candidate)
            else:
                out.pop("candidate", None)
        out["phase"], out["message"] = phase, message[:1024]
        entry = {
            "time": _now(),
            "phase": phase,
            "source": (out.get("candidate") or out.get("serving") or {}).get("source", ""),
            "message": message[:512],
        }
        phase_changed = current.get("phase") != phase or current.get("message") != out["message"]
        if phase_changed:
            out["history"] = [*(current.get("history") or []), entry][-HISTORY_LIMIT:]
        if out == {k: v for k, v in current.items() if k != "adaptation"}:  # adaptation: tuning/adaptation.py's
            return
        rendered_before = (current.get("serving") or {}).get("source")
        self.state.draft_status = out
        await self._write(out)
        if phase_changed and reason:
            self.event("Warning" if warning else "Normal", reason, message)
        cond = (
            {"type": CONDITION, "status": "False", "reason": "DraftRefused", "message": message[:1024]}
            if phase == "Failed"
            else None
        )
        if cond != self.state.draft_condition or (out.get("serving") or {}).get("source") != rendered_before:
            self.state.draft_condition = cond
            await self.changed()

    # ------------------------------------------------------------------ one interval
    async def step(self, sdd, body: dict, targets: list[Target], snaps: list[PodSnapshot]) -> None:
        current = dict(newest_status(body, self.state)["draft"] or {})
        spec = sdd.spec
        wanted = draft_source.wanted_model(sdd, {"draft": current})  # spec.draft.model or an adapted draft
        controls = {t.pod: t.control_url for t in targets if t.control_url}
        by_pod = {s.pod: s for s in snaps}
        serving = (current.get("serving") or {}).get("source")
        if not serving:
            digest = await self._digest(controls, None if wanted.startswith("hf://") else draft_source.pod_path(wanted))
            await self._set(current, "Serving", f"serving {wanted}", serving={"source": wanted, "digest": digest})
            return
        c = self.canary
        if c is not None and c.candidate != wanted:
            await self._abandon(
                current, c, controls, f"superseded by {wanted}" if wanted != serving else "spec.draft.model reverted"
            )
            current = dict(self.state.draft_status or current)
            if wanted == serving:
                return
        if wanted == serving:
            if current.get("phase") in ("Canary", "Promoting"):  # an operator restart mid-canary: put the pods back
                await self._restore(current, controls, serving, "the canary was interrupted (operator restart)")
            return
        problem = draft_source.in_place_problem(spec, serving, wanted)
        if problem is not None or spec.replicas == 0:
            why = problem or "no replica runs"
            await self._set(
                current,
                "Serving",
                f"{wanted} rolled out by restarting the pods: {why}",
                serving={"source": wanted, "digest": None},
                candidate=None,
                reason="DraftRolledOutByRestart",
            )
            return
        cand = current.get("candidate") or {}
        if self.canary is None and cand.get("source") == wanted and current.get("phase") in ("RolledBack", "Failed"):
            return  # decided: a new spec.draft.model starts the next one
        if self.canary is None:
            await self._start(current, sdd, serving, wanted, controls, by_pod)
            return
        await self._measure(current, sdd, controls, by_pod)

    async def _digest(self, controls: dict[str, str], expect: str | None) -> str | None:
        for url in controls.values():
            a = await self.api.get(url)
            if a.ok and (expect is None or a.source == expect):
                return a.digest
        return None

    async def _start(
        self, current: dict, sdd, serving: str, wanted: str, controls: dict, by_pod: dict, restarts: int = 0
    ) -> None:
        if not controls:
            await self._set(
                current, current.get("phase") or "Serving", f"waiting for a ready replica to canary {wanted}"
            )
            return
        path, old_path = draft_source.pod_path(wanted), draft_source.pod_path(serving)
        idents = {pod: await self.api.get(url) for pod, url in controls.items()}
        if all(a.ok and a.source == path for a in idents.values()):
            digest = next(iter(idents.values())).digest
            await self._set(
                current,
                "Serving",
                f"every replica already serves {wanted}",
                serving={"source": wanted, "digest": digest},
                candidate=None,
                reason="DraftPromoted",
            )
            return
        pod = sorted(controls)[0]
        a = await self.api.post(controls[pod], path)
        if not a.ok:
            if a.refused:
                await self._fail(current, wanted, pod, a)
            else:  # unreachable or busy: the next interval tries again
                log.info("draft canary of %s on %s not started: %s", wanted, pod, a.why())
                await self._set(
                    current, current.get("phase") or "Serving", f"canary of {wanted} not started yet: {pod}: {a.why()}"
                )
            return
        st = settings(sdd)
        self.canary = Canary(
            wanted,
            path,
            serving,
            old_path,
            pod,
            CanaryGate(st.intervals, st.minAcceptRatio),
            single=len(controls) == 1,
            digest=a.digest,
            restarts=restarts,
            prev=dict(by_pod),
        )
        await self._set(
            current,
            "Canary",
            f"{wanted} loaded on {pod}; comparing acceptance with {serving} over {st.intervals} intervals"
            + (" (one replica: alternating drafts)" if len(controls) == 1 else ""),
            candidate={"source": wanted, "digest": a.digest},
            reason="DraftCanaryStarted",
        )

    async def _measure(self, current: dict, sdd, controls: dict, by_pod: dict) -> None:
        c = self.canary
        assert c is not None
        expect = c.path if c.loaded else c.old_path
        ident = await self.api.get(controls[c.pod]) if c.pod in controls else None
        if ident is None or (ident.ok and ident.source != expect):
            served = "gone" if ident is None else f"serves {ident.source}"
            self.canary = None
            why = f"canary pod {c.pod} {served}, expected {expect} (it restarted)"
            if c.restarts + 1 >= MAX_RESTARTS:
                await self._restore(current, controls, c.old, why)
                await self._set(
                    dict(self.state.draft_status or current),
                    "Failed",
                    f"{why}; gave up after {MAX_RESTARTS} canaries",
                    reason="DraftCanaryFailed",
                    warning=True,
                )
                return
            self.event("Warning", "DraftCanaryRestarted", why)
            await self._start(current, sdd, c.old, c.candidate, controls, by_pod, restarts=c.restarts + 1)
            return
        if not ident.ok:
            return  # unreachable this interval: measure on the next
        new_d = delta(c.prev.get(c.pod), by_pod.get(c.pod))
        if c.single:
            if c.loaded:
                c.gate.add(new=new_d)
            else:
                c.gate.add(old=new_d)
        else:
            old_d = None
            for pod in controls:
                if pod == c.pod:
                    continue
                d = delta(c.prev.get(pod), by_pod.get(pod))
                if d is not None:
                    old_d = d if old_d is None else old_d.plus(d)
            c.gate.add(new=new_d, old=old_d)
        c.prev = dict(by_pod)
        verdict = c.gate.decide()
        if verdict.action == "wait":
            if c.single:  # the other draft for the next interval
                a = await self.api.post(controls[c.pod], c.old_path if c.loaded else c.path)
                if a.ok:
                    c.loaded = not c.loaded
                elif a.refused:
                    self.canary = None
                    await self._restore(current, controls, c.old, "")
                    await self._fail(dict(self.state.draft_status or current), c.candidate, c.pod, a)
                    return
            await self._set(current, "Canary", f"{c.candidate} on {c.pod}: {verdict.message}")
            return
        if verdict.action == "rollback":
            self.canary = None
            await self._restore(current, controls, c.old, "")
            await self._set(
                dict(self.state.draft_status or current),
                "RolledBack",
                f"{c.candidate} rolled back: {verdict.message}",
                reason="DraftRolledBack",
                warning=True,
            )
            return
        await self._promote(current, c, controls, verdict.message)

    async def _promote(self, current: dict, c: Canary, controls: dict, why: str) -> None:
        await self._set(current, "Promoting", f"{c.candidate} promoted on {c.pod}: {why}", reason="DraftPromoting")
        current = dict(self.state.draft_status or current)
        refused = []
        for pod, url in sorted(controls.items()):
            a = await self.api.post(url, c.path)
            if not a.ok:
                refused.append((pod, a))
        self.canary = None
        if refused:
            pod, a = refused[0]
            await self._restore(current, controls, c.old, "")
            await self._fail(dict(self.state.draft_status or current), c.candidate, pod, a)
            return
        await self._set(
            current,
            "Serving",
            f"{c.candidate} serves on every replica: {why}",
            serving={"source": c.candidate, "digest": c.digest},
            candidate=None,
            reason="DraftPromoted",
        )

    async def _restore(self, current: dict, controls: dict, old: str, why: str) -> None:
        """POST the served draft back to every pod that serves another one."""
        path = draft_source.pod_path(old)
        for url in controls.values():
            a = await self.api.get(url)
            if a.ok and a.source != path:
                await self.api.post(url, path)
        if why:
            await self._set(current, "RolledBack", f"{why}; {old} serves on", reason="DraftRolledBack", warning=True)

    async def _abandon(self, current: dict, c: Canary, controls: dict, why: str) -> None:
        self.canary = None
        await self._restore(current, controls, c.old, "")
        await self._set(current, "RolledBack", f"{c.candidate} rolled back: {why}", reason="DraftRolledBack")

    async def _fail(self, current: dict, wanted: str, pod: str, a: Any) -> None:
        await self._set(
            current,
            "Failed",
            f"{pod} refused {wanted}: {a.why()}; the old draft serves on",
            candidate={"source": wanted, "digest": None},
            reason="DraftRefused",
            warning=True,
        )


def patch(name: str, namespace: str, draft: dict) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": {"draft": draft},
    }


async def write(client, name: str, namespace: str, draft: dict) -> dict:
    """Apply status.draft (force: the field is this manager's alone)."""
    path = resource_path(API_VERSION, PLURAL, namespace, name, "status")
    return await client.request(
        "PATCH",
        path,
        query=[("fieldManager", DRAFT_MANAGER), ("force", "true")],
        body=patch(name, namespace, draft),
        content_type="application/apply-patch+yaml",
        verb="apply",
    )
