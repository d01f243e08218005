"""The `specdecode` CLI as a user runs it: a subprocess, exit codes, stdout/stderr, no tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pcie8-glm5-eagle3.yaml"


def run(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "specdecode_operator.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=120,
    )


def test_render_yaml_is_kubectl_ready():
    r = run("render", "-f", str(EXAMPLE))
    assert r.returncode == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    assert [d["kind"] for d in docs][:5] == ["ServiceAccount", "ConfigMap", "Service", "Service", "Deployment"]
    assert all(d["metadata"]["namespace"] == "llm" for d in docs)


def test_render_json_and_multi_document_files(tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text(EXAMPLE.read_text() + "\n---\n" + (ROOT / "examples/multinode-tp16-lws.yaml").read_text())
    r = run("render", "-f", str(both), "-o", "json")
    assert r.returncode == 0, r.stderr
    kinds = [i["kind"] for i in json.loads(r.stdout)["items"]]
    assert "Deployment" in kinds and "LeaderWorkerSet" in kinds


def test_validate_prints_each_problem_with_field_path_and_exits_2(tmp_path):
    bad = yaml.safe_load(EXAMPLE.read_text())
    bad["spec"]["draft"]["tensorParallelSize"] = 3
    bad["spec"]["nccl"]["env"]["LD_PRELOAD"] = "x"
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad))
    r = run("validate", "-f", str(f))
    assert r.returncode == 2
    assert "spec.draft.tensorParallelSize: draft tensorParallelSize must divide target tensorParallelSize" in r.stderr
    assert "spec.nccl.env: nccl.env keys must match" in r.stderr
    assert "Traceback" not in r.stderr


def test_render_refuses_invalid_input_without_traceback(tmp_path):
    for content in ["::not yaml", "kind: Pod\n", "", "- 1\n- 2\n"]:
        f = tmp_path / "x.yaml"
        f.write_text(content)
        r = run("render", "-f", str(f))
        assert r.returncode == 2, (content, r.stdout)
        assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    r = run("render", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_validate_from_stdin():
    r = run("validate", "-f", "-", stdin=EXAMPLE.read_text())
    assert r.returncode == 0 and "glm5-pcie: valid" in r.stdout


def test_crd_command_prints_the_committed_crd():
    r = run("crd")
    assert r.returncode == 0
    assert r.stdout == (ROOT / "crds/specdecode.io_specdecodedeployments.yaml").read_text()
