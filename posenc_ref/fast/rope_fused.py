r"""RoPE for attention: rotate queries and keys together, with the fused Triton kernel where it runs.

For a query at position m and a key at position n, every feature pair i is rotated by :math:`m\omega_i`
(queries) or :math:`n\omega_i` (keys), with cos and sin multiplied by the attention factor c -- the rotation
of :func:`posenc_ref.rope.apply_rope`. Pairs are (2i, 2i+1) in the "interleaved" layout and (i, i + d/2) in
the "half" layout.

Paths: the Triton kernel of :mod:`posenc_ref.fast.rope_triton` (one launch for q and k, float32 math, strided
input) on CUDA, or on CPU under ``TRITON_INTERPRET=1``; otherwise :func:`apply_rope_torch`. Autograd goes
through :class:`FusedRope`, whose backward is the inverse rotation: the gradient of :math:`c R(\theta) x`
is :math:`c R(-\theta) g`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from posenc_ref._checks import (
    check_choice,
    check_positions,
    check_positive_float,
    check_same_dtype_and_device,
    check_tensor,
)
from posenc_ref.fast.device import triton_runs_on
from posenc_ref.fast.threads import serial_unless_large
from posenc_ref.rope import ROPE_LAYOUTS, apply_rope

ROPE_IMPLEMENTATIONS = ("auto", "triton", "torch")
_TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_rope_arguments(q, k, inv_freq, q_positions, k_positions, layout, attention_factor) -> float:
    for name, x in (("q", q), ("k", k)):
        check_tensor(name, x, ndim=4, floating=True)
    check_same_dtype_and_device(q=q, k=k)
    head_dim = q.shape[-1]
    if head_dim % 2 or k.shape[-1] != head_dim:
        raise ValueError(
            f"q and k need one even head_dim (features rotate in pairs); got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if inv_freq.shape[0] != head_dim // 2:
        raise ValueError(f"inv_freq must have head_dim / 2 = {head_dim // 2} entries, got {inv_freq.shape[0]}")
    check_positions("q_positions", q_positions, q.shape[2])
    check_positions("k_positions", k_positions, k.shape[2])
    for name, tensor in (("inv_freq", inv_freq), ("q_positions", q_positions), ("k_positions", k_positions)):
        if tensor.device != q.device:
            raise ValueError(f"{name} is on {tensor.device} but q is on {q.device}; they must be on one device")
    check_choice("layout", layout, ROPE_LAYOUTS)
    return check_positive_float("attention_factor", attention_factor)


def apply_rope_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    layout: str = "interleaved",
    attention_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain-torch fallback of :func:`apply_rope_fused` (same signature and result, two passes).

    Rotates q at ``q_positions`` and k at ``k_positions`` with :func:`posenc_ref.rope.apply_rope`; autograd
    differentiates the torch ops directly.
    """
    attention_factor = _check_rope_arguments(q, k, inv_freq, q_positions, k_positions, layout, attention_factor)
    rotation = {"inv_freq": inv_freq, "layout": layout, "attention_factor": attention_factor}
    return apply_rope(q, q_positions, **rotation), apply_rope(k, k_positions, **rotation)


class FusedRope(torch.autograd.Function):
    """Autograd wrapper of the Triton kernel: forward rotates by +angle, backward by -angle (times c)."""

    @staticmethod
    def forward(ctx: Any, q, k, inv_freq, q_positions, k_positions, interleaved: bool, attention_factor: float):
        from posenc_ref.fast.rope_triton import rotate_query_key

        ctx.save_for_backward(inv_freq, q_positions, k_positions)
        ctx.interleaved, ctx.attention_factor = interleaved, attention_factor
        return rotate_query_key(q, k, inv_freq, q_positions, k_positions, interleaved=interleaved,
                                attention_factor=attention_factor)

    @staticmethod
    def backward(ctx: Any, grad_q: torch.Tensor, grad_k: torch.Tensor):
        from posenc_ref.fast.rope_triton import rotate_query_key

        inv_freq, q_positions, k_positions = ctx.saved_tensors
        grad_q, grad_k = rotate_query_key(grad_q, grad_k, inv_freq, q_positions, k_positions,
                                          interleaved=ctx.interleaved, attention_factor=ctx.attention_factor,
                                          sign=-1.0)
        return grad_q, grad_k, None, None, None, None, None


def rotate_without_autograd(
    q: torch.Tensor,
    k: torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    query_offset: int,
    layout: str,
    attention_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""RoPE for attention in inference, in as few passes over q and k as torch allows (arguments checked).

    Queries sit at positions ``query_offset + i``, keys at j. Each pair (a, b) at position p becomes
    :math:`c\,(a \cos p\omega_i - b \sin p\omega_i,\ a \sin p\omega_i + b \cos p\omega_i)`, the product of
    :math:`a + \mathrm{i} b` with the rotor :math:`c\, e^{\mathrm{i} p \omega_i}`:

    - "interleaved" (pairs (2i, 2i+1), adjacent in memory): x read as complex numbers, one complex product
      with the rotors, one pass that writes the result;
    - "half" (pairs (i, i + d/2)): :math:`x' = x \odot C` with C = (c cos, c cos), then the two halves
      :math:`x'_{<} \mathrel{-}= x_{>} \odot c \sin` and :math:`x'_{>} \mathrel{+}= x_{<} \odot c \sin`,
      no copy of x.

    The rotors and tables are kept per frequencies (by value), positions and factor. The passes run on one
    thread when they are small (see :mod:`posenc_ref.fast.threads`: on a busy CPU each parallel pass waits
    for the pool's other threads longer than it works). Same result as :func:`apply_rope_torch` up to
    rounding; no autograd.

    Returns (q_rot, k_rot), contiguous, in q's dtype.
    """
    angle_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    frequencies = tuple(inv_freq.tolist()) if inv_freq.device.type == "cpu" else inv_freq
    rotated = []
    with serial_unless_large(q.device, max(q.numel(), k.numel())):
        for x, first_position in ((q, query_offset), (k, 0)):
            tables = _rotation_tables(frequencies, first_position, x.shape[2], float(attention_factor), layout,
                                      angle_dtype, q.device)
            rotated.append(_rotate(x.to(angle_dtype), layout, tables).to(q.dtype))
    return rotated[0], rotated[1]


def _rotate(x: torch.Tensor, layout: str, tables: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """x (..., seq, head_dim) rotated with the tables of :func:`_build_rotation_tables`; a new contiguous tensor."""
    if layout == "interleaved":
        (rotors,) = tables  # (seq, head_dim/2) complex
        pairs = x.unflatten(-1, (-1, 2))  # (..., seq, head_dim/2, 2)
        if pairs.stride(-1) != 1 or pairs.storage_offset() % 2 or any(step % 2 for step in pairs.stride()[:-1]):
            pairs = pairs.contiguous()  # a complex view needs (real, imaginary) adjacent and aligned
        out = torch.empty(pairs.shape[:-1], dtype=rotors.dtype, device=x.device)  # contiguous, whatever x is
        return torch.view_as_real(torch.mul(torch.view_as_complex(pairs), rotors, out=out)).flatten(-2)
    cos_full, sin = tables  # (seq, head_dim), (seq, head_dim/2)
    half = x.shape[-1] // 2
    out = torch.mul(x, cos_full, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))  # (..., seq, head_dim)
    out[..., :half].addcmul_(x[..., half:], sin, value=-1.0)
    out[..., half:].addcmul_(x[..., :half], sin)
    return out


def _rotation_tables(frequencies, first_position: int, length: int, attention_factor: float, layout: str,
                     dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The tables of :func:`_rotate` for positions first_position .. + length; ``frequencies`` a tuple of
    floats (kept per value: see :func:`_cached_rotation_tables`) or a tensor (computed each time)."""
    if isinstance(frequencies, tuple):
        return _cached_rotation_tables(frequencies, first_position, length, attention_factor, layout, dtype,
                                       device)
    return _build_rotation_tables(frequencies, first_position, length, attention_factor, layout, dtype)


def _build_rotation_tables(inv_freq: torch.Tensor, first_position: int, length: int, attention_factor: float,
                           layout: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """"interleaved": (rotors,), c e^{i p omega} complex (length, head_dim/2); "half": (C, c sin), C
    (length, head_dim) = (c cos, c cos) and c sin (length, head_dim/2)."""
    positions = torch.arange(first_position, first_position + length, device=inv_freq.device)  # (length,)
    angles = positions.to(dtype)[:, None] * inv_freq.to(dtype)[None, :]  # (length, head_dim/2)
    cos, sin = angles.cos() * attention_factor, angles.sin() * attention_factor
    if layout == "interleaved":
        return (torch.complex(cos, sin),)  # (length, head_dim/2)
    return torch.cat((cos, cos), dim=-1), sin  # (length, head_dim), (length, head_dim/2)


@functools.lru_cache(maxsize=8)
def _cached_rotation_tables(frequencies: tuple[float, ...], first_position: int, length: int,
                            attention_factor: float, layout: str, dtype: torch.dtype, device: torch.device
                            ) -> tuple[torch.Tensor, ...]:
    """The tables for frequencies given by value (a tuple of floats, read from a CPU tensor): a call with the
    same frequencies, positions and factor reuses them; a changed frequency is a new key."""
    inv_freq = torch.tensor(frequencies, dtype=torch.float64, device=device)
    return _build_rotation_tables(inv_freq, first_position, length, attention_factor, layout, dtype)


def rope_implementation(q: torch.Tensor, implementation: str = "auto") -> str:
    """Resolve ``implementation`` ("auto", "triton", "torch") for q: "triton" or "torch".

    "auto" picks Triton when it runs on q's device (see :func:`posenc_ref.fast.device.triton_runs_on`) and
    q's dtype is float32, float16 or bfloat16 (the kernel computes in float32; float64 stays in torch).

    Raises:
        ValueError: unknown ``implementation``, or "triton" where the kernel cannot run.
    """
    check_choice("implementation", implementation, ROPE_IMPLEMENTATIONS)
    triton_ok = q.dtype in _TRITON_DTYPES and triton_runs_on(q.device)
    if implementation == "triton" and not triton_ok:
        raise ValueError(
            f"implementation='triton' cannot run for {q.dtype} on {q.device}: the kernel needs float32/16 or "
            "bfloat16 on CUDA, or TRITON_INTERPRET=1 set before import on CPU; use 'auto' or 'torch'"
        )
    if implementation == "auto":
        return "triton" if triton_ok else "torch"
    return implementation


def apply_rope_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    layout: str = "interleaved",
    attention_factor: float = 1.0,
    implementation: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Rotate q at positions m and k at positions n in one kernel launch; differentiable.

    For each pair i of a row at position p: :math:`(a, b) \mapsto c\,(a\cos p\omega_i - b\sin p\omega_i,\;
    a\sin p\omega_i + b\cos p\omega_i)` with :math:`\omega` = ``inv_freq`` and c = ``attention_factor``;
    the same result as :func:`posenc_ref.rope.apply_rope` applied to q and to k.

    Args:
        q: (batch, heads, q_len, head_dim), k: (batch', heads', k_len, head_dim); one floating dtype and
            device, any strides.
        inv_freq: (head_dim/2,) floating frequencies.
        q_positions, k_positions: 1-D integer tensors (q_len,) and (k_len,) of positions >= 0.
        layout: "interleaved" (pairs (2i, 2i+1)) or "half" (pairs (i, i + d/2)).
        attention_factor: c > 0, multiplying cos and sin.
        implementation: "auto", "triton" or "torch" (see :func:`rope_implementation`).

    Returns:
        (q_rot, k_rot), contiguous, in q's dtype.

    Raises:
        TypeError, ValueError: bad shapes, dtypes, devices, positions, layout or factor (named); "triton"
        where the kernel cannot run; ``inv_freq`` requiring grad on the Triton path (the kernel has no
        gradient for the frequencies).
    """
    attention_factor = _check_rope_arguments(q, k, inv_freq, q_positions, k_positions, layout, attention_factor)
    return rotate_checked(q, k, inv_freq, q_positions=q_positions, k_positions=k_positions, layout=layout,
                          attention_factor=attention_factor, implementation=implementation)


def rotate_checked(q, k, inv_freq, *, q_positions, k_positions, layout, attention_factor, implementation):
    """:func:`apply_rope_fused` for arguments already checked (by it, or by ``fast_attention``, which builds
    the positions itself): checking that positions are >= 0 reads them back from the device, a
    synchronization that would stall every call on a GPU."""
    if rope_implementation(q, implementation) == "torch":
        return apply_rope_torch(q, k, inv_freq, q_positions=q_positions, k_positions=k_positions, layout=layout,
                                attention_factor=attention_factor)
    if torch.is_grad_enabled() and inv_freq.requires_grad:
        raise ValueError("inv_freq requires grad, but the Triton RoPE path has no gradient for the frequencies; "
                         "detach it or use implementation='torch'")
    return FusedRope.apply(q, k, inv_freq, q_positions, k_positions, layout == "interleaved", attention_factor)
