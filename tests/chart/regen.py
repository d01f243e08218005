"""Regenerate the chart's derived files: crds/ from the repository's crds/, files/rbac-rules.yaml from
specdecode_operator.rbac. Run from the repository root: `.venv/bin/python tests/chart/regen.py`."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdecode-operator"
HEADER = (CHART / "files" / "rbac-rules.yaml").read_text().split("\nalways:\n")[0] + "\n"
PARTS = {
    "cluster": "always",
    "metrics-review": "metricsReview",
    "operator-namespace": "operatorNamespace",
    "control-serviceaccount": "controlServiceAccount",
    "watched": "namespaced",
    "control-token": "controlToken",
}


def split(rbac) -> dict[str, list[dict]]:
    return {part: rbac.by_scope(scope) for scope, part in PARTS.items()}


def main() -> None:
    for crd in (ROOT / "crds").glob("*.yaml"):
        shutil.copyfile(crd, CHART / "crds" / crd.name)
    from specdecode_operator import rbac

    body = yaml.safe_dump(split(rbac), sort_keys=False, default_flow_style=None, width=120)
    (CHART / "files" / "rbac-rules.yaml").write_text(HEADER + body)


if __name__ == "__main__":
    main()
