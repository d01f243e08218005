"""Training a draft from captured traffic and gating it offline (docs/runtime.md "Training a draft from captured
traffic"): ``data`` reads the capture's JSON-lines files (standard library only), ``eagle3_head`` is an EAGLE-3 head
in plain PyTorch in SGLang's weight layout, ``train`` its training loop, ``score`` per-position acceptance against the
target's greedy decoding, ``cli`` the ``specdecode-runtime adapt`` command."""
