"""Torch implementations of the normalisation and gated-activation ops of sgl_kernel 0.4.10.

Signatures, in-place semantics and argument checks follow the real ``sgl_kernel.elementwise``; the arithmetic runs in
float32 and is cast back once, as the real kernels do. ``enable_pdl`` is accepted and ignored (it is a launch hint).
"""

import torch
import torch.nn.functional as F


def _rms_scaled(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float) -> torch.Tensor:
    x32 = x.float()
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return x32 * inv_rms * (weight.float() + weight_offset)


def _write(result32: torch.Tensor, like: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return result32.to(like.dtype)
    out.copy_(result32)
    return out


def rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    enable_pdl: bool | None = None,
) -> torch.Tensor:
    """``out[i] = input[i] / RMS(input) * weight[i]``."""
    return _write(_rms_scaled(input, weight, eps, 0.0), input, out)


def fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: bool | None = None,
) -> None:
    """In place: ``residual += input``, then ``input = residual / RMS(residual) * weight``."""
    summed = residual.float() + input.float()
    residual.copy_(summed)
    input.copy_(_rms_scaled(summed, weight, eps, 0.0))


def gemma_rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    enable_pdl: bool | None = None,
) -> torch.Tensor:
    """``out[i] = input[i] / RMS(input) * (weight[i] + 1)``."""
    return _write(_rms_scaled(input, weight, eps, 1.0), input, out)


def gemma_fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: bool | None = None,
) -> None:
    """In place: ``residual += input``, then ``input = residual / RMS(residual) * (weight + 1)``."""
    summed = residual.float() + input.float()
    residual.copy_(summed)
    input.copy_(_rms_scaled(summed, weight, eps, 1.0))


def _check_shape(input: torch.Tensor, output: torch.Tensor) -> None:
    assert input.ndim == output.ndim, f"{input.ndim} != {output.ndim}"
    assert input.shape[:-1] == output.shape[:-1], f"{input.shape[:-1]} != {output.shape[:-1]}"
    assert input.shape[-1] == 2 * output.shape[-1], f"{input.shape[-1]} != {2 * output.shape[-1]}"


def _gated(input: torch.Tensor, out: torch.Tensor | None, activation) -> torch.Tensor:
    if input.shape[-1] * input.dtype.itemsize % 16 != 0:
        raise ValueError("The pointers must be multiple of 16 bytes.")
    if out is not None:
        _check_shape(input, out)
    half = input.shape[-1] // 2
    result32 = activation(input[..., :half].float()) * input[..., half:].float()
    return _write(result32, input, out)


def silu_and_mul(input: torch.Tensor, out: torch.Tensor = None) -> torch.Tensor:
    """``silu(input[..., :d]) * input[..., d:]`` with ``d = input.shape[-1] // 2``."""
    return _gated(input, out, F.silu)


def gelu_tanh_and_mul(input: torch.Tensor, out: torch.Tensor = None) -> torch.Tensor:
    """``gelu_tanh(input[..., :d]) * input[..., d:]``."""
    return _gated(input, out, lambda x: F.gelu(x, approximate="tanh"))


def gelu_and_mul(input: torch.Tensor, out: torch.Tensor = None) -> torch.Tensor:
    """``gelu(input[..., :d]) * input[..., d:]`` (erf form)."""
    return _gated(input, out, F.gelu)
