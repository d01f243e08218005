"""Which pods the tuner reads and steers: the ready endpoints of the object's headless Service.

Why EndpointSlices and why a LIST per interval: the slices already say which pods are ready and on which named
ports (``http`` for /metrics, ``control`` for step-table pushes), so the tuner needs no pod watch and no knowledge
of the pod template. One labelled LIST per object and interval (``kubernetes.io/service-name``) is as fresh as the
interval needs and avoids a cluster-wide EndpointSlice watch whose cache would hold every slice of the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..render import names


@dataclass
class Target:
    pod: str
    ip: str
    metrics_url: str | None
    control_url: str | None


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
                out[pod] = Target(
                    pod,
                    ip,
                    f"http://{_host(ip)}:{http}/metrics" if http else None,
                    f"http://{_host(ip)}:{control}" if control else None,
                )
    return [out[k] for k in sorted(out)]


async def list_targets(client, ns: str, name: str) -> list[Target]:
    """One LIST (label selector on the service name); ApiError propagates (the caller reports
    ``MetricsAvailable=Unknown/EndpointsUnavailable``)."""
    path = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
    data = await client.request(
        "GET",
        path,
        query=[("labelSelector", f"kubernetes.io/service-name={names.headless_service(name)}")],
        verb="list",
    )
    return targets_from_slices((data or {}).get("items") or [])
