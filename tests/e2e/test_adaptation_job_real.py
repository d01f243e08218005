"""The training Job of spec.draft.adaptation.training on a real kube-apiserver, driven by the operator's
``Adaptations`` step (tuning/adaptation.py) with the operator's ServiceAccount token under the chart's RBAC
(namespaced mode), in a namespace that enforces the `restricted` Pod Security Standard.

The API server runs no Job controller and no kubelet: the test plays them. It creates the Job's pod from the Job's
own template (admitted by `restricted`), labelled as the Job controller labels it, and sets the pod's or the Job's
status as they would. What it shows:

* the Job is server-side applied with its owner reference, the operator's labels, activeDeadlineSeconds from
  maxSeconds and backoffLimit 0, only when the interval has passed, and status.draft.adaptation follows it
  (Capturing -> Training) at the API server, beside status.draft.serving written under the draft rollout's manager;
* a gate container terminated with exit 0 and the verdict's summary in its termination message: Canary, the
  candidate recorded in status (spec unchanged); a Job failed past its deadline: Failed, with the reason;
* no request of the operator was refused (the jobs and pods grants are exactly what it uses).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from specdecode_operator.api.models import API_VERSION, PLURAL
from specdecode_operator.api.validate import parse
from specdecode_operator.kube_client import KubeClient, resource_path
from specdecode_operator.object_state import ObjectState
from specdecode_operator.render import training_job
from specdecode_operator.tuning import adaptation, draft_rollout
from specdecode_runtime.contract import adaptation as contract

pytestmark = pytest.mark.timeout(120)

DRAFT = "/models/eagle3"
VERDICT = {
    "better": True,
    "ratio": 1.4,
    "heldout_records": 9,
    "serving": {"accept_length": 0.5, "conditional_acceptance": [0.3, 0.2, 0.1]},
    "candidate": {"accept_length": 1.2, "conditional_acceptance": [0.6, 0.4, 0.2], "digest": "sha256:c0ffee"},
}


def sdd(name: str, namespace: str) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "target": {"model": "/models/llama", "tensorParallelSize": 1},
            "draft": {
                "model": DRAFT,
                "tensorParallelSize": 1,
                "adaptation": {
                    "enabled": True,
                    "capture": {"claimName": "traffic"},
                    "training": {"intervalSeconds": 600, "maxSeconds": 900, "gpus": 1, "minRatio": 1.1},
                },
            },
            "placement": {"gpusPerNode": 1},
        },
    }


class Bed:
    def __init__(self, apiserver_bed):
        import kubernetes

        self.bed, self.env = apiserver_bed, apiserver_bed.env
        self.ns = f"adapt-{uuid.uuid4().hex[:6]}"
        labels = {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }
        status, out = self.env.request("POST", "/api/v1/namespaces", {"metadata": {"name": self.ns, "labels": labels}})
        assert status == 201, out
        self.bed.grant(self.ns)
        self.mark = self.env.audit_offset()
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(self.bed.operator_kubeconfig), client_configuration=cfg)
        self.cfg = cfg
        self.now = 1_700_000_000.0
        self.events: list[tuple[str, str, str]] = []

    def admin(self, method: str, path: str, body: dict | None = None, ctype: str = "application/json"):
        status, out = self.env.request(method, path, body, content_type=ctype)
        assert 200 <= status < 300, (method, path, status, out)
        return out

    def get_sdd(self, name: str) -> dict:
        return self.admin("GET", resource_path(API_VERSION, PLURAL, self.ns, name))

    async def run(self, name: str, script):
        """Create the object, record its serving draft (the draft rollout's write), then ``script(step)``."""
        self.admin("POST", resource_path(API_VERSION, PLURAL, self.ns, None), sdd(name, self.ns))
        client = KubeClient(self.cfg)
        state = ObjectState()
        try:
            await draft_rollout.write(client, name, self.ns, {"serving": {"source": DRAFT}, "phase": "Serving"})

            async def write(status: dict) -> None:
                await adaptation.write(client, name, self.ns, status)

            async def changed() -> None:
                pass

            loop = adaptation.Adaptations(
                state, client, write, lambda *e: self.events.append(e), changed, "runtime:test", lambda: self.now
            )

            async def step() -> dict:
                body = self.get_sdd(name)
                await loop.step(parse(body), body)
                return ((self.get_sdd(name).get("status") or {}).get("draft") or {}).get("adaptation") or {}

            await script(step)
        finally:
            await client.close()

    def job_pod(self, job: dict) -> str:
        """The pod the Job controller would create, from the Job's template (admitted by `restricted`)."""
        name = f"{job['metadata']['name']}-x1"
        template = job["spec"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {**template["metadata"]["labels"], adaptation.JOB_LABEL: job["metadata"]["name"]},
            },
            "spec": template["spec"],
        }
        self.admin("POST", f"/api/v1/namespaces/{self.ns}/pods", pod)
        return name


@pytest.fixture
def bed(apiserver_bed):
    return Bed(apiserver_bed)


def test_the_job_is_applied_with_owner_and_bounds_and_status_follows_its_verdict(bed):
    name = "adapted"

    async def script(step):
        st = await step()
        assert st["phase"] == "Capturing" and st["since"]
        bed.now += 599
        assert (await step())["phase"] == "Capturing"
        jobs_path = f"/apis/batch/v1/namespaces/{bed.ns}/jobs"
        assert bed.admin("GET", jobs_path)["items"] == []  # not due yet: no Job
        bed.now += 1
        st = await step()
        assert st["phase"] == "Training" and st["job"] == f"{name}-adapt-1" and st["attempt"] == 1
        job = bed.admin("GET", f"{jobs_path}/{name}-adapt-1")
        owner = bed.get_sdd(name)["metadata"]
        (ref,) = job["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "SpecDecodeDeployment",
            name,
            owner["uid"],
            True,
        )
        assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specdecode-operator"
        assert job["spec"]["activeDeadlineSeconds"] == 900 and job["spec"]["backoffLimit"] == 0
        assert job["spec"]["ttlSecondsAfterFinished"] == training_job.FINISHED_TTL_SECONDS
        gate = job["spec"]["template"]["spec"]["containers"][0]
        assert gate["terminationMessagePath"] == contract.TERMINATION_LOG
        assert gate["resources"]["limits"]["nvidia.com/gpu"] == "1"
        pod = bed.job_pod(job)
        assert (await step())["phase"] == "Training"  # the pod runs: nothing to record
        message = contract.encode(contract.summary(VERDICT))
        bed.admin(
            "PATCH",
            f"/api/v1/namespaces/{bed.ns}/pods/{pod}/status",
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": "gate",
                            "image": gate["image"],
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}},
                        }
                    ],
                }
            },
            "application/strategic-merge-patch+json",
        )
        st = await step()
        assert st["phase"] == "Canary", st
        assert st["candidate"] == {"source": contract.attempt_dir(name, 1), "base": DRAFT, "attempt": 1}
        assert st["lastResult"]["candidateAcceptance"] == [0.6, 0.4, 0.2] and st["lastResult"]["ratio"] == 1.4
        body = bed.get_sdd(name)
        assert body["status"]["draft"]["serving"]["source"] == DRAFT  # the draft rollout's field, kept
        assert body["spec"]["draft"]["model"] == DRAFT  # spec never written: the adapted draft lives in status
        managers = {m["manager"] for m in body["metadata"]["managedFields"]}
        assert {adaptation.ADAPT_MANAGER, draft_rollout.DRAFT_MANAGER} <= managers

    asyncio.run(bed.run(name, script))
    assert [r for _, r, _ in bed.events] == ["DraftTrainingStarted", "DraftCandidateGated"]
    assert bed.bed.forbidden(bed.mark) == []


def test_a_job_past_its_deadline_fails_the_attempt(bed):
    name = "deadline"

    async def script(step):
        await step()
        bed.now += 600
        assert (await step())["phase"] == "Training"
        path = f"/apis/batch/v1/namespaces/{bed.ns}/jobs/{name}-adapt-1/status"
        start = "2024-01-01T00:00:00Z"
        cond = {
            "status": "True",
            "reason": "DeadlineExceeded",
            "message": "Job was active longer than specified deadline",
        }
        conditions = [
            {"type": "FailureTarget", **cond, "lastProbeTime": start, "lastTransitionTime": start},
            {"type": "Failed", **cond, "lastProbeTime": start, "lastTransitionTime": start},
        ]
        bed.admin(
            "PATCH",
            path,
            {"status": {"startTime": start, "failed": 1, "conditions": conditions}},
            "application/merge-patch+json",
        )
        st = await step()
        assert st["phase"] == "Failed" and "maxSeconds" in st["message"], st
        bed.now += 60
        assert (await step())["phase"] == "Failed"  # the next attempt waits for the interval

    asyncio.run(bed.run(name, script))
    assert bed.events[-1][:2] == ("Warning", "DraftTrainingFailed")
    assert bed.bed.forbidden(bed.mark) == []
