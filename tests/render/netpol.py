"""Which pods a NetworkPolicy admits, evaluated as the Kubernetes API documents it (networking.k8s.io/v1), for
the policies the operator renders: one policy selecting a pod isolates it for ingress; a connection is admitted when
some ingress rule lists its port (or lists no ports) and some peer of that rule (or no ``from`` at all) matches the
source pod. A peer with only ``podSelector`` selects pods in the policy's namespace; with only ``namespaceSelector``
every pod of the matching namespaces; with both, the matching pods in the matching namespaces. Namespaces carry
``kubernetes.io/metadata.name`` (set by the API server). An ``ipBlock`` peer, a named port or an ``endPort`` is
reported, not guessed at."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions ANDed; an empty selector matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_admits(peer: dict, policy_namespace: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError(f"ipBlock peer {peer}: admits by address, not by pod")
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], source.ns_labels()):
            return False
    elif source.namespace != policy_namespace:
        return False
    return matches(peer.get("podSelector"), source.labels) if "podSelector" in peer else True


def _port_listed(rule: dict, port: int) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for p in ports:
        if "endPort" in p or isinstance(p.get("port"), str):
            raise NotImplementedError(f"port {p}: ranges and named ports are not evaluated here")
        if p.get("protocol", "TCP") == "TCP" and (p.get("port") is None or p["port"] == port):
            return True
    return False


def admits(policy: dict, target_labels: dict[str, str], source: Pod, port: int) -> bool:
    """Whether ``policy`` (in its own namespace) lets ``source`` open TCP ``port`` on a pod labelled
    ``target_labels`` of that namespace. A pod the policy does not select is not isolated by it (True)."""
    spec = policy["spec"]
    if not matches(spec.get("podSelector"), target_labels):
        return True
    if "Ingress" not in (spec.get("policyTypes") or ["Ingress"]):
        return True
    namespace = policy["metadata"]["namespace"]
    for rule in spec.get("ingress") or []:
        if not _port_listed(rule, port):
            continue
        peers = rule.get("from")
        if not peers or any(_peer_admits(p, namespace, source) for p in peers):
            return True
    return False
