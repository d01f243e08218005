"""The GPU test bed's torch stand-in for sgl_kernel computes what the real ops compute.

The stand-in is loaded from ``bench/gpu/kit/standin`` under a private module name, so it never shadows a real
``sgl_kernel`` and stays out of the runtime's import path. Each op is checked on the CPU against a plain torch
reference written from the op's documented formula.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

STANDIN_DIR = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "kit" / "standin" / "sgl_kernel"
# bf16 keeps 8 mantissa bits: one rounding of a value near 4 is 2**-6; float32 agrees up to summation order.
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=1.6e-2)}
DTYPES = list(TOLERANCE)


@pytest.fixture(scope="module")
def sk():
    name = "_sgl_kernel_standin_under_test"
    spec = importlib.util.spec_from_file_location(
        name, STANDIN_DIR / "__init__.py", submodule_search_locations=[str(STANDIN_DIR)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def _inputs(dtype, rows=5, hidden=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, hidden, generator=g) * 3).to(dtype)
    residual = torch.randn(rows, hidden, generator=g).to(dtype)
    weight = (torch.rand(hidden, generator=g) + 0.5).to(dtype)
    return x, residual, weight


def _ref_rmsnorm(x, weight, eps, offset=0.0):
    x32 = x.float()
    return (x32 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * (weight.float() + offset)).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
def test_rmsnorm_matches_formula_and_fills_out(sk, dtype, gemma):
    x, _, weight = _inputs(dtype)
    op = sk.gemma_rmsnorm if gemma else sk.rmsnorm
    expected = _ref_rmsnorm(x, weight, 1e-6, 1.0 if gemma else 0.0)
    got = op(x, weight, 1e-6)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    out = torch.empty_like(x)
    returned = op(x, weight, 1e-6, out=out)
    assert returned is out
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
def test_fused_add_rmsnorm_updates_both_tensors_in_place(sk, dtype, gemma):
    x, residual, weight = _inputs(dtype, seed=1)
    expected_residual = (residual.float() + x.float()).to(dtype)
    expected_x = _ref_rmsnorm(residual.float() + x.float(), weight, 1e-5, 1.0 if gemma else 0.0).to(dtype)
    op = sk.gemma_fused_add_rmsnorm if gemma else sk.fused_add_rmsnorm
    x_ptr, r_ptr = x.data_ptr(), residual.data_ptr()
    assert op(x, residual, weight, 1e-5) is None
    assert (x.data_ptr(), residual.data_ptr()) == (x_ptr, r_ptr)
    torch.testing.assert_close(residual, expected_residual, **TOLERANCE[dtype])
    torch.testing.assert_close(x, expected_x, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "name,activation",
    [
        ("silu_and_mul", F.silu),
        ("gelu_and_mul", F.gelu),
        ("gelu_tanh_and_mul", lambda t: F.gelu(t, approximate="tanh")),
    ],
)
def test_gated_activations(sk, dtype, name, activation):
    x, _, _ = _inputs(dtype, rows=3, hidden=128, seed=2)
    x = x.reshape(3, 1, 128)
    expected = (activation(x[..., :64].float()) * x[..., 64:].float()).to(dtype)
    op = getattr(sk, name)
    got = op(x)
    assert got.shape == (3, 1, 64) and got.dtype == dtype
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    out = torch.empty(3, 1, 64, dtype=dtype)
    assert op(x, out) is out
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])


def test_gated_activation_rejects_unaligned_width(sk):
    with pytest.raises(ValueError, match="16 bytes"):
        sk.silu_and_mul(torch.zeros(2, 6))


def _probs(rows=4, vocab=32, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, vocab, generator=g) * 2, dim=-1)


def _ref_top_k(row, k):
    kept = torch.zeros_like(row)
    idx = row.topk(k).indices
    kept[idx] = row[idx]
    return kept / kept.sum()


def _ref_top_p(row, p):
    kept = torch.zeros_like(row)
    mass = 0.0
    for i in row.argsort(descending=True).tolist():
        kept[i] = row[i]
        mass += float(row[i])
        if mass >= p:
            break
    return kept / kept.sum()


@pytest.mark.parametrize("per_row", [False, True])
def test_top_k_renorm_prob(sk, per_row):
    probs = _probs()
    ks = [1, 3, 7, 32]
    top_k = torch.tensor(ks, dtype=torch.int32) if per_row else 3
    got = sk.top_k_renorm_prob(probs, top_k)
    assert got.dtype == torch.float32
    for r in range(probs.shape[0]):
        k = ks[r] if per_row else 3
        torch.testing.assert_close(got[r], _ref_top_k(probs[r], k))
        assert int((got[r] > 0).sum()) == k


@pytest.mark.parametrize("per_row", [False, True])
def test_top_p_renorm_prob(sk, per_row):
    probs = _probs(seed=4)
    ps = [0.05, 0.5, 0.9, 0.999]
    top_p = torch.tensor(ps) if per_row else 0.5
    got = sk.top_p_renorm_prob(probs.to(torch.bfloat16).float(), top_p)
    ref_probs = probs.to(torch.bfloat16).float()
    for r in range(probs.shape[0]):
        torch.testing.assert_close(got[r], _ref_top_p(ref_probs[r], ps[r] if per_row else 0.5))
    torch.testing.assert_close(got.sum(-1), torch.ones(probs.shape[0]))


def test_weak_ref_tensor_is_identity(sk):
    t = torch.arange(4.0)
    assert sk.weak_ref_tensor(t) is t
    assert sk.weak_ref_tensor(3) == 3


def test_version_matches_the_real_wheel(sk):
    assert sk.__version__ == "0.4.10"


def test_missing_op_imports_but_raises_not_implemented_naming_it_when_called(sk):
    # SGLang imports ops at module level that a bf16 model never calls: the import must succeed, the call must not.
    merge_state_v2 = sk.merge_state_v2
    with pytest.raises(NotImplementedError, match="merge_state_v2"):
        merge_state_v2(1, 2)
    with pytest.raises(NotImplementedError, match="fp8_scaled_mm"):
        sk.fp8_scaled_mm()
    # Dunder probes keep Python's contract so copy/pickle/inspect behave.
    assert not hasattr(sk, "__wrapped__")
