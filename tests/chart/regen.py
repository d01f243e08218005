"""Regenerate the chart's derived files: crds/ from the repository's crds/, files/rbac-rules.yaml from
specdecode_operator.rbac. Run from the repository root: `.venv/bin/python tests/chart/regen.py`."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdecode-operator"
CLUSTER_ALWAYS = {("apiextensions.k8s.io", "customresourcedefinitions")}
CLUSTER_WIDE_ONLY = {("", "namespaces"), ("kopf.dev", "clusterkopfpeerings")}
HEADER = (CHART / "files" / "rbac-rules.yaml").read_text().split("\nalways:\n")[0] + "\n"


def split(rules: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"always": [], "clusterWideOnly": [], "namespaced": []}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, resource)
                part = "always" if key in CLUSTER_ALWAYS else "clusterWideOnly" if key in CLUSTER_WIDE_ONLY else "namespaced"
                out[part].append({"apiGroups": [group], "resources": [resource], "verbs": list(rule["verbs"])})
    return out


def main() -> None:
    for crd in (ROOT / "crds").glob("*.yaml"):
        shutil.copyfile(crd, CHART / "crds" / crd.name)
    from specdecode_operator import rbac

    rules = getattr(rbac, "RULES", None) or rbac.rules()
    rules = [r if isinstance(r, dict) else r.to_dict() for r in rules]
    body = yaml.safe_dump(split(rules), sort_keys=False, default_flow_style=None, width=120)
    (CHART / "files" / "rbac-rules.yaml").write_text(HEADER + body)


if __name__ == "__main__":
    main()
