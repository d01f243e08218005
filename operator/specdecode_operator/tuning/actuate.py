"""Live mode's actuation for one object: put the tuner's step table on the pods that do not run it yet.

Why only those pods: a push per pod per interval would cost every pod a table swap and the operator a request per
pod for nothing; a pod whose published step counts already match the table (its ``specdecode_num_steps``) is left
alone, and after a change every pod gets it. The bearer token is a short-lived token of the operator's
ServiceAccount bound to this deployment's audience (``control_identity``), or in Secret mode the operator's
control-token Secret (cached; a 401 re-reads it once: the Secret may have been re-created). Failures become one Warning Event per
distinct message, never an exception: one unreachable pod must never stop the others being tuned.
"""

from __future__ import annotations

from typing import Callable

import aiohttp

from .. import control_identity, control_token
from ..kube_client import ApiError
from ..render import names
from ..tuner.tuner import Decision, Tuner
from .pod_client import push_all
from .pods import Target


class TablePusher:
    """``warn(reason, message)`` posts a Warning Event once per distinct message; ``clear(reason)`` re-arms it."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        client,
        config,
        metrics,
        log,
        warn: Callable[[str, str], None],
        clear: Callable[[str], None],
    ):
        self.session, self.client, self.config, self.metrics, self.log = session, client, config, metrics, log
        self.warn, self.clear = warn, clear
        self.token: str | None = None
        self.identity = control_identity.identity(client, config)

    async def push(
        self,
        ns: str,
        name: str,
        tuner: Tuner,
        d: Decision,
        targets: list[Target],
        snaps: list,
        uid: str | None = None,
    ) -> None:
        """Until the tuner's first change the pods run the rendered step count, which is its starting table; after
        an operator restart that keeps the table the pods already run until the tuner decides again."""
        if tuner.changes == 0 and not d.changed:
            return
        stale = stale_targets(tuner, d, targets, snaps)
        if not stale:
            return
        token = await self._token(ns, name, uid)
        if token is None:
            if self.identity is not None:
                self.warn("StepTablePushFailed", "no step-control token from the API server (TokenRequest) yet")
            else:
                self.warn("StepTablePushFailed", f"no control token in Secret {names.control_secret(name)} yet")
            return
        body = d.step_table_body()
        urls = {t.pod: t.control_url for t in stale if t.control_url}
        timeout = self.config.scrape_timeout
        results = await push_all(self.session, urls, body, token, timeout)
        if any(r.status == 401 for r in results):
            self.token = None
            if self.identity is not None:
                self.identity.forget(ns, name, uid)
            token = await self._token(ns, name, uid)
            retry = {r.pod: urls[r.pod] for r in results if r.status == 401}
            if token and retry:
                again = {r.pod: r for r in await push_all(self.session, retry, body, token, timeout)}
                results = [again.get(r.pod, r) for r in results]
        failed = []
        for r in results:
            self.metrics.tuner_pushes.labels("ok" if r.ok else "unauthorized" if r.status == 401 else "error").inc()
            if not r.ok:
                failed.append(f"{r.pod}: {r.status or ''} {r.detail}".strip())
        if failed:
            self.warn("StepTablePushFailed", "step table not applied on " + "; ".join(sorted(failed)))
        else:
            self.clear("StepTablePushFailed")

    async def token_for(self, ns: str, name: str, uid: str | None) -> str | None:
        """The control token for this deployment's pods (also the draft endpoint's, tuning/draft_rollout.py)."""
        return await self._token(ns, name, uid)

    async def _token(self, ns: str, name: str, uid: str | None) -> str | None:
        if self.identity is not None:  # a token of the operator's ServiceAccount for this deployment only
            return await self.identity.token_for(ns, name, uid)
        if self.token is None:
            try:
                obj = await self.client.get("v1", "secrets", ns, names.control_secret(name))
            except ApiError as e:
                self.log.warning("tuner %s/%s: control token not read: %s", ns, name, e)
                return None
            self.token = control_token.token_of(obj)
        return self.token


def stale_targets(tuner: Tuner, d: Decision, targets: list[Target], snaps: list) -> list[Target]:
    """Pods with a control port whose published step counts differ from the table (all of them after a change,
    and pods not scraped cleanly this interval)."""
    want = dict(d.table)
    by_pod = {s.pod: s for s in snaps}
    lo_of = tuner.labels
    stale = []
    for t in targets:
        snap = by_pod.get(t.pod)
        if t.control_url is None:
            continue
        if d.changed or snap is None or not snap.ok:
            stale.append(t)
        elif any(
            b.num_steps is not None and label in lo_of and b.num_steps != want.get(lo_of[label])
            for label, b in snap.buckets.items()
        ):
            stale.append(t)
    return stale
