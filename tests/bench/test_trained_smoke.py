"""The trained-target pipeline (bench/gpu/trained) end to end at smoke size on the CPU: corpus split, BPE tokenizer,
Llama target, EAGLE-3 head, per-position acceptance, and the head loaded by SGLang 0.5.23's own
``LlamaForCausalLMEagle3``. The stages run in this process (one import of torch / transformers / sglang)."""

from __future__ import annotations

import importlib
import json
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

TRAINED = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "trained"
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _module(name: str):
    if str(TRAINED) not in sys.path:
        sys.path.insert(0, str(TRAINED))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("trained")
    corpus, target, head = root / "corpus", root / "target", root / "eagle3"
    roots = [str(STDLIB / d) for d in ("json", "email", "asyncio", "unittest")]
    argv = [a for r in roots for a in ("--root", r)]
    assert _module("corpus").main(["--out", str(corpus), *argv, "--heldout-percent", "10"]) == 0
    assert (
        _module("train_target").main(
            ["--data", str(corpus), "--out", str(target), "--smoke", "--minutes", "0.08", "--seed", "1"]
        )
        == 0
    )
    assert (
        _module("train_eagle3").main(
            [
                "--target",
                str(target),
                "--data",
                str(corpus),
                "--out",
                str(head),
                "--smoke",
                "--minutes",
                "0.05",
                "--draft-vocab",
                "384",
            ]
        )
        == 0
    )
    acc = root / "acceptance.json"
    assert (
        _module("acceptance").main(
            [
                "--target",
                str(target),
                "--draft",
                str(head),
                "--data",
                str(corpus),
                "--prompts",
                "2",
                "--prompt-len",
                "32",
                "--gen",
                "24",
                "--k",
                "7",
                "--out",
                str(acc),
                "--smoke",
            ]
        )
        == 0
    )
    return SimpleNamespace(corpus=corpus, target=target, head=head, acceptance=acc)


def test_heldout_documents_never_appear_in_training_text(pipeline):
    eot = _module("packed_data").EOT
    train = set((pipeline.corpus / "train.txt").read_text().split(eot))
    held = [d for d in (pipeline.corpus / "heldout.txt").read_text().split(eot) if d]
    assert held and train
    assert not [d for d in held if d in train]


def test_tokenizer_round_trips_text(pipeline):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(pipeline.target))
    text = 'def f(x):\n\tif x:  # é 中 ✓\n        return {"a": [1, 2.5]}\n'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert len(tok) == json.loads((pipeline.target / "config.json").read_text())["vocab_size"]


def test_target_learns_heldout_loss_drops_and_config_is_sglang_llama(pipeline):
    report = json.loads((pipeline.target / "train_report.json").read_text())
    assert report["steps"] > 0 and report["tokens_seen"] > 0 and report["tokens_per_s"] > 0
    assert report["heldout_loss"] < report["heldout_loss_init"]
    cfg = json.loads((pipeline.target / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["torch_dtype"] == "bfloat16" and cfg["tie_word_embeddings"] is False
    assert (pipeline.target / "model.safetensors").is_file()
    assert (pipeline.target / "generation_config.json").is_file()


def test_eagle3_head_loads_exactly_through_sglang(pipeline):
    pytest.importorskip("sglang")
    check = _module("sglang_check").check
    assert check(pipeline.head) == []


def test_sglang_check_catches_a_misnamed_tensor(pipeline, tmp_path):
    """The planted fault: one tensor renamed, which SGLang's loader would drop without a word."""
    pytest.importorskip("sglang")
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((pipeline.head / "config.json").read_text())
    tensors = load_file(str(pipeline.head / "model.safetensors"))
    tensors["midlayer.hidden_layernorm.weight"] = tensors.pop("midlayer.hidden_norm.weight")
    save_file(tensors, str(bad / "model.safetensors"))
    problems = _module("sglang_check").check(bad)
    assert any("midlayer.hidden_layernorm.weight" in p for p in problems)
    assert any("hidden_norm" in p and "written 0 times" in p for p in problems)


def test_head_config_names_the_capture_layers_and_draft_vocab(pipeline):
    cfg = json.loads((pipeline.head / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["draft_vocab_size"] == 384
    layers = json.loads((pipeline.target / "config.json").read_text())["num_hidden_layers"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, layers // 2 - 1, layers - 4]


def test_acceptance_reports_per_position_rates(pipeline):
    acc = json.loads(pipeline.acceptance.read_text())
    rates = acc["conditional_acceptance"]
    assert len(rates) == 7 and all(0.0 <= r <= 1.0 for r in rates)
    assert acc["chains"] > 0 and 0.0 <= acc["accept_length"] <= 7.0
    assert acc["tokens_per_verify"] == pytest.approx(acc["accept_length"] + 1)


class _StubTarget:
    """Greedy next tokens from a fixed random logit table: diverse, so misaligned drafts rarely match."""

    def __init__(self, vocab: int, layers: int, hidden: int):
        self.vocab, self.layers, self.hidden = vocab, layers, hidden

    def __call__(self, input_ids, output_hidden_states=True):
        b, t = input_ids.shape
        gen = torch.Generator().manual_seed(7)
        logits = torch.randn(b, t, self.vocab, generator=gen)
        hs = tuple(torch.zeros(b, t, self.hidden) for _ in range(self.layers + 1))
        return SimpleNamespace(logits=logits, hidden_states=hs)


class _StubHead:
    """Drafts, at step j and position p, the target's greedy token at p + 1 + j + ``shift``."""

    aux_layer_ids = [0, 1, 2]

    def __init__(self, target_next: torch.Tensor, vocab: int, shift: int):
        self.next, self.vocab, self.shift = target_next, vocab, shift

    def unroll(self, feats, tokens, steps):
        t = tokens.shape[1]
        out = []
        for j in range(steps):
            idx = (torch.arange(t) + 1 + j + self.shift).clamp(max=self.next.shape[1] - 1)
            out.append(torch.nn.functional.one_hot(self.next[:, idx], self.vocab).float())
        return out

    def draft_to_target(self, ids):
        return ids


@pytest.mark.parametrize("shift,perfect", [(0, True), (1, False), (-1, False)])
def test_acceptance_alignment_oracle(shift, perfect):
    """A head that drafts exactly the target's greedy continuation is accepted at every position; the same head
    one position off is not (catches an off-by-one in the chain/target alignment)."""
    measure = _module("acceptance").measure
    vocab, k = 50, 7
    target = _StubTarget(vocab, layers=4, hidden=8)
    seqs = torch.randint(0, vocab, (3, 40), generator=torch.Generator().manual_seed(0))
    nxt = target(seqs).logits.argmax(-1)
    res = measure(
        target, _StubHead(nxt, vocab, shift), seqs, prompt_len=10, k=k, amp=lambda: torch.autocast("cpu", enabled=False)
    )
    if perfect:
        assert res["conditional_acceptance"] == [1.0] * k and res["accept_length"] == k
    else:
        assert res["conditional_acceptance"][0] < 0.3 and res["accept_length"] < 1.0
