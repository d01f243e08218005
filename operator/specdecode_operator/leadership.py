"""One active replica: leader election on a ``coordination.k8s.io/v1`` Lease with the kubernetes client's
``leaderelection`` package, plus the two guarantees that package leaves to its caller.

How it is safe when the leader dies or is cut off from the API server:

- **Takeover**: a standby takes the Lease once it has seen the same record for ``lease_duration`` seconds by its
  own monotonic observation (the package measures from when *it* saw the record change, never from timestamps
  written by another machine's clock), so a SIGKILLed leader is replaced within ``lease_duration + retry_period``.
- **No two leaders**: every Lease call carries a request timeout (the package sets none, so a half-open connection
  to a partitioned API server would hold its renew loop forever), and the leader *fences itself* once
  ``renew_deadline`` seconds have passed since it *sent* its last successful renewal (``LeaderElector.leading``);
  the server wrote that renewal after it was sent, and a standby waits ``lease_duration > renew_deadline`` from
  when it saw the write, so the old leader has stopped before anyone else can start. A watchdog thread enforces
  the deadline even when the package's own loop is blocked.
- **Fast handover on a clean exit**: ``release()`` clears ``holderIdentity``; the package lets a standby take a
  Lease without holder at its next poll.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import Callable

import kubernetes
from kubernetes.client.rest import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("specdecode.leader")


class TimedLeaseLock(LeaseLock):
    """The package's LeaseLock on our own ApiClient, with a timeout on every call; records when the last
    successful write was *sent* (the fence's reference point)."""

    def __init__(
        self, name: str, namespace: str, identity: str, api_client: kubernetes.client.ApiClient, timeout: float
    ) -> None:
        super().__init__(name, namespace, identity)
        self.api_instance = kubernetes.client.CoordinationV1Api(api_client)
        self.timeout = timeout
        self.last_write_sent: float | None = None  # monotonic time at which the last successful write was sent
        self.holder: str | None = None  # holderIdentity as last read
        self.closed = False  # set when the replica stops: the election loop can neither renew nor take over
        self.renewing = False  # our last write succeeded: renewals skip the read (see ``get``)

    def get(self, name, namespace):
        if self.renewing and self.lease_reference is not None:
            # We hold the Lease and our last write succeeded: our copy is current (a write by anyone else makes
            # our next replace fail with 409, which drops this shortcut). One PUT per renewal instead of GET + PUT
            # halves the renewal's exposure to a slow API server.
            return True, self.get_lock_object(self.lease_reference)
        started = time.monotonic()
        try:
            lease = self.api_instance.read_namespaced_lease(name, namespace, _request_timeout=self.timeout)
        except ApiException as e:
            return False, e
        except Exception as e:  # timeouts and refused connections: not a 404, so the package retries later
            log.warning("lease %s/%s not read after %.1f s: %s", namespace, name, time.monotonic() - started, e)
            return False, ApiException(status=0, reason=f"{type(e).__name__}: {e}")
        if time.monotonic() - started > self.timeout / 2:
            log.warning("lease %s/%s read took %.1f s", namespace, name, time.monotonic() - started)
        self.lease_reference = lease
        self.holder = lease.spec.holder_identity if lease.spec else None
        return True, self.get_lock_object(lease)

    def create(self, name, namespace, election_record):
        if self.closed:
            return False
        body = kubernetes.client.V1Lease(metadata={"name": name}, spec=self.get_lease_spec(election_record))
        sent = time.monotonic()
        try:
            self.lease_reference = self.api_instance.create_namespaced_lease(
                namespace, body, _request_timeout=self.timeout
            )
        except Exception as e:  # ApiException (409: someone else created it first) or a timeout
            log.info("lease %s/%s not created: %s", namespace, name, e)
            return False
        self.last_write_sent = sent
        self.renewing = True
        return True

    def update(self, name, namespace, updated_record):
        if self.lease_reference is None or self.closed:
            return False
        sent = time.monotonic()
        try:
            self.lease_reference.spec = self.get_lease_spec(updated_record, self.lease_reference.spec)
            # replace carries the resourceVersion we read: a concurrent writer makes this fail with 409
            self.lease_reference = self.api_instance.replace_namespaced_lease(
                name=name, namespace=namespace, body=self.lease_reference, _request_timeout=self.timeout
            )
        except Exception as e:
            log.warning("lease %s/%s not updated after %.1f s: %s", namespace, name, time.monotonic() - sent, e)
            self.renewing = False  # read it again before the next attempt
            self.lease_reference = None
            return False
        self.last_write_sent = sent
        self.renewing = updated_record.holder_identity == self.identity
        return True

    def release(self) -> bool:
        """Give the Lease up if we still hold it: no holder, so a standby takes it at its next poll."""
        self.renewing = False
        ok, _ = self.get(self.name, self.namespace)
        if not ok or self.holder != self.identity:
            return False
        spec = self.lease_reference.spec
        spec.holder_identity = None
        spec.lease_duration_seconds = 1
        spec.renew_time = datetime.datetime.now(datetime.UTC)
        try:
            self.api_instance.replace_namespaced_lease(
                name=self.name, namespace=self.namespace, body=self.lease_reference, _request_timeout=self.timeout
            )
        except Exception as e:
            log.info("lease %s/%s not released: %s", self.namespace, self.name, e)
            return False
        return True


class LeaderElector:
    """Runs the package's election loop in a thread. ``on_started`` is called once this replica leads,
    ``on_lost`` at most once when it stops leading (renewal failed, deadline passed, or another holder)."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 8.0,
        renew_deadline: float = 5.0,
        retry_period: float = 1.0,
        request_timeout: float | None = None,
        on_started: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        if not (float(lease_duration).is_integer() and lease_duration > renew_deadline > 1.2 * retry_period >= 1.2):
            raise ValueError(
                "leader election needs a whole number of seconds lease_duration > renew_deadline > "
                f"1.2 x retry_period >= 1.2 s, got {lease_duration}, {renew_deadline}, {retry_period}"
            )
        lease_duration = int(lease_duration)  # Lease.spec.leaseDurationSeconds is an integer
        self.identity = identity
        self.renew_deadline = renew_deadline
        timeout = request_timeout if request_timeout is not None else max(1.0, retry_period)
        self.lock = TimedLeaseLock(name, namespace, identity, api_client, timeout)
        self._on_started, self._on_lost = on_started, on_lost
        self._started = threading.Event()
        self._lost = threading.Event()
        self._stopping = threading.Event()
        self.config = electionconfig.Config(
            self.lock,
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            onstarted_leading=self._started_leading,
            onstopped_leading=self._stopped_leading,
        )
        self._threads: list[threading.Thread] = []
        self._released = False

    # ------------------------------------------------------------------ state
    @property
    def leading(self) -> bool:
        """True only while this replica holds the Lease and its last renewal was sent within renew_deadline."""
        sent = self.lock.last_write_sent
        return (
            self._started.is_set()
            and not self._lost.is_set()
            and sent is not None
            and time.monotonic() - sent < self.renew_deadline
        )

    def alive(self) -> bool:
        """The election loop still runs (a standby whose loop died would wait forever: its probe must fail)."""
        return bool(self._threads) and self._threads[0].is_alive()

    def wait_started(self, timeout: float | None = None) -> bool:
        return self._started.wait(timeout)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    # ------------------------------------------------------------------ callbacks
    def _started_leading(self) -> None:
        log.info("%s leads (Lease %s/%s)", self.identity, self.lock.namespace, self.lock.name)
        self._started.set()
        self._on_started()

    def _stopped_leading(self) -> None:
        self.lock.closed = True  # a renewal still in the election loop's hands must not re-take the Lease
        if self._lost.is_set():
            return
        self._lost.set()
        if not self._stopping.is_set():
            log.error("%s lost the Lease %s/%s: it stops acting", self.identity, self.lock.namespace, self.lock.name)
        self._on_lost()

    # ------------------------------------------------------------------ threads
    def start(self) -> LeaderElector:
        election = leaderelection.LeaderElection(self.config)
        for target, name in ((election.run, "leader-election"), (self._watchdog, "leader-fence")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _watchdog(self) -> None:
        """Enforce the renew deadline even if the election loop is stuck in a call."""
        while not self._lost.is_set() and not self._stopping.is_set():
            if self._started.is_set() and not self.leading:
                self._stopped_leading()
                return
            time.sleep(min(0.25, self.renew_deadline / 10))

    def stop(self, release: bool = True) -> None:
        """Stop acting; with ``release`` hand the Lease over at once instead of letting it expire."""
        was_leading = self.leading
        self._stopping.set()
        self.lock.closed = True
        self._lost.set()
        if release and was_leading and not self._released:
            self._released = True
            self.lock.release()
