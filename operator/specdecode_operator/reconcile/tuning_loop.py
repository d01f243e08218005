"""The tuner's per-object loop: every ``spec.speculative.autotune.intervalSeconds`` discover the runtime pods,
read their counters, step the pure ``Tuner`` and act on its decision.

Why a kopf daemon per object (registered in handlers.py): the loop has state that must survive between intervals
(the estimator's windows, the policy's cooldowns, which pods already run the table), its period comes from the
object, and kopf starts it with the object, stops it on deletion or operator shutdown (``stopped``), and never
runs two for one object. Everything an interval does is caught: bad metrics, unreachable pods, API errors end as
a MetricsAvailable condition, an Event or a log line, never as a crash or a kopf retry storm.

Per interval:
1. pods: the EndpointSlices of the headless Service (ready endpoints; ports ``http`` and ``control``), listed
   only while status.readyReplicas > 0, so objects without running pods cost no API call;
2. counters: GET ``http://IP:http/metrics`` per pod, or the same series from ``--prometheus-url``;
3. ``Tuner.step(now, snapshots)``;
4. act by mode - Live: PUT the step table to every pod whose published table differs (after a change, and for
   pods that restarted or joined since), bearer token from the operator's Secret; Rollout: put the new step count
   into memo[tuned_steps] and reconcile, which re-renders the ConfigMap and pod template (a rolling update);
   Off (and any mode while ``specdecode.io/reconcile: paused``): report only, nothing pushed or rolled;
5. report: status.speculative/history (field manager ``specdecode-tuner``), MetricsAvailable through the
   reconciler, Events, and the operator's ``specdecode_tuner_*`` metrics.

Nothing here writes ``spec``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import aiohttp
import kopf
import yaml
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.goodput import CycleCost
from specdecode_runtime.metrics import NCCL_LATENCY
from specdecode_runtime.scenario import Scenario, cost_for_draft_tp, parse_scenario

from ..api.validate import InvalidSpec, parse, validate_object
from ..render import names
from ..status import tuner_status
from ..tuner import actuate, planner, scrape
from ..tuner.tuner import Decision, Tuner, TunerConfig
from . import secret, tuning
from .apply import ApiError

log = logging.getLogger("specdecode.tuner")

PROFILE_ANNOTATION = "specdecode.io/tuner-profile"  # name of a ConfigMap in the object's namespace
PROFILE_KEYS = ("scenario.yaml", "profile.yaml")
QUIET_REASONS = {"NoPods", "WarmingUp"}  # normal while pods start: no Warning Event
ADVISORY_REASONS = {"StepsRecommended", "RolloutSkipped"}  # repeat every interval: rate-limited
ADVISORY_EVERY_INTERVALS = 10
STATUS_REFRESH_S = 30.0  # tuner-clock seconds between writes that only refresh measurements


@dataclass
class Target:
    pod: str
    ip: str
    metrics_url: str | None
    control_url: str | None


@dataclass
class Profile:
    scenario: Scenario | None = None
    cost: CycleCost | None = None
    problem: str | None = None


@dataclass
class LoopState:
    fingerprint: Any = None
    tuner: Tuner | None = None
    mode: str = "Off"
    profile: Profile = field(default_factory=Profile)
    token: str | None = None
    speculative: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    written: tuple | None = None  # (significant part, tuner time) of the last status write
    advisory_at: dict = field(default_factory=dict)
    warned: dict = field(default_factory=dict)
    decisions: int = 0


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def targets_from_slices(slices: list[dict]) -> list[Target]:
    """Ready endpoints of the headless Service; an endpoint without a ``http`` port cannot be scraped."""
    out: dict[str, Target] = {}
    for sl in slices:
        ports = {p.get("name"): p.get("port") for p in sl.get("ports") or [] if p.get("port")}
        for ep in sl.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            for ip in (ep.get("addresses") or [])[:1]:
                pod = (ep.get("targetRef") or {}).get("name") or ip
                http, control = ports.get("http"), ports.get("control")
                out[pod] = Target(pod, ip, f"http://{_host(ip)}:{http}/metrics" if http else None,
                                  f"http://{_host(ip)}:{control}" if control else None)
    return [out[k] for k in sorted(out)]


def nccl_from_text(text: str) -> dict[str, float]:
    """``specdecode_nccl_latency_seconds{op,bytes}`` (the runtime's startup preflight) as microseconds by
    ``op/bytes``; malformed text gives nothing (scrape.parse_metrics reports it)."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == NCCL_LATENCY and s.value == s.value and s.value >= 0:
                    out[f"{s.labels.get('op', '?')}/{s.labels.get('bytes', '?')}"] = round(s.value * 1e6, 2)
    except Exception:  # garbage from a pod is reported by parse_metrics, not here
        return {}
    return out


def _mean_nccl(per_pod: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for d in per_pod for k in d}
    return {k: round(sum(d[k] for d in per_pod if k in d) / sum(1 for d in per_pod if k in d), 2) for k in sorted(keys)}


class TuningLoop:
    """One object's loop; ``tick`` runs one interval and returns the wall seconds until the next."""

    def __init__(self, reconciler, body, memo, reconcile: Callable[[], Awaitable[None]],
                 session: aiohttp.ClientSession, clock: Callable[[], float] | None = None):
        self.reconciler = reconciler
        self.config = reconciler.config
        self.metrics = reconciler.metrics
        self.body = body
        self.memo = memo
        self.reconcile = reconcile
        self.session = session
        self.scale = self.config.tune_interval_scale
        self._t0_wall, self._t0_mono = time.time(), time.monotonic()
        self.clock = clock or self._clock
        self.state = LoopState()
        self._validated: tuple | None = None

    def _clock(self) -> float:
        """The tuner's clock: wall time, running 1/tune_interval_scale as fast (scale 1 on a real cluster)."""
        return self._t0_wall + (time.monotonic() - self._t0_mono) / self.scale

    # ------------------------------------------------------------------ one interval
    async def tick(self) -> float:
        interval = 30.0
        try:
            sdd = self._parse()
            if sdd is None:
                return interval * self.scale  # invalid spec: the reconciler reports it; nothing to tune
            interval = float(sdd.spec.speculative.autotune.intervalSeconds)
            await self._interval(sdd, interval)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must cost one interval, not the loop
            log.exception("tuner %s: interval failed", self._ref())
        return interval * self.scale

    def _ref(self) -> str:
        md = self.body["metadata"]
        return f"{md.get('namespace')}/{md.get('name')}"

    def _parse(self):
        gen = self.body["metadata"].get("generation")
        if self._validated and self._validated[0] == gen and gen is not None:
            return self._validated[1]
        obj = copy.deepcopy({k: self.body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in self.body})
        sdd = None
        if not validate_object(obj):
            try:
                sdd = parse(obj)
            except InvalidSpec:
                sdd = None
        self._validated = (gen, sdd)
        return sdd

    async def _interval(self, sdd, interval: float) -> None:
        md = self.body["metadata"]
        ns, name = md["namespace"], md["name"]
        paused = (md.get("annotations") or {}).get(names.PAUSE_ANNOTATION) == "paused"
        await self._ensure_tuner(sdd, paused)
        st = self.state
        now = self.clock()
        targets: list[Target] | None = []
        if (self.body.get("status") or {}).get("readyReplicas"):  # no ready replica: no endpoint, no LIST
            try:
                targets = await self._targets(ns, name)
            except ApiError as e:
                log.warning("tuner %s: EndpointSlices not listed: %s", self._ref(), e)
                targets = None
        if targets is None:
            snaps, nccl = [], {}
        else:
            snaps, nccl = await self._scrape(ns, targets, now)
        d = st.tuner.step(now, snaps)
        acting = not paused
        if st.mode == "Live" and acting:
            await self._push(ns, name, d, targets or [], snaps)
        restarted = st.mode == "Rollout" and acting and d.restart
        if restarted:
            self.memo[tuning.TUNED_STEPS] = d.rollout_steps
        self._count(d)
        self._events(d, now, interval)
        condition_changed = self._set_condition(d, listed=targets is not None)
        await self._write_status(ns, name, sdd, d, nccl, now)
        if restarted or condition_changed:
            await self.reconcile()  # Rollout: re-render now; MetricsAvailable: reported by the reconciler

    # ------------------------------------------------------------------ tuner lifecycle
    async def _ensure_tuner(self, sdd, paused: bool) -> None:
        """(Re)build the tuner when what it was built from changes: autotune settings, the starting step count,
        the profile annotation, or pause (a paused object is tuned in report-only mode). A rebuild forgets the
        estimator's windows; Rollout restarts from spec.speculative.numSteps unless the loop is resuming."""
        spec = sdd.spec
        at = spec.speculative.autotune
        profile_ref = (self.body["metadata"].get("annotations") or {}).get(PROFILE_ANNOTATION)
        mode = "Off" if paused else at.mode
        fingerprint = (at.model_dump_json(), spec.speculative.numSteps, spec.draft.tensorParallelSize, profile_ref,
                       mode)
        st = self.state
        if st.fingerprint == fingerprint and st.tuner is not None:
            return
        first = st.tuner is None
        st.profile = await self._profile(profile_ref, sdd)
        restart_s = st.profile.scenario.restart_seconds if st.profile.scenario else self.config.tune_restart_seconds
        initial = spec.speculative.numSteps
        if at.mode == "Rollout":
            resumed = tuning.resumed_steps(sdd, self.body) if first else None
            if resumed is not None:
                initial = resumed
            self.memo[tuning.TUNED_STEPS] = resumed
        else:
            self.memo[tuning.TUNED_STEPS] = None
        cfg = TunerConfig.from_autotune(at, initial, restart_s=restart_s)
        cfg.mode = mode
        st.tuner = Tuner(cfg, profile=st.profile.cost)
        st.mode = mode
        st.fingerprint = fingerprint
        if first:
            status = self.body.get("status") or {}
            st.history = [dict(h) for h in status.get("history") or []][-tuner_status.HISTORY_LIMIT:]
            st.speculative = dict(status.get("speculative") or {})
        if st.profile.problem:
            self._warn_once("InvalidTunerProfile", st.profile.problem)
        log.info("tuner %s: mode %s, %s steps, interval %ss%s", self._ref(), mode, initial, at.intervalSeconds,
                 f", profile {profile_ref}" if st.profile.cost else "")

    async def _profile(self, ref: str | None, sdd) -> Profile:
        """A calibrated profile: a scenario document (cost block, optional draftTp and restartSeconds) in a
        ConfigMap named by the annotation. Without one the tuner uses measured phase costs only."""
        if not ref:
            return Profile()
        ns = self.body["metadata"]["namespace"]
        try:
            cm = await self.reconciler.client.get("v1", "configmaps", ns, ref)
        except ApiError as e:
            return Profile(problem=f"profile ConfigMap {ref}: {e}")
        if cm is None:
            return Profile(problem=f"profile ConfigMap {ref} not found")
        data = cm.get("data") or {}
        text = next((data[k] for k in PROFILE_KEYS if k in data), None)
        if text is None:
            return Profile(problem=f"profile ConfigMap {ref} has none of the keys {', '.join(PROFILE_KEYS)}")
        try:
            sc = parse_scenario(yaml.safe_load(text), source=f"ConfigMap {ref}")
        except Exception as e:  # ScenarioError, YAML errors: the profile is input, never a crash
            return Profile(problem=f"profile ConfigMap {ref}: {e}"[:1000])
        cost = sc.cycle_cost()
        if sc.draft_tp is not None:
            try:
                cost = cost_for_draft_tp(sc, sdd.spec.draft.tensorParallelSize)
            except ValueError as e:
                return Profile(scenario=sc, cost=cost, problem=f"profile ConfigMap {ref}: {e}; using its cost block")
        return Profile(scenario=sc, cost=cost)

    # ------------------------------------------------------------------ discovery and scraping
    async def _targets(self, ns: str, name: str) -> list[Target]:
        """One LIST per interval (label selector on the service name): no watch on every EndpointSlice of the
        cluster, and the answer is as fresh as the interval."""
        path = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
        data = await self.reconciler.client.request(
            "GET", path, query=[("labelSelector", f"kubernetes.io/service-name={names.headless_service(name)}")],
            verb="list")
        return targets_from_slices((data or {}).get("items") or [])

    async def _scrape(self, ns: str, targets: list[Target], now: float) -> tuple[list, dict]:
        timeout = self.config.scrape_timeout
        if not targets:
            return [], {}
        if self.config.prometheus_url:
            pods = [t.pod for t in targets]
            snaps = await actuate.query_prometheus(self.session, self.config.prometheus_url, ns, pods, now,
                                                   timeout_s=timeout)
            return snaps, await self._prometheus_nccl(ns, pods, timeout)

        async def one(t: Target):
            if t.metrics_url is None:
                return scrape.down(t.pod, now, "the endpoint has no port named http"), {}
            try:
                async with self.session.get(t.metrics_url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                    if resp.status != 200:
                        return scrape.down(t.pod, now, f"GET {t.metrics_url} returned HTTP {resp.status}"), {}
                    text = await resp.text()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, UnicodeDecodeError) as exc:
                return scrape.down(t.pod, now, f"GET {t.metrics_url} failed: {type(exc).__name__}: {exc}"), {}
            return scrape.parse_metrics(text, t.pod, now), nccl_from_text(text)

        results = await asyncio.gather(*(one(t) for t in targets))
        return [r[0] for r in results], _mean_nccl([r[1] for r in results if r[1]])

    async def _prometheus_nccl(self, ns: str, pods: list[str], timeout: float) -> dict[str, float]:
        sel = f'namespace="{ns}",pod=~"{"|".join(pods)}"'
        try:
            async with self.session.get(self.config.prometheus_url.rstrip("/") + "/api/v1/query",
                                        params={"query": f"{NCCL_LATENCY}{{{sel}}}"},
                                        timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                data = await resp.json(content_type=None)
            series = data["data"]["result"]
            per_pod: dict[str, dict[str, float]] = {}
            for s in series:
                labels, value = s["metric"], float(s["value"][1])
                if value == value and value >= 0:
                    per_pod.setdefault(labels.get("pod", ""), {})[
                        f"{labels.get('op', '?')}/{labels.get('bytes', '?')}"] = round(value * 1e6, 2)
            return _mean_nccl(list(per_pod.values()))
        except Exception:  # optional field: absent when Prometheus cannot say
            return {}

    # ------------------------------------------------------------------ actuation (Live)
    async def _push(self, ns: str, name: str, d: Decision, targets: list[Target], snaps: list) -> None:
        """PUT the table to each pod that does not publish it yet. Until the tuner's first change the pods run
        the rendered step count, which is its starting table; after an operator restart that keeps the table the
        pods already run until the tuner decides again."""
        st = self.state
        if st.tuner.changes == 0 and not d.changed:
            return
        want = dict(d.table)
        by_pod = {s.pod: s for s in snaps}
        lo_of = st.tuner.labels
        stale = []
        for t in targets:
            snap = by_pod.get(t.pod)
            if t.control_url is None:
                continue
            if d.changed or snap is None or not snap.ok:
                stale.append(t)
                continue
            if any(b.num_steps is not None and label in lo_of and b.num_steps != want.get(lo_of[label])
                   for label, b in snap.buckets.items()):
                stale.append(t)
        if not stale:
            return
        token = await self._token(ns, name)
        if token is None:
            self._warn_once("StepTablePushFailed", f"no control token in Secret {names.control_secret(name)} yet")
            return
        body = d.step_table_body()
        urls = {t.pod: t.control_url for t in stale}
        results = await actuate.push_all(self.session, urls, body, token, self.config.scrape_timeout)
        if any(r.status == 401 for r in results):  # the Secret may have been re-created: read it again, once
            st.token = None
            token = await self._token(ns, name)
            retry = {r.pod: urls[r.pod] for r in results if r.status == 401}
            if token and retry:
                again = {r.pod: r for r in await actuate.push_all(self.session, retry, body, token,
                                                                   self.config.scrape_timeout)}
                results = [again.get(r.pod, r) for r in results]
        failed = []
        for r in results:
            result = "ok" if r.ok else "unauthorized" if r.status == 401 else "error"
            self.metrics.tuner_pushes.labels(result).inc()
            if not r.ok:
                failed.append(f"{r.pod}: {r.status or ''} {r.detail}".strip())
        if failed:
            self._warn_once("StepTablePushFailed", "step table not applied on " + "; ".join(sorted(failed)))
        else:
            self.state.warned.pop("StepTablePushFailed", None)

    async def _token(self, ns: str, name: str) -> str | None:
        if self.state.token is None:
            try:
                obj = await self.reconciler.client.get("v1", "secrets", ns, names.control_secret(name))
            except ApiError as e:
                log.warning("tuner %s: control token not read: %s", self._ref(), e)
                return None
            self.state.token = secret.token_of(obj)
        return self.state.token

    # ------------------------------------------------------------------ reporting
    def _count(self, d: Decision) -> None:
        m = self.metrics
        if not d.buckets:
            m.tuner_decisions.labels("skipped").inc()
            return
        if self.state.mode == "Rollout":  # one global choice; per-bucket choices are only advice there
            m.tuner_decisions.labels("rollout" if d.restart else "hold").inc()
            return
        for rep in d.buckets.values():
            kind = rep.choice.kind
            if self.state.mode == "Off" and rep.choice.changed_from:
                kind = "recommend"
            m.tuner_decisions.labels(kind).inc()
            if kind == "rollback" and self.state.mode == "Live":
                m.tuner_rollbacks.inc()

    def _events(self, d: Decision, now: float, interval: float) -> None:
        st = self.state
        for ev in d.events:
            if ev.type == "Warning" and ev.reason == d.condition.reason:
                if ev.reason not in QUIET_REASONS:
                    self._warn_once(ev.reason, ev.message, key="metrics")
                continue
            if ev.reason in ADVISORY_REASONS:
                if now - st.advisory_at.get(ev.reason, -1e18) < ADVISORY_EVERY_INTERVALS * interval:
                    continue
                st.advisory_at[ev.reason] = now
            reason = ev.reason
            if reason == "StepsChanged" and "(rollback:" in ev.message:
                reason = "StepsRolledBack"
            if reason == "RolloutStarted" and (st.mode != "Rollout" or not d.restart):
                continue
            self._event(ev.type, reason, ev.message)
        if d.condition.status == "True":
            st.warned.pop("metrics", None)

    def _event(self, type_: str, reason: str, message: str) -> None:
        try:
            kopf.event(self.body, type=type_, reason=reason, message=message[:1024])
        except Exception as e:  # the event poster is best effort
            log.debug("tuner %s: event %s not posted: %s", self._ref(), reason, e)

    def _warn_once(self, reason: str, message: str, key: str | None = None) -> None:
        key = key or reason
        if self.state.warned.get(key) != (reason, message):
            self.state.warned[key] = (reason, message)
            self._event("Warning", reason, message)

    def _set_condition(self, d: Decision, listed: bool = True) -> bool:
        c = d.condition
        cond = {"type": c.type, "status": c.status, "reason": c.reason, "message": (c.message or "")[:1024]}
        if not listed:
            cond.update(status="Unknown", reason="EndpointsUnavailable",
                        message="the headless Service's EndpointSlices could not be listed (API error)")
        old = self.memo.get(tuning.CONDITION)
        self.memo[tuning.CONDITION] = cond
        return old != cond

    async def _write_status(self, ns: str, name: str, sdd, d: Decision, nccl: dict, now: float) -> None:
        st = self.state
        fresh = d.status.model_dump(exclude_none=True)
        if "lastTuneTime" in fresh:
            fresh["lastTuneTime"] = _iso(time.time())
        spec = dict(st.speculative)
        spec.update(fresh)  # measurements missing this interval keep their last value
        if nccl:
            spec["ncclLatencyMicroseconds"] = nccl
        rec = self._recommendation(sdd, d)
        if rec is not None:
            spec["recommendation"] = rec
        for entry in d.history:
            h = entry.model_dump(exclude_none=True)
            h["time"] = _iso(time.time())
            if st.mode == "Off" and self._repeats(h):
                continue
            st.history.append(h)
        st.history = st.history[-tuner_status.HISTORY_LIMIT:]
        st.speculative = spec
        significant = json.dumps([{k: v for k, v in spec.items() if k in ("numSteps", "stepTable", "recommendation",
                                                                            "ncclLatencyMicroseconds")},
                                  st.history], sort_keys=True, default=str)
        live = self.body.get("status") or {}
        if live.get("speculative") == spec and (live.get("history") or []) == st.history:
            st.written = (significant, now)  # already there (e.g. after an operator restart): no write
            return
        if st.written and st.written[0] == significant and now - st.written[1] < max(
                STATUS_REFRESH_S, float(sdd.spec.speculative.autotune.intervalSeconds)):
            return
        try:
            await tuner_status.write(self.reconciler.client, name, ns, spec, st.history)
            st.written = (significant, now)
        except ApiError as e:
            log.warning("tuner %s: status not written: %s", self._ref(), e)

    def _repeats(self, h: dict) -> bool:
        """Off mode recommends the same change every interval; history keeps the first of a run."""
        for old in reversed(self.state.history):
            if old.get("bucket") == h.get("bucket"):
                return (old.get("fromSteps"), old.get("toSteps")) == (h.get("fromSteps"), h.get("toSteps"))
        return False

    def _recommendation(self, sdd, d: Decision) -> dict | None:
        """The planner's draft-TP x steps advice, only from a calibrated profile with a draftTp block, fed with
        the acceptance measured in the busiest bucket."""
        sc = self.state.profile.scenario
        if sc is None or sc.draft_tp is None or not d.buckets:
            return None
        busiest = max(d.buckets.values(), key=lambda r: r.samples)
        steps = [k for k in self.state.tuner.config.policy.allowed()]
        try:
            p = planner.plan(sc, steps, target_tp=sdd.spec.target.tensorParallelSize,
                             current_tp=sdd.spec.draft.tensorParallelSize, alphas=busiest.alphas or None)
        except (ValueError, ZeroDivisionError) as e:
            log.debug("tuner %s: no recommendation: %s", self._ref(), e)
            return None
        return p.recommendation.model_dump(exclude_none=True)


async def run(reconciler, body, memo, stopped, reconcile: Callable[[], Awaitable[None]]) -> None:
    """The daemon body: one interval, then sleep until the next or until kopf says stop."""
    async with aiohttp.ClientSession() as session:
        loop = TuningLoop(reconciler, body, memo, reconcile, session)
        memo["tuning_loop"] = loop  # tests and the demo read its state
        while not stopped:
            if reconciler.client is None:  # startup has not built the API client yet
                await stopped.wait(0.1)
                continue
            delay = await loop.tick()
            await stopped.wait(delay)
