"""The speculative algorithms a SpecDecodeDeployment may name (SGLang's ``--speculative-algorithm`` values).

A leaf of the contract: the CRD model, ``runtime.yaml`` and the capability rules all import the type from here, and
it imports nothing of ours, so a config model can name an algorithm without loading the rules that judge it. Which
algorithms the split draft and Live mode serve is a capability (:mod:`.capabilities`).
"""

from __future__ import annotations

from typing import Literal, get_args

Algorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)
DEFAULT_ALGORITHM: Algorithm = "EAGLE3"
