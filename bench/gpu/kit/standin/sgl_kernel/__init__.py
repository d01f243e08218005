"""Torch stand-in for ``sgl_kernel`` (sglang-kernel 0.4.10) on GPU machines whose torch the real wheel cannot load.

On CUDA with ``--attention-backend triton --sampling-backend pytorch``, SGLang 0.5.23 reaches ``sgl_kernel`` only for
RMSNorm, the gated activations and a few helpers; those are implemented here in plain torch. Any other op raises
``NotImplementedError`` naming it when called, so a run that strays onto a kernel the stand-in lacks stops at that op
instead of computing something else. Looking the name up succeeds: SGLang imports many ops at module level on CUDA
(``from sgl_kernel import int8_scaled_mm`` in quantization schemes a bf16 model never uses). ``scalar_type.py`` and ``utils.py`` are the real package's pure-Python modules (Apache-2.0).
"""

from ._missing import missing_op
from .elementwise import (
    fused_add_rmsnorm,
    gelu_and_mul,
    gelu_tanh_and_mul,
    gemma_fused_add_rmsnorm,
    gemma_rmsnorm,
    rmsnorm,
    silu_and_mul,
)
from .memory import weak_ref_tensor
from .sampling import top_k_renorm_prob, top_k_renorm_probs, top_p_renorm_prob, top_p_renorm_probs
from .version import __version__

STANDIN = True


def __getattr__(name: str):
    return missing_op(__name__, name)
