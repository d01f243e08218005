"""Label and annotation keys: which ones are valid, which ones the operator owns, and which of a deployment's own
labels its children carry.

Standard library only, so that the operator's configuration (the ServiceMonitor label default) checks its values
with the same definitions as admission (``rules``) and the renderer.
"""

from __future__ import annotations

import re
from typing import Mapping

# The labels the operator puts on every child and every runtime pod (render/names.labels). The selectors of the
# serving workload, the Services, the PodDisruptionBudget and the control-port NetworkPolicy are made of them, so no
# user-given label may take their place.
IDENTITY_LABEL_KEYS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
)
# Keys under the operator's own domain (and its subdomains): the operator's annotations (config and input hashes)
# and any label it may add later.
OPERATOR_DOMAIN = "specdecode.io"
# The LeaderWorkerSet controller labels the pods of a multi-node group with these, and selects on them.
LWS_DOMAIN = "leaderworkerset.sigs.k8s.io"

# Kubernetes' qualified name (label and annotation keys): an optional DNS-1123 subdomain prefix of at most 253
# characters and '/', then a name of at most 63 characters of letters, digits, '-', '_' and '.', alphanumeric at
# both ends. The prefix's length is a second pattern (KEY_PREFIX_PATTERN): CEL has no string splitting.
# Patterns are written without backslashes ("[.]" for a dot): the same text is a Python and a CEL regular expression.
DNS1123_SUBDOMAIN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
KEY_PATTERN = rf"^({DNS1123_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
KEY_PREFIX_PATTERN = r"^[^/]{1,253}/"
VALUE_MAX = 63
VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
# A key in the operator's domain or a subdomain; and in either reserved domain.
OPERATOR_DOMAIN_PATTERN = "^([^/]*[.])?specdecode[.]io/"
RESERVED_DOMAIN_PATTERN = "^([^/]*[.])?(specdecode[.]io|leaderworkerset[.]sigs[.]k8s[.]io)/"
# DNS-1123 subdomain of at most 253 characters: names of ServiceAccounts, Secrets, PriorityClasses, RuntimeClasses
# and schedulers.
NAME_PATTERN = f"^{DNS1123_SUBDOMAIN}$"
NAME_MAX = 253

# A deployment's own labels reach its children except these domains (and their subdomains): the Kubernetes
# project's (kubernetes.io, k8s.io, x-k8s.io: the app.kubernetes.io keys the operator sets, and controllers' own such
# as Kueue's queue label, which would hand the children to that controller), the operator's, and the tracking labels
# of the tools that apply SpecDecodeDeployments (Helm, Argo CD, Flux): on a child, a tracking label makes that tool
# count the child as its own, report it out of sync and prune it.
NOT_PROPAGATED_DOMAINS = (
    "kubernetes.io",
    "k8s.io",
    "x-k8s.io",
    OPERATOR_DOMAIN,
    "helm.sh",
    "argoproj.io",
    "fluxcd.io",
)


def domain_of(key: str) -> str:
    """The prefix of a key (``''`` when it has none)."""
    return key.split("/", 1)[0] if "/" in key else ""


def in_domain(key: str, domain: str) -> bool:
    prefix = domain_of(key)
    return prefix == domain or prefix.endswith("." + domain)


def is_reserved_label(key: str) -> bool:
    """A label key only the operator (or the LeaderWorkerSet controller) sets on its pods and children."""
    return key in IDENTITY_LABEL_KEYS or in_domain(key, OPERATOR_DOMAIN) or in_domain(key, LWS_DOMAIN)


def propagated(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels of a SpecDecodeDeployment that its children carry, sorted by key."""
    return {k: v for k, v in sorted(labels.items()) if not any(in_domain(k, d) for d in NOT_PROPAGATED_DOMAINS)}


def key_problem(key: str) -> str | None:
    if not isinstance(key, str) or not re.fullmatch(KEY_PATTERN[1:-1], key):
        return (
            f"{key!r} is not a label key: [PREFIX/]NAME, NAME at most 63 letters, digits, '-', '_' or '.' "
            "beginning and ending with a letter or digit, PREFIX a lowercase DNS subdomain"
        )
    if "/" in key and len(domain_of(key)) > 253:
        return f"{key!r}: the prefix of a label key is at most 253 characters"
    return None


def value_problem(value: str) -> str | None:
    if not isinstance(value, str) or len(value) > VALUE_MAX or not re.fullmatch(VALUE_PATTERN[1:-1], value):
        return (
            f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' or '.' beginning and ending "
            "with a letter or digit, or empty"
        )
    return None


def label_problems(labels: Mapping[str, str], *, reserved: bool = True) -> list[str]:
    """What is wrong with a label map (syntax, and with ``reserved`` the operator's own keys), one line each."""
    out = []
    for key, value in labels.items():
        problem = key_problem(key) or value_problem(value)
        if problem:
            out.append(problem)
        elif reserved and is_reserved_label(key):
            out.append(f"{key!r} is the operator's own label")
    return out
