"""End-to-end: the kopf operator against an API server, each test on both the API emulator and a real
kube-apiserver (tests/k8s/fixtures.py). The real one has no controllers: the tests play the Deployment controller
(``make_ready``) on both, and garbage collection is checked through ownerReferences where no collector runs.
Each test states the behaviour a user or a GitOps tool relies on."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.k8s.cluster import ApiFailure, condition, wait_for

APPS = "apps/v1"
LWS = "leaderworkerset.x-k8s.io/v1"


def sdd(name: str = "llama", *, tp: int = 8, draft_tp: int = 1, gpus_per_node: int = 8, **spec) -> dict:
    body = {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "target": {"model": "/models/Llama-3.1-70B-Instruct", "tensorParallelSize": tp},
            "draft": {"model": "/models/EAGLE3-LLaMA3.1-Instruct-70B", "tensorParallelSize": draft_tp},
            "placement": {"gpusPerNode": gpus_per_node},
        },
    }
    body["spec"].update(spec)
    return body


def children_of(cluster, name: str) -> dict[str, dict]:
    out = {}
    # items of a list carry no kind/apiVersion on a real API server (custom resources excepted): name it here
    for api_version, plural, kind in [
        ("v1", "serviceaccounts", "ServiceAccount"),
        ("v1", "configmaps", "ConfigMap"),
        ("v1", "services", "Service"),
        (APPS, "deployments", "Deployment"),
        (LWS, "leaderworkersets", "LeaderWorkerSet"),
        ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"),
        ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy"),
        ("v1", "secrets", "Secret"),
    ]:
        for obj in cluster.list(api_version, plural, f"app.kubernetes.io/instance={name}"):
            out[f"{kind}/{obj['metadata']['name']}"] = obj
    return out


def test_create_renders_children_and_reports_status(cluster):
    created = cluster.create_sdd(sdd())
    uid = created["metadata"]["uid"]
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"), what="Deployment llama")
    kids = wait_for(lambda: (k := children_of(cluster, "llama")) and "Secret/llama-control-token" in k and k)
    assert {
        "ServiceAccount/llama-runtime",
        "ConfigMap/llama-runtime",
        "Service/llama",
        "Service/llama-headless",
        "Deployment/llama",
        "Secret/llama-control-token",
    } <= set(kids)
    for obj in kids.values():
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": "specdecode.io/v1alpha1",
                "kind": "SpecDecodeDeployment",
                "name": "llama",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert obj["metadata"]["annotations"]["specdecode.io/input-hash"]
        managers = {m["manager"] for m in obj["metadata"].get("managedFields", [])}
        assert "specdecode-operator" in managers
    status = wait_for(lambda: cluster.get_sdd("llama").get("status"))
    assert status["observedGeneration"] == 1
    assert condition(cluster.get_sdd("llama"), "SpecValid")["status"] == "True"
    assert condition(cluster.get_sdd("llama"), "Ready")["status"] == "False"
    cluster.make_ready(APPS, "deployments", "llama")  # play the Deployment controller: pods are up
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True", what="Ready=True")
    final = cluster.get_sdd("llama")
    assert final["status"]["readyReplicas"] == 1
    assert condition(final, "Progressing")["status"] == "False"
    assert condition(final, "Degraded")["status"] == "False"
    # GitOps: kopf keeps no diff-base or progress in the object; spec is exactly what the user wrote
    assert not any(k.startswith("kopf.zalando.org") for k in final["metadata"].get("annotations", {}))
    assert "kopf" not in final["status"]
    assert final["spec"]["target"] == created["spec"]["target"]
    spec_writers = {m["manager"] for m in final["metadata"]["managedFields"] if "f:spec" in m["fieldsV1"]}
    assert "specdecode-operator" not in spec_writers


def test_steady_state_makes_no_writes(cluster):
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"))
    cluster.make_ready(APPS, "deployments", "llama")
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True")
    wait_for(lambda: (cluster.get_sdd("llama").get("status") or {}).get("speculative"), what="the tuner's report")
    cluster.wait_passes(1)  # the pass that wrote Ready has ended
    mark = cluster.log_mark()
    cluster.wait_passes(4)
    assert cluster.operator_writes(since=mark) == []


def test_tp_past_one_node_replaces_deployment_by_leaderworkerset(cluster):
    cluster.create_sdd(sdd(tp=8))
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"))
    cluster.patch_sdd("llama", {"spec": {"target": {"tensorParallelSize": 16}}})
    lws = wait_for(lambda: cluster.get(LWS, "leaderworkersets", "llama"), what="LeaderWorkerSet")
    wait_for(lambda: cluster.get(APPS, "deployments", "llama") is None, what="old Deployment deleted")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    wait_for(lambda: cluster.get_sdd("llama")["status"]["observedGeneration"] == 2)


def test_scale_subresource(cluster):
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"))
    wait_for(lambda: cluster.get_sdd("llama").get("status", {}).get("selector"))
    cluster.scale("llama", 3)
    assert cluster.get_sdd("llama")["spec"]["replicas"] == 3
    wait_for(lambda: cluster.get(APPS, "deployments", "llama")["spec"]["replicas"] == 3, what="replicas 3")
    scale = cluster.get_scale("llama")
    assert scale["spec"]["replicas"] == 3
    assert (
        scale["status"]["selector"]
        == "app.kubernetes.io/component=runtime,app.kubernetes.io/instance=llama,app.kubernetes.io/name=specdecode"
    )


def test_invalid_spec_is_rejected_at_admission_with_the_cel_message(cluster):
    with pytest.raises(ApiFailure) as err:
        cluster.create_sdd(sdd(tp=8, draft_tp=3))
    assert err.value.status == 422
    assert "draft tensorParallelSize must divide target tensorParallelSize" in err.value.body["message"]
    cluster.create_sdd(sdd())
    with pytest.raises(ApiFailure) as err:
        cluster.patch_sdd("llama", {"spec": {"target": {"tensorParallelSize": 12}}})
    assert err.value.status == 422
    assert "multiple of it" in err.value.body["message"]


def test_invalid_spec_that_bypassed_admission_is_reported_not_rendered(emulator_factory):
    # A real API server always enforces the CRD's rules; a CRD installed without them needs the operator's check.
    cluster = emulator_factory(admission=False, check_spec_rules=True)
    cluster.create_sdd(sdd("bad", tp=8, draft_tp=3))
    cond = wait_for(lambda: condition(cluster.get_sdd("bad"), "SpecValid") or None, what="SpecValid")
    assert cond["status"] == "False" and cond["reason"] == "InvalidSpec"
    assert "spec.draft.tensorParallelSize" in cond["message"] or "spec: " in cond["message"]
    assert "must divide target tensorParallelSize" in cond["message"]
    assert condition(cluster.get_sdd("bad"), "Ready")["status"] == "False"
    events = wait_for(lambda: [e for e in cluster.list("v1", "events") if e["reason"] == "InvalidSpec"])
    assert events[0]["type"] == "Warning" and events[0]["involvedObject"]["name"] == "bad"
    cluster.wait_passes(4)  # several resyncs: no children, no retry storm, one event
    assert children_of(cluster, "bad") == {}
    assert cluster.get(APPS, "deployments", "bad") is None
    assert len([e for e in cluster.list("v1", "events") if e["reason"] == "InvalidSpec"]) == 1
    status_writes = [r for r in cluster.emulator.writes(resource="specdecodedeployments") if r.subresource == "status"]
    assert len(status_writes) <= 2
    # fixing the spec recovers
    cluster.patch_sdd("bad", {"spec": {"draft": {"tensorParallelSize": 2}}})
    wait_for(lambda: cluster.get(APPS, "deployments", "bad"), what="Deployment after the fix")
    wait_for(lambda: condition(cluster.get_sdd("bad"), "SpecValid")["status"] == "True")


def test_pause_annotation_stops_child_writes(cluster):
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"))
    cluster.patch_sdd("llama", {"metadata": {"annotations": {"specdecode.io/reconcile": "paused"}}})
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Paused").get("status") == "True", what="Paused")
    before = cluster.get(APPS, "deployments", "llama")
    generation = cluster.patch_sdd("llama", {"spec": {"replicas": 2}})["metadata"]["generation"]
    # the operator has seen the change (status is written after the children of the same pass), and passed again
    wait_for(lambda: cluster.get_sdd("llama")["status"]["observedGeneration"] == generation, what="change observed")
    cluster.wait_passes(3)
    assert (
        cluster.get(APPS, "deployments", "llama")["metadata"]["resourceVersion"]
        == before["metadata"]["resourceVersion"]
    )
    cluster.patch_sdd("llama", {"metadata": {"annotations": {"specdecode.io/reconcile": None}}})
    wait_for(lambda: cluster.get(APPS, "deployments", "llama")["spec"]["replicas"] == 2, what="resumed")
    wait_for(lambda: not condition(cluster.get_sdd("llama"), "Paused"), what="Paused condition removed")


def test_delete_garbage_collects_children(cluster):
    created = cluster.create_sdd(sdd())
    kids = wait_for(lambda: (k := children_of(cluster, "llama")) and "Secret/llama-control-token" in k and k)
    cluster.delete_sdd("llama")
    wait_for(lambda: cluster.get_sdd("llama") is None, what="SDD gone (the operator's finalizer released)")
    if cluster.emulator is None:
        # no kube-controller-manager, so no garbage collector: what it acts on is each child's controller reference
        for key, obj in kids.items():
            (ref,) = [r for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
            assert ref["uid"] == created["metadata"]["uid"] and ref["blockOwnerDeletion"] is True, key
        return
    wait_for(lambda: children_of(cluster, "llama") == {}, what="children collected")


def test_a_pass_in_flight_when_the_owner_is_deleted_applies_no_more_children(emulator_factory):
    """A pass that reads a child while its owner is deleted must not apply that child afterwards: the owner reference
    would name a uid that is gone (the garbage collector deletes such an object again, see
    test_emulator_garbage_collection.py). The pass's read of its Deployment is held until the operator has seen the
    DELETED event, so the deletion lands mid-pass every time."""
    cluster = emulator_factory()
    context = cluster.operator.context
    client = context.reconciler.client
    real_get = client.get
    held = threading.Event()

    async def get(api_version, plural, namespace, name):
        if plural == "deployments" and not held.is_set():
            held.set()
            for _ in range(1000):  # at most 10 s: until the controller has dropped the deleted object
                if not context.controller.objects:
                    break
                await asyncio.sleep(0.01)
        return await real_get(api_version, plural, namespace, name)

    client.get = get
    em = cluster.emulator
    cluster.create_sdd(sdd())
    wait_for(held.is_set, what="the first pass reading its Deployment")
    mark = len(em.log)
    cluster.delete_sdd("llama")
    wait_for(lambda: not context.controller.objects, what="the operator saw the deletion")
    wait_for(lambda: [r for r in em.log[mark:] if r.verb == "get" and r.resource == "deployments"], what="the read")
    wait_for(lambda: not context.controller.queue.processing, what="the pass ended")
    assert [r for r in em.log[mark:] if r.verb == "apply" and r.resource == "deployments"] == []
    wait_for(lambda: children_of(cluster, "llama") == {}, what="children collected")


def test_foreign_object_with_our_name_is_left_alone_and_reported(cluster):
    foreign = cluster.create(
        "v1",
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "llama-runtime", "labels": {"team": "other"}},
            "data": {"mine": "yes"},
        },
    )
    cluster.create_sdd(sdd())
    cond = wait_for(
        lambda: (
            condition(cluster.get_sdd("llama"), "Degraded").get("reason") == "NameCollision"
            and condition(cluster.get_sdd("llama"), "Degraded")
        )
    )
    assert "ConfigMap/llama-runtime" in cond["message"]
    after = cluster.get("v1", "configmaps", "llama-runtime")
    assert after["data"] == {"mine": "yes"} and "ownerReferences" not in after["metadata"]
    assert after["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    wait_for(lambda: [e for e in cluster.list("v1", "events") if e["reason"] == "NameCollision"])
    assert cluster.get(APPS, "deployments", "llama") is not None  # the rest is still rendered


def test_a_foreign_control_secret_is_left_alone_and_ours_follows_once_it_is_gone(emulator_factory, monkeypatch):
    """The control-token Secret is not watched, so it is re-read every SECRET_RECHECK_SECONDS: a name collision
    found there must be looked at again then, not remembered for as long as passes keep coming."""
    from specdecode_operator.reconcile import reconciler

    monkeypatch.setattr(reconciler, "SECRET_RECHECK_SECONDS", 1.0)  # passes run every 0.3 s (resync)
    cluster = emulator_factory()
    cluster.create(
        "v1",
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "llama-control-token"},
            "stringData": {"token": "someone else's"},
        },
    )
    cluster.create_sdd(sdd())
    cond = wait_for(
        lambda: (
            condition(cluster.get_sdd("llama"), "Degraded").get("reason") == "NameCollision"
            and condition(cluster.get_sdd("llama"), "Degraded")
        )
    )
    assert "Secret/llama-control-token" in cond["message"]
    assert "ownerReferences" not in cluster.get("v1", "secrets", "llama-control-token")["metadata"]
    cluster.delete("v1", "secrets", "llama-control-token")
    wait_for(
        lambda: "Secret/llama-control-token" in children_of(cluster, "llama"),
        timeout=10,
        what="the operator's own control-token Secret after the foreign one was deleted",
    )
    wait_for(
        lambda: condition(cluster.get_sdd("llama"), "Degraded").get("reason") != "NameCollision",
        what="the collision cleared",
    )


def test_conflict_and_server_error_storms_converge(emulated):
    cluster = emulated
    em = cluster.emulator
    cluster.server.call(lambda: em.inject(verb="apply", resource="deployments", status=409, times=4))
    cluster.server.call(lambda: em.inject(verb="apply", resource="configmaps", status=500, times=3))
    cluster.server.call(lambda: em.inject(verb="get", resource="secrets", status=503, times=2))
    cluster.server.call(lambda: em.inject(verb="apply", resource="services", status=None, delay=2.5, times=1))
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"), timeout=20, what="converged Deployment")
    wait_for(
        lambda: (
            "Secret/llama-control-token" in children_of(cluster, "llama")
            and "Service/llama" in children_of(cluster, "llama")
        ),
        timeout=20,
    )
    cluster.make_ready(APPS, "deployments", "llama")
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True", timeout=10)
    assert all(f.hits == f.times for f in em.faults)


def test_operator_restart_resumes_without_duplicate_writes(cluster):
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"))
    cluster.make_ready(APPS, "deployments", "llama")
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True")
    # and the tuner's first report (status.speculative): a restart before it would rightly write it then
    wait_for(lambda: (cluster.get_sdd("llama").get("status") or {}).get("speculative"))
    before = cluster.get_sdd("llama")["status"]
    cluster.stop_operator()
    mark = cluster.log_mark()
    started = time.time()
    cluster.start_operator()
    cluster.wait_passes(4)  # the new operator's first pass over the object, and resyncs after it
    # Only what the new process sent: on a loaded machine the stopped process's last write (the tuner's status,
    # which the test waited for) can outlast the client's request timeout and be sent again; the API server logs
    # that repeat when it completes it, which can be after the mark (it changes nothing: the same apply again).
    writes = cluster.operator_writes(since=mark, received_after=started)
    assert writes == [], {
        "writes": writes,
        "status before": before,
        "after": cluster.get_sdd("llama")["status"],
        "all writes after the stop": cluster.operator_writes(since=mark),
    }
    assert condition(cluster.get_sdd("llama"), "Ready")["status"] == "True"


def test_every_api_call_is_covered_by_the_declared_rbac(emulated):
    from specdecode_operator.rbac import allowed

    cluster = emulated
    cluster.create_sdd(sdd())
    wait_for(lambda: "Secret/llama-control-token" in children_of(cluster, "llama"))
    cluster.patch_sdd("llama", {"spec": {"target": {"tensorParallelSize": 16}}})
    wait_for(lambda: cluster.get(LWS, "leaderworkersets", "llama") and not cluster.get(APPS, "deployments", "llama"))
    operator_calls = {
        (r.group, r.resource + (f"/{r.subresource}" if r.subresource else ""), r.verb)
        for r in cluster.emulator.log
        if r.user_agent.lower().startswith(("kopf", "specdecode-operator"))
    }
    operator_calls = {c for c in operator_calls if c[1] != "specdecodedeployments" or c[2] != "create"}
    missing = sorted(c for c in operator_calls if not allowed(*c))
    assert missing == []


def test_the_chart_rbac_grants_every_call_the_operator_makes(apiserver_factory):
    """On the real API server the operator holds only its ServiceAccount's token, bound to the chart's rendered
    ClusterRole; the audit log shows every request it made and whether RBAC let it through."""
    cluster = apiserver_factory(operator=False)
    if cluster.bed is None:
        pytest.skip("needs the local API server's audit log (an external cluster's is not readable here)")
    mark = cluster.log_mark()
    cluster.start_operator()  # after the mark: its start-up lists and watches count too
    cluster.create_sdd(sdd())
    wait_for(lambda: "Secret/llama-control-token" in children_of(cluster, "llama"))
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"), what="Deployment")
    cluster.make_ready(APPS, "deployments", "llama")
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True")
    cluster.patch_sdd("llama", {"spec": {"target": {"tensorParallelSize": 16}}})
    wait_for(lambda: cluster.get(LWS, "leaderworkersets", "llama") and not cluster.get(APPS, "deployments", "llama"))
    cluster.delete_sdd("llama")
    wait_for(lambda: cluster.get_sdd("llama") is None)
    events = cluster.bed.env.audit_events(mark, user=cluster.bed.operator_user)
    seen = {(e["verb"], (e.get("objectRef") or {}).get("resource")) for e in events}
    # the operator really ran as the ServiceAccount: its reads, SSA writes, status patches and deletes are all there
    assert {
        ("watch", "specdecodedeployments"),
        ("patch", "deployments"),
        ("patch", "specdecodedeployments"),
        ("delete", "deployments"),
    } <= seen, sorted(seen)
    assert cluster.bed.forbidden(mark) == []


def test_a_rule_missing_from_the_chart_is_caught(apiserver_bed, tmp_path):
    """The check above can fail: with ConfigMaps left out of the chart's rules the operator is refused, the audit
    log names the call, and no ConfigMap is created."""
    from tests.k8s.apiserver import OperatorProcess
    from tests.k8s.cluster import Cluster, unique_namespace
    from tests.k8s.fixtures import TEST_CONFIG

    bed = apiserver_bed
    namespace = unique_namespace()
    bed.env.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    bed.grant(namespace, without=("", "configmaps"))
    mark = bed.env.audit_offset()
    cluster = Cluster(bed.env.configuration(), namespace)
    with OperatorProcess(bed.operator_kubeconfig, (namespace,), tmp_path / "operator.log", **TEST_CONFIG):
        cluster.create_sdd(sdd())
        refused = wait_for(lambda: bed.forbidden(mark), what="a refusal in the audit log")
        assert any("core/configmaps" in r and f"ns={namespace}" in r for r in refused), refused
        assert cluster.get("v1", "configmaps", "llama-runtime") is None
    cluster.close()


@pytest.mark.parametrize("token_namespace", [False, True], ids=["defaults", "controlTokenNamespaces"])
def test_the_chart_installed_cluster_wide(apiserver_bed, tmp_path, token_namespace):
    """The chart watching every namespace (its default), in Secret control mode: a ClusterRole for everything but
    Secrets, which only ``rbac.controlTokenNamespaces`` grants, per namespace. The operator runs cluster-wide under its release's
    ServiceAccount (a label selector keeps it to this test's objects: other tests' namespaces are never deleted
    here). Outside those namespaces the only refusal is the control-token Secret, reported by an Event, and
    everything else is reconciled."""
    import yaml

    from tests.k8s.apiserver import OPERATOR_NAMESPACE, OperatorProcess, chart_rbac, kubectl
    from tests.k8s.cluster import Cluster, unique_namespace
    from tests.k8s.fixtures import TEST_CONFIG

    bed = apiserver_bed
    namespace = unique_namespace()
    bed.env.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    release = f"cw{int(token_namespace)}"
    values = {
        "rbac": {"controlTokenNamespaces": [namespace] if token_namespace else []},
        "controlAuth": {"mode": "Secret"},
    }
    rbac = chart_rbac(values, release=release)
    assert not [d for d in rbac if d["kind"] == "Role" and d["metadata"]["namespace"] == namespace]
    kubectl(
        bed.env.kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=e2e-setup",
        "-f",
        "-",
        input=yaml.safe_dump_all(rbac, sort_keys=False),
    )
    (sa,) = [d["metadata"]["name"] for d in rbac if d["kind"] == "ServiceAccount"]
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{sa}"
    cluster = Cluster(bed.env.configuration(), namespace)
    body = sdd()
    body["metadata"]["labels"] = {"e2e": namespace}
    mark = bed.env.audit_offset()
    kubeconfig = bed.env.service_account_kubeconfig(OPERATOR_NAMESPACE, sa)
    config = {**TEST_CONFIG, "label_selector": f"e2e={namespace}"}
    with OperatorProcess(kubeconfig, (), tmp_path / "operator.log", **config):
        cluster.create_sdd(body)
        wait_for(lambda: {"ConfigMap/llama-runtime", "Service/llama"} <= set(children_of(cluster, "llama")))
        wait_for(lambda: cluster.get(APPS, "deployments", "llama"))
        cluster.make_ready(APPS, "deployments", "llama")
        wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True")
        if token_namespace:
            wait_for(lambda: "Secret/llama-control-token" in children_of(cluster, "llama"))
        else:
            event = wait_for(
                lambda: [e for e in cluster.list("v1", "events") if e["reason"] == "ControlTokenUnavailable"]
            )[0]
            assert "rbac.controlTokenNamespaces" in event["message"]
            assert "Secret/llama-control-token" not in children_of(cluster, "llama")
        cluster.delete_sdd("llama")
        wait_for(lambda: cluster.get_sdd("llama") is None)
    cluster.close()
    watches = {
        (e.get("objectRef") or {}).get("namespace")
        for e in bed.env.audit_events(mark, user=user)
        if e["verb"] == "watch" and (e.get("objectRef") or {}).get("resource") == "specdecodedeployments"
    }
    assert watches == {None}  # one cluster-wide watch, not one per namespace
    refused = bed.forbidden(mark, user=user)
    if token_namespace:
        assert refused == []
    else:
        assert refused and all(r.startswith("get core/secrets") and f"ns={namespace}" in r for r in refused), refused
