"""Model sources in the pod: the fetch-models init container with the real huggingface_hub against a local stand-in
for the hub (HF_ENDPOINT), and the launcher resolving pvc:// and hf:// to the directories SGLang is given, offline.

Each command runs as the pod runs it, in its own process with the pod's environment: huggingface_hub reads
HF_ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN once, at import.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specdecode_operator.api.validate import parse
from specdecode_operator.render.runtime_config import runtime_config
from specdecode_runtime.contract import model_source as ms
from tests.runtime.hub_standin import HubStandIn, Repo

ROOT = Path(__file__).resolve().parents[2]
TARGET = Repo(
    "acme/tiny-target",
    {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\0" * 4096, "tokenizer/tokenizer.json": b"{}"},
)
DRAFT = Repo("acme/tiny-eagle3", {"config.json": b'{"model_type": "eagle3"}', "model.safetensors": b"\1" * 1024})
TARGET.revisions["v1.0"] = TARGET.commit  # a tag naming the same commit
TIMEOUT = 60  # each command imports huggingface_hub and moves a few KiB; seconds of slack for a loaded 2-core machine


def sdd(target: str, draft: str) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": "tiny"},
        "spec": {
            "target": {"model": target, "tensorParallelSize": 1},
            "draft": {"model": draft, "tensorParallelSize": 1},
            "placement": {"gpusPerNode": 1},
        },
    }


@pytest.fixture
def config(tmp_path):
    def write(target: str, draft: str) -> Path:
        path = tmp_path / "runtime.yaml"
        path.write_text(runtime_config(parse(sdd(target, draft))).to_yaml())
        return path

    return write


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def runtime(args: list[str], cache: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    clean.update(
        {
            "HF_HUB_CACHE": str(cache),
            "HF_HOME": str(cache.parent / "hf-home"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "specdecode_runtime.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=clean,
        cwd=ROOT,
    )


def dry_run_args(out: str) -> list[str]:
    line = out.split("# sglang arguments\n", 1)[1].splitlines()[0]
    return line.split()


def test_model_strings_parse_to_their_sources():
    assert ms.parse("/models/GLM-5") == ms.PathSource("/models/GLM-5")
    assert ms.parse("meta-llama/Llama-3.1-8B") == ms.PathSource("meta-llama/Llama-3.1-8B")  # SGLang's own lookup
    assert ms.parse("pvc://models/a/b/").local_path() == "/mnt/pvc/models/a/b"
    assert ms.parse("pvc://models").local_path() == "/mnt/pvc/models"
    assert ms.parse("hf://org/name") == ms.HubSource("org/name", "main")
    assert ms.parse("hf://org/name@refs/pr/3") == ms.HubSource("org/name", "refs/pr/3")
    for bad, says in [
        ("s3://b/k", "scheme that is not supported"),
        ("pvc://m/../etc", "pvc://CLAIM/PATH"),
        ("hf://name", "hf://ORG/NAME[@REVISION]"),
        ("pvc://UPPER/x", "pvc://CLAIM/PATH"),
        ("hf://org/name@v1/../../x", "hf://ORG/NAME[@REVISION]"),
    ]:
        with pytest.raises(ms.ModelSourceError) as err:
            ms.parse(bad, "draft.model")
        assert str(err.value).startswith(f"draft.model: {bad!r} ") and says in str(err.value)
    assert ms.hub_sources("hf://a/b", "hf://a/b@main", "/x") == [ms.HubSource("a/b", "main")]  # one fetch


def test_fetch_fills_the_cache_once_and_the_launcher_resolves_offline(config, tmp_path):
    cache = tmp_path / "cache" / "hub"
    path = config(f"hf://{TARGET.repo_id}@v1.0", "pvc://drafts/tiny/eagle3")
    with HubStandIn([TARGET, DRAFT]) as hub:
        done = runtime(["fetch-models", "--config", str(path)], cache, HF_ENDPOINT=hub.endpoint)
        assert done.returncode == 0, done.stderr
        snapshot = cache / "models--acme--tiny-target" / "snapshots" / TARGET.commit
        assert done.stdout.strip().splitlines() == [
            f"specdecode-runtime fetch-models: hf://{TARGET.repo_id}@v1.0 -> {snapshot}"
        ]
        for name, data in TARGET.files.items():
            assert (snapshot / name).read_bytes() == data
        assert sorted(hub.downloads()) == sorted(f"/{TARGET.repo_id}/resolve/{TARGET.commit}/{n}" for n in TARGET.files)

        # a restarted pod on the same cache fetches nothing again
        again = runtime(["fetch-models", "--config", str(path)], cache, HF_ENDPOINT=hub.endpoint)
        assert again.returncode == 0, again.stderr
        assert len(hub.downloads()) == len(TARGET.files)
        # a cache filled beforehand, checked with the fetch set offline (spec.runtime.env HF_HUB_OFFLINE=1)
        checked = runtime(
            ["fetch-models", "--config", str(path)],
            cache,
            HF_HUB_OFFLINE="1",
            HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        )
        assert checked.returncode == 0 and checked.stdout == done.stdout, checked.stderr

        # the runtime container: offline, the hub unreachable; SGLang gets the snapshot and the claim's path
        asked = len(hub.requests)
        launched = runtime(
            ["launch", "--config", str(path), "--dry-run"],
            cache,
            HF_HUB_OFFLINE="1",
            HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        )
        assert launched.returncode == 0, launched.stderr
        args = dry_run_args(launched.stdout)
        assert args[args.index("--model-path") + 1] == str(snapshot)
        assert args[args.index("--speculative-draft-model-path") + 1] == "/mnt/pvc/drafts/tiny/eagle3"
        assert len(hub.requests) == asked


def test_both_models_from_the_hub_and_a_gated_repository_needs_the_token(config, tmp_path):
    cache = tmp_path / "cache" / "hub"
    path = config(f"hf://{TARGET.repo_id}", f"hf://{DRAFT.repo_id}@main")
    with HubStandIn([TARGET, DRAFT], token="hf_secret") as hub:
        refused = runtime(["fetch-models", "--config", str(path)], cache, HF_ENDPOINT=hub.endpoint)
        assert refused.returncode == 1
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith(
            f"specdecode-runtime fetch-models: error: could not fetch hf://{TARGET.repo_id}@main "
            f"from {hub.endpoint} into {cache}: "
        )
        assert "401" in line or "Unauthorized" in line or "restricted" in line, line
        done = runtime(["fetch-models", "--config", str(path)], cache, HF_ENDPOINT=hub.endpoint, HF_TOKEN="hf_secret")
        assert done.returncode == 0, done.stderr
        assert [line.split(" -> ")[0].rsplit(" ", 1)[1] for line in done.stdout.splitlines()] == [
            f"hf://{TARGET.repo_id}@main",
            f"hf://{DRAFT.repo_id}@main",
        ]
    launched = runtime(["launch", "--config", str(path), "--dry-run"], cache, HF_HUB_OFFLINE="1")
    assert launched.returncode == 0, launched.stderr
    args = dry_run_args(launched.stdout)
    assert args[args.index("--speculative-draft-model-path") + 1] == str(
        cache / "models--acme--tiny-eagle3" / "snapshots" / DRAFT.commit
    )


def test_a_fetch_with_no_network_fails_the_pod_with_one_line_naming_model_and_endpoint(config, tmp_path):
    cache = tmp_path / "cache" / "hub"
    path = config("/models/local-target", f"hf://{DRAFT.repo_id}@v2")
    endpoint = f"http://127.0.0.1:{closed_port()}"
    done = runtime(["fetch-models", "--config", str(path)], cache, HF_ENDPOINT=endpoint)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        f"specdecode-runtime fetch-models: error: could not fetch hf://{DRAFT.repo_id}@v2 from "
        f"{endpoint} into {cache}: "
    ), line
    assert "ConnectError" in line or "connection" in line.lower(), line


def test_an_unknown_revision_is_named(config, tmp_path):
    path = config(f"hf://{TARGET.repo_id}@no-such-tag", "/models/d")
    with HubStandIn([TARGET]) as hub:
        done = runtime(["fetch-models", "--config", str(path)], tmp_path / "hub", HF_ENDPOINT=hub.endpoint)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"could not fetch hf://{TARGET.repo_id}@no-such-tag" in done.stderr
    assert "RevisionNotFoundError" in done.stderr, done.stderr


def test_the_launcher_refuses_a_model_the_cache_lacks(config, tmp_path):
    cache = tmp_path / "empty" / "hub"
    path = config(f"hf://{TARGET.repo_id}@v1.0", "/models/d")
    done = runtime(["launch", "--config", str(path), "--dry-run"], cache, HF_HUB_OFFLINE="1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"target.model: hf://{TARGET.repo_id}@v1.0 is not (completely) in the hub cache {cache}" in done.stderr


def test_nothing_to_fetch_without_hub_models(config, tmp_path):
    path = config("pvc://models/t", "/models/d")
    done = runtime(["fetch-models", "--config", str(path)], tmp_path / "hub")
    assert done.returncode == 0 and "nothing to fetch" in done.stdout
    bad = runtime(["fetch-models", "--config", str(tmp_path / "missing.yaml")], tmp_path / "hub")
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr and "Traceback" not in bad.stderr
