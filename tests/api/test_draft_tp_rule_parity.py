"""The draft-TP rule has two homes by design: CEL in the CRD (the API server refuses a bad object) and
``specdecode_runtime.contract.derived.draft_tp_problems`` (the launcher and the rank choice in the pod). They must
accept exactly the same layouts."""

import itertools

import pytest

from specdecode_operator.api.validate import validate_object
from specdecode_runtime.contract.derived import draft_tp_problems

RANK_LISTS = [None, [0], [1], [0, 1], [2, 3], [3, 3], [0, 7], [0, 8], [4, 5, 6, 7], [0, 1, 2, 3, 4, 5, 6, 7]]


def sdd(target: int, draft: int, ranks):
    d = {"model": "/d", "tensorParallelSize": draft}
    if ranks is not None:
        d["ranks"] = ranks
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": "x"},
        "spec": {"target": {"model": "/t", "tensorParallelSize": target}, "draft": d},
    }


@pytest.mark.parametrize("target", [1, 2, 4, 8])
def test_cel_and_the_contract_accept_the_same_draft_layouts(target):
    disagree = []
    for draft, ranks in itertools.product(range(1, 10), RANK_LISTS):
        cel = [p for p in validate_object(sdd(target, draft, ranks)) if p.path.startswith("spec.draft")]
        contract = draft_tp_problems(target, draft, ranks)
        if bool(cel) != bool(contract):
            disagree.append(
                f"target {target} draft {draft} ranks {ranks}: CEL {[str(p) for p in cel]} contract {contract}"
            )
    assert not disagree, "\n".join(disagree)
