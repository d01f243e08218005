"""Any generated spec either renders schema-valid manifests or is refused with field-path messages: never an
exception."""

import kubernetes_validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdecode_operator.api.validate import InvalidSpec, parse
from specdecode_operator.render import render

tp = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 0, 65])
maybe = lambda s: st.one_of(st.none(), s)


@st.composite
def documents(draw):
    spec = {
        "replicas": draw(st.integers(-1, 4)),
        "target": {"model": draw(st.sampled_from(["/models/t", ""])), "tensorParallelSize": draw(tp)},
        "draft": {
            "model": "/models/d",
            "tensorParallelSize": draw(tp),
            "algorithm": draw(st.sampled_from(["EAGLE3", "EAGLE", "NEXTN", "MEDUSA"])),
        },
        "speculative": {
            "numSteps": draw(st.integers(0, 17)),
            "eagleTopK": draw(st.integers(1, 4)),
            "autotune": {
                "mode": draw(st.sampled_from(["Off", "Live", "Rollout"])),
                "minSteps": draw(st.integers(1, 8)),
                "maxSteps": draw(st.integers(1, 8)),
            },
        },
        "placement": {
            "gpusPerNode": draw(st.sampled_from([1, 4, 8, 16])),
            "interconnect": draw(st.sampled_from(["PCIe", "NVLink"])),
        },
        "nccl": {
            "env": draw(
                st.dictionaries(
                    st.sampled_from(["NCCL_ALGO", "NCCL_NVLS_ENABLE", "FOO"]),
                    st.sampled_from(["0", "1", "Ring"]),
                    max_size=2,
                )
            )
        },
        "runtime": {
            "launcher": draw(st.sampled_from(["specdecode", "sglang"])),
            "extraArgs": draw(
                st.lists(st.sampled_from(["--mem-fraction-static=0.8", "--tp-size=2", "--log-level=info"]), max_size=2)
            ),
        },
        "monitoring": {"serviceMonitor": draw(st.booleans())},
    }
    ranks = draw(maybe(st.lists(st.integers(0, 20), max_size=3)))
    if ranks is not None:
        spec["draft"]["ranks"] = ranks
    ndt = draw(maybe(st.integers(2, 9)))
    if ndt is not None:
        spec["speculative"]["numDraftTokens"] = ndt
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": draw(st.sampled_from(["ok", "Bad", "x" * 50])), "namespace": "ns"},
        "spec": spec,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_render_or_refuse_with_field_paths(doc):
    try:
        sdd = parse(doc)
    except InvalidSpec as e:
        assert e.problems
        for p in e.problems:
            assert p.path and p.message
            assert p.path == "<root>" or p.path.split(".")[0] in {"spec", "metadata", "apiVersion", "kind"}
        return
    for m in render(sdd):
        if m["apiVersion"] in {"v1", "apps/v1", "policy/v1", "networking.k8s.io/v1"}:
            kubernetes_validate.validate(m, "1.33", strict=True)
