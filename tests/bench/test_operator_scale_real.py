"""The scale bench at small N against a real kube-apiserver: the per-object cost the operator pays there (children
written once each, one status write by the reconciler and one by the tuner, nothing in steady state)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
N = 20


def test_small_wave_on_a_real_api_server_costs_what_it_should():
    from tests.k8s.realapi import require_binaries

    require_binaries()
    done = subprocess.run([sys.executable, "bench/operator_scale.py", "--count", str(N), "--envtest", "--json",
                           "--settle", "5", "--steady-seconds", "12", "--timeout", "120"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert r["api_server"] == "kube-apiserver (envtest)" and r["count"] == N
    writes = r["writes_initial_by_resource"]
    for resource, per_cr in (("apply configmaps", 1), ("apply services", 2), ("apply deployments", 1),
                             ("apply poddisruptionbudgets", 1), ("apply networkpolicies", 1), ("apply secrets", 1)):
        assert writes.get(resource) == per_cr * N, (resource, writes)
    assert writes.get("apply specdecodedeployments/status") == N, writes  # one status write per object
    assert r["writes_steady_state"] == 0 and r["api_calls_steady_state"] == 0, r
    assert r["audit_requests_steady"] == 0, r["audit_requests_steady_by_verb"]
    assert r["reconciles_per_cr_initial"] <= 4, r  # event passes only, not a pass per echo or tick
    assert r["audit_requests_per_cr_initial"] <= 24, r["audit_requests_to_ready_by_verb"]
