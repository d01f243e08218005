"""tests/upstream_schemas.validate_custom accepts valid objects of the vendored kinds and rejects broken ones with
a path-bearing message (the render tests rely on it)."""

import copy

import pytest

from tests.upstream_schemas import UpstreamSchemaError, supported_kinds, validate_custom

LWS = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1",
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "llama"},
    "spec": {
        "replicas": 1,
        "startupPolicy": "LeaderReady",
        "rolloutStrategy": {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": "10%", "maxUnavailable": 1},
        },
        "leaderWorkerTemplate": {
            "size": 2,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": {
                "metadata": {"labels": {"role": "leader"}},
                "spec": {
                    "containers": [{"name": "sglang", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}]
                },
            },
            "workerTemplate": {
                "spec": {"containers": [{"name": "sglang", "image": "i", "ports": [{"containerPort": 30000}]}]}
            },
        },
    },
}
RULE = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PrometheusRule",
    "metadata": {"name": "r"},
    "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0", "for": "10m"}]}]},
}
SMON = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "ServiceMonitor",
    "metadata": {"name": "m", "labels": {"release": "kps"}},
    "spec": {
        "selector": {"matchLabels": {"app": "x"}},
        "namespaceSelector": {"matchNames": ["ns"]},
        "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}],
    },
}


def mutated(obj, path, value):
    obj = copy.deepcopy(obj)
    node = obj
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return obj


def test_kinds():
    kinds = {k for _, k in supported_kinds()}
    assert {"LeaderWorkerSet", "PrometheusRule", "ServiceMonitor"} <= kinds


def test_valid_objects_pass():
    validate_custom(LWS)
    validate_custom(RULE)
    validate_custom(SMON)
    validate_custom(mutated(SMON, ["spec", "endpoints", 0, "targetPort"], 9090))  # int-or-string
    validate_custom(mutated(RULE, ["spec", "groups", 0, "partial_response_strategy"], "WARN"))  # RE2 (?i) pattern


WORKER = ["spec", "leaderWorkerTemplate", "workerTemplate", "spec"]


@pytest.mark.parametrize(
    "obj,path",
    [
        (mutated(LWS, ["spec", "replicas"], "two"), "$.spec.replicas"),
        (mutated(LWS, ["spec", "bogus"], 1), "$.spec"),
        (mutated(LWS, ["spec", "leaderWorkerTemplate", "size"], "two"), "$.spec.leaderWorkerTemplate.size"),
        (
            mutated(LWS, ["spec", "leaderWorkerTemplate", "restartPolicy"], "Always"),
            "$.spec.leaderWorkerTemplate.restartPolicy",
        ),
        (
            mutated(LWS, ["spec", "rolloutStrategy", "rollingUpdateConfiguration", "maxSurge"], 1.5),
            "$.spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge",
        ),
        (
            mutated(LWS, WORKER + ["containers", 0, "imagee"], "x"),
            "$.spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]",
        ),
        (mutated(LWS, WORKER + ["containers"], KeyError), "$.spec.leaderWorkerTemplate.workerTemplate.spec"),
        (
            mutated(LWS, WORKER + ["containers", 0, "ports", 0, "containerPort"], "30000"),
            "$.spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].ports[0].containerPort",
        ),
        (mutated(RULE, ["spec", "groups", 0, "rules", 0, "for"], "10 minutes"), "$.spec.groups[0].rules[0].for"),
        (mutated(RULE, ["spec", "groups", 0, "rules", 0, "expr"], KeyError), "$.spec.groups[0].rules[0]"),
        (mutated(SMON, ["spec", "endpoints", 0, "intervl"], "30s"), "$.spec.endpoints[0]"),
        (mutated(SMON, ["spec", "endpoints", 0, "interval"], "30 seconds"), "$.spec.endpoints[0].interval"),
        (mutated(SMON, ["spec", "endpoints", 0, "scheme"], "ftp"), "$.spec.endpoints[0].scheme"),
        (mutated(SMON, ["spec", "selector"], KeyError), "$.spec"),
    ],
)
def test_broken_objects_fail_with_their_path(obj, path):
    with pytest.raises(UpstreamSchemaError) as err:
        validate_custom(obj)
    assert err.value.path == path and path in str(err.value)


def test_int_or_string_accepts_both():
    validate_custom(mutated(LWS, ["spec", "rolloutStrategy", "rollingUpdateConfiguration", "maxUnavailable"], "25%"))
    validate_custom(mutated(RULE, ["spec", "groups", 0, "rules", 0, "expr"], 1))


def test_unknown_kind_is_a_key_error():
    with pytest.raises(KeyError):
        validate_custom({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})


def test_messages_name_the_object_the_path_and_the_culprit():
    with pytest.raises(
        UpstreamSchemaError, match=r"^ServiceMonitor/m: \$\.spec\.endpoints\[0\]: .*'intervl' was unexpected"
    ):
        validate_custom(mutated(SMON, ["spec", "endpoints", 0, "intervl"], "30s"))
    with pytest.raises(
        UpstreamSchemaError,
        match=r"^LeaderWorkerSet/llama: \$\.spec\.leaderWorkerTemplate\.size: 'two' is not of type 'integer'",
    ):
        validate_custom(mutated(LWS, ["spec", "leaderWorkerTemplate", "size"], "two"))
