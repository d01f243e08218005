"""Everything the operator's handlers share, in one explicit object: configuration, metrics, the API client, the
pods' HTTP session and the reconciler.

Why an object built before kopf starts and filled at kopf's startup: the API client's and the pods' aiohttp
sessions belong to kopf's event loop, so they are made there (``start``) and closed after kopf has stopped the
daemons (``close``); the handlers receive the context when they are registered and need nothing global. Whoever
builds the operator (the process, the test bed, a benchmark) holds the same context and reads its client and
metrics from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp

from .config import OperatorConfig
from .kube_client import KubeClient, kube_configuration
from .metrics import OperatorMetrics
from .reconcile.reconciler import Reconciler
from .tuning import pod_client


@dataclass
class OperatorContext:
    config: OperatorConfig
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    fence: Callable[[], bool] | None = None  # writes are refused unless it returns True (leadership.py)
    client: KubeClient | None = None  # from ``start`` on
    http: aiohttp.ClientSession | None = None  # one for all tuning loops (tuning/pod_client.py), from ``start`` on
    reconciler: Reconciler | None = None  # from ``start`` on
    controller: Any = None  # reconcile/controller.py: the work queue and its workers (made with the registry)
    # Set (from any thread) just before kopf is told to stop. kopf keeps handling the events already queued while
    # it shuts down; the controller reads this flag and queues no new work once stopping began.
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def started(self) -> bool:
        return self.client is not None and self.http is not None and self.reconciler is not None

    def start(self) -> None:
        """Make the API client, the pods' HTTP session and the reconciler; on the event loop that will use them."""
        config = self.config
        self.client = KubeClient(
            kube_configuration(config),
            metrics=self.metrics,
            timeout=config.request_timeout,
            retries=config.retries,
            backoff=config.backoff_seconds,
            workers=config.api_workers,
            fence=self.fence,
        )
        self.http = pod_client.open_session()
        self.reconciler = Reconciler(config, self.metrics, self.client)

    async def close(self) -> None:
        """Close what ``start`` made (the client stays readable: benchmarks count its calls afterwards)."""
        if self.client is not None:
            await self.client.close()
        if self.http is not None:
            await self.http.close()
            self.http = None
