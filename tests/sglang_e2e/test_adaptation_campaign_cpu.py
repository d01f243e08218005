"""The adaptation campaign (bench/gpu/campaigns/adaptation.sh, issue 40 part 4) end to end on the CPU: the same
script and driver the GPU run uses, on the tiny models the CPU test bed serves, with tiny corpora and seconds of
training, so that what the one device call will run has run here first.

The bed: the tiny Llama target (8 layers, so that an EAGLE-3 head has three distinct capture layers; word-level
tokenizer) and two workloads of its words, A and B, drawn from disjoint sub-vocabularies (a structure a head learns
in seconds). The script trains heads A and B itself (its ``encode`` and ``train_eagle3.py --smoke``), then runs the
campaign: one pod (real SGLang on the CPU, capture on), the shift from A to B, the operator's own adaptation loop
and canary against an in-memory API server, the rendered Job's commands as local processes, a broken candidate,
the measurements; the summarizer renders the raw files.

What it proves: the full sequence runs and writes every raw file the summary needs; the attempt trained from the
served head on captured B traffic passes the gate, is canaried and promoted without a restart or a failed request;
the broken candidate is refused at the gate; the promoted head's greedy outputs equal the pod's own at steps 0.
The figures of a run this small (accept lengths of a tiny random target) prove nothing about the GPU's.

2.5 minutes alone on 2 cores, 4.5 with other work on them (the pod's start, three trainings, two gates: more than
the 90 s an engine test usually takes, so it is marked slow); run alone with
``pytest tests/sglang_e2e/test_adaptation_campaign_cpu.py``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sglang_e2e.conftest import sglang_required

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench/gpu/campaigns/adaptation.sh"
EOT = "<|endoftext|>"
SUBVOCAB = 12
DOCS = 80
WORDS_PER_DOC = 120

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# The run's knobs: small everything (bench/gpu/campaigns/adaptation.sh documents each).
CPU_KNOBS = {
    "DEVICE": "cpu",
    "SMOKE": "1",
    "DTYPE": "float32",
    "HEAD_MINUTES": "0.08",
    "HEAD_BYTES": "200000",
    "STEPS": "3",
    "CLIENTS": "2",
    "A_SECONDS": "3",
    "CAPTURE_SECONDS": "8",
    "PROMPT_CHARS": "120",
    "NEW_TOKENS": "16",
    "CANDIDATE_MINUTES": "0.1",
    "MEASURE_PROMPTS": "3",
    "MEASURE_CHARS": "60",
    "MEASURE_TOKENS": "16",
    "ROUNDS": "2",
    "IDENTITY_PROMPTS": "2",
    "TICK_SECONDS": "1.5",
    # the CPU schedule of tests/sglang_e2e/adaptation_loop.py: a tiny head learns in a few hundred steps at a high
    # learning rate; one torch thread keeps 2 shared cores from oversubscribing
    "TRAIN_ARGS": "--threads 1 --lr 1e-2 --warmup 5 --batch 8 --seq 64 --ttt 3",
    "GATE_ARGS": "--threads 1 --max-prompts 16",
}


def workload(seed: int, vocab: int) -> list[str]:
    """Documents of words ``t<i>`` from one sub-vocabulary (disjoint per seed), a Markov-like chain: learnable."""
    rng = random.Random(seed)
    sub = rng.sample(range(3 + seed * SUBVOCAB, 3 + (seed + 1) * SUBVOCAB), SUBVOCAB)
    assert max(sub) < vocab
    docs = []
    for _ in range(DOCS):
        w = rng.choice(sub)
        words = []
        for _ in range(WORDS_PER_DOC):
            words.append(f"t{w}")
            w = sub[(sub.index(w) * 5 + rng.choice((1, 1, 1, 2))) % SUBVOCAB]
        docs.append(" ".join(words) + "\n")
    return docs


def write_corpus(path: Path, docs: list[str]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    cut = len(docs) * 4 // 5
    (path / "train.txt").write_text(EOT.join(docs[:cut]))
    (path / "heldout.txt").write_text(EOT.join(docs[cut:]))
    (path / "corpus.json").write_text(json.dumps({"roots": ["tiny words"], "train_bytes": sum(map(len, docs[:cut]))}))


def tiny_bed(work: Path) -> Path:
    """WORKDIR with the target and the two corpora (the script skips what is there and trains the heads)."""
    import shutil

    from specdecode_runtime.cpu.tiny_models import make_tiny_models

    models = make_tiny_models(work / "models", shape={"num_hidden_layers": 8}, seed=0)
    shutil.copytree(models.target, work / "target")
    vocab = models.shape["vocab_size"]
    write_corpus(work / "corpus_a", workload(0, vocab))
    write_corpus(work / "corpus_b", workload(1, vocab))
    return work


def run_campaign(work: Path, out: Path, timeout: float = 800) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        **CPU_KNOBS,
        PYTHON=sys.executable,
        COMMIT="test",
        PYTHONPATH=os.pathsep.join([str(ROOT / "runtime"), str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.run(
        ["bash", str(SCRIPT), str(work), str(out), "all"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_campaign_runs_end_to_end_on_the_cpu(tmp_path):
    sglang_required()
    work, out = tiny_bed(tmp_path / "work"), tmp_path / "out"
    proc = run_campaign(work, out)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    for name in ("adaptation_run.json", "meta.json", "head_a_report.json", "head_b_report.json", "server.log"):
        assert (out / name).is_file(), name
    run = json.loads((out / "adaptation_run.json").read_text())
    s = json.loads(next((out / "summary").glob("*_adaptation.json")).read_text())
    assert run["outcome_1"] == "Promoted", run.get("operator", {}).get("ticks")
    assert s["failed_requests"] == 0 and s["server_restarts"] == 0
    assert s["broken_candidate_refused"] is True, s["broken_refusal_problems"]
    assert s["greedy_identical"] is True, s["identity"]
    assert s["minutes_to_promotion"] is not None and s["minutes_to_promotion"] > 0
    assert run["traffic"]["completed_by_workload"]["b"] > 0 and run["traffic"]["completed_by_workload"]["a"] > 0
    att = {a["attempt"]: a for a in run["attempts"]}
    assert att[1]["gate_exit"] == 0 and att[2]["gate_exit"] == 3
    assert att[1]["rendered_train"][:3] == ["specdecode-runtime", "adapt", "train"]
    assert "--device" in att[1]["rendered_train"]
    sides = {k for r in run["measure"]["rounds"] for k in r if k != "order"}
    assert sides == {"stale", "promoted", "offline_b"}
    assert s["accept_length_b"]["promoted"] is not None and s["speedup_over_stale_b1"] is not None
    md = next((out / "summary").glob("*_adaptation.md")).read_text()
    assert "## Provenance" in md and "gap_recovered" in md
