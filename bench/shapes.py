"""The model shapes the benchmarks run at, in one place: every bench, campaign and summary that needs a shape reads
it from here.

- ``LLAMA3_8B``: Llama-3-8B's transformers config keys, what ``specdecode-runtime selftest --model-config`` reads
  (no weights needed: the campaigns run it with ``--load-format dummy``). The GPU campaigns write it to a file with
  ``python3 bench/shapes.py llama3-8b FILE`` on the GPU machine (the standard library only).
- ``DraftHead``: an EAGLE-3 draft head for a DeepSeek-V3 / Kimi-K2 class target (hidden 7168, 32k draft vocabulary),
  the micro-benchmarks' default; ``DraftHead.tiny()`` is its CPU smoke-test miniature.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

LLAMA3_8B: dict[str, int] = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}
MODEL_CONFIGS = {"llama3-8b": LLAMA3_8B}


def describe(shape: dict[str, int]) -> str:
    """``32 layers, hidden 4096, GQA 32/8, vocab 128256`` for a transformers config."""
    return (
        f"{shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, "
        f"GQA {shape['num_attention_heads']}/{shape['num_key_value_heads']}, vocab {shape['vocab_size']}"
    )


def write_model_config(name: str, path: Path) -> Path:
    """The ``--model-config`` YAML of a named shape (flat integer keys: no YAML library needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# {name}'s shape, from bench/shapes.py (run with --load-format dummy)\n"
        + "".join(f"{k}: {v}\n" for k, v in MODEL_CONFIGS[name].items())
    )
    return path


@dataclass(frozen=True)
class DraftHead:
    """One EAGLE-3 draft head: attention and MLP of its decoder layer, the target's vocabulary (embedding lookup) and
    the draft's (lm_head)."""

    hidden: int = 7168
    heads: int = 56
    kv_heads: int = 8
    head_dim: int = 128
    ffn: int = 18432
    draft_vocab: int = 32000
    target_vocab: int = 129280

    @classmethod
    def tiny(cls, **more: int) -> DraftHead:
        return cls(hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128, draft_vocab=96, target_vocab=128, **more)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in MODEL_CONFIGS:
        print(f"usage: shapes.py {{{','.join(MODEL_CONFIGS)}}} FILE", file=sys.stderr)
        return 2
    print(write_model_config(argv[0], Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
