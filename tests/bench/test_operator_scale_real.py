"""The scale bench at small N against a real kube-apiserver: the per-object cost the operator pays there (children
written once each, one status write by the reconciler, none by the tuner before pods are ready, no finalizer,
about one pass per object, nothing in steady state although the window holds a whole resync sweep)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
N = 20
RESYNC = 6.0


def test_small_wave_on_a_real_api_server_costs_what_it_should():
    from tests.k8s.realapi import require_binaries

    require_binaries()
    # a short resync period: the settle (resync + 5 s) and the steady window (1.2 x resync) derive from it
    done = subprocess.run(
        [
            sys.executable,
            "bench/operator/operator_scale.py",
            "--count",
            str(N),
            "--envtest",
            "--json",
            "--resync",
            str(RESYNC),
            "--timeout",
            "120",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert r["api_server"] == "kube-apiserver (envtest)" and r["count"] == N
    writes = r["writes_initial_by_resource"]
    for resource, per_cr in (
        ("apply configmaps", 1),
        ("apply services", 2),
        ("apply deployments", 1),
        ("apply poddisruptionbudgets", 1),
        ("apply networkpolicies", 1),
        ("apply secrets", 1),
        ("apply serviceaccounts", 1),
    ):
        assert writes.get(resource) == per_cr * N, (resource, writes)
    assert writes.get("apply specdecodedeployments/status") == N, writes  # one status write, the reconciler's
    assert r["writes_per_cr_initial"] == 9, writes
    assert r["settle_seconds"] == RESYNC + 5 and r["steady_window_seconds"] > RESYNC, r
    # the window holds a resync sweep: its passes ran and found nothing to write or read
    assert r["steady_reconciles"] >= N, r
    assert r["writes_steady_state"] == 0 and r["api_calls_steady_state"] == 0, r
    assert r["audit_requests_steady"] == 0, r["audit_requests_steady_by_verb"]
    # one pass per object; the wave is far shorter than the resync period
    assert r["reconciles_per_cr_initial"] <= 1.5, r
    by_verb = r["audit_requests_to_ready_by_verb"]
    assert not by_verb.get("patch specdecodedeployments"), by_verb  # no finalizer
    # per object: 8 safety reads (a name may be taken by someone else's object) + 8 applies + 1 status + 1 Event;
    # besides them only kopf's start-up (discovery, one list and one watch per kind), shared by the N objects
    per_object = sum(
        n for k, n in by_verb.items() if k.split()[0] in ("get", "patch", "create") and not k.split()[1].startswith("/")
    )
    assert per_object <= 18 * N, by_verb
    assert r["audit_requests_to_ready"] - per_object <= 40, by_verb
