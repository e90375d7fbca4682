r"""One Triton launch that rotates queries and keys for RoPE.

For a row x at position m (a query at ``q_positions[i]`` or a key at ``k_positions[j]``) and each pair
i = (a, b) -- features (2i, 2i+1) in the "interleaved" layout, (i, i + d/2) in the "half" layout:

.. math::

    a' = c\,(a \cos m\omega_i - \sigma\, b \sin m\omega_i), \qquad
    b' = c\,(\sigma\, a \sin m\omega_i + b \cos m\omega_i),

with c the attention factor and :math:`\sigma = +1` (forward) or :math:`-1` (the inverse rotation, used by
the backward pass: the gradient of :math:`c R(\theta) x` is :math:`c R(-\theta) g`). Angles, cos, sin and
the products are float32; the result is stored in the input dtype.

The cos and sin of an angle depend on the position and the pair only, not on the batch element or the
head: one program takes a block of ``BLOCK_SEQ`` positions and up to ``HEADS_PER_PROGRAM`` heads of one batch
element, computes the (BLOCK_SEQ, d/2) cos/sin tile once and rotates every head with it. Rows are read and
written whole (contiguous along head_dim when the input is), and the interleaved pairs are separated in
registers (reshape and split), so the loads stay wide. The first programs of the second grid axis take q,
the rest k: both tensors are rotated in one launch. Inputs are read through their strides (no
``.contiguous()`` copy); outputs are new contiguous tensors unless ``out`` is given.

``triton.jit`` decides at import time whether it compiles or interprets (``TRITON_INTERPRET=1`` makes the
kernel run on CPU tensors through Triton's interpreter, which is how the CPU tests run this very code).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_ELEMENTS_PER_TILE = 4096  # BLOCK_SEQ * padded head_dim: 8 KiB of bf16 per head, a few registers per thread
_HEADS_PER_PROGRAM = 8  # heads rotated with one cos/sin tile


@triton.jit
def _rotate_tile(
    x_ptr, out_ptr, positions_ptr, inv_freq_ptr, batch_index, head_start, heads, seq_start, seq,
    x_stride_b, x_stride_h, x_stride_s, x_stride_d,
    out_stride_b, out_stride_h, out_stride_s, out_stride_d,
    positions_stride, attention_factor, sign,
    HALF: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK_SEQ: tl.constexpr, HEADS_PER_PROGRAM: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    s = seq_start + tl.arange(0, BLOCK_SEQ)  # (BLOCK_SEQ,)
    s_ok = s < seq
    pair = tl.arange(0, HALF_BLOCK)  # (HALF_BLOCK,)
    pair_ok = pair < HALF
    position = tl.load(positions_ptr + s * positions_stride, mask=s_ok, other=0).to(tl.float32)  # (BLOCK_SEQ,)
    inv_freq = tl.load(inv_freq_ptr + pair, mask=pair_ok, other=0.0).to(tl.float32)  # (HALF_BLOCK,)
    angle = position[:, None] * inv_freq[None, :]  # (BLOCK_SEQ, HALF_BLOCK)
    cos = tl.cos(angle) * attention_factor
    sin = tl.sin(angle) * (attention_factor * sign)
    out_type = out_ptr.dtype.element_ty
    s64 = s.to(tl.int64)
    x_rows = x_ptr + batch_index * x_stride_b + s64[:, None] * x_stride_s  # (BLOCK_SEQ, 1) pointers
    out_rows = out_ptr + batch_index * out_stride_b + s64[:, None] * out_stride_s
    head_stop = tl.minimum(head_start + HEADS_PER_PROGRAM, heads)
    x_head = x_rows + head_start.to(tl.int64) * x_stride_h  # advanced by one head per iteration
    out_head = out_rows + head_start.to(tl.int64) * out_stride_h
    for _ in range(head_start, head_stop):
        if INTERLEAVED:
            feature = tl.arange(0, 2 * HALF_BLOCK)  # (2 * HALF_BLOCK,)
            ok = s_ok[:, None] & (feature < 2 * HALF)[None, :]  # (BLOCK_SEQ, 2 * HALF_BLOCK)
            x = tl.load(x_head + feature[None, :] * x_stride_d, mask=ok, other=0.0).to(tl.float32)
            first, second = tl.split(tl.reshape(x, (BLOCK_SEQ, HALF_BLOCK, 2)))  # (BLOCK_SEQ, HALF_BLOCK) each
            rotated = tl.join(first * cos - second * sin, first * sin + second * cos)  # (BLOCK_SEQ, HALF_BLOCK, 2)
            rotated = tl.reshape(rotated, (BLOCK_SEQ, 2 * HALF_BLOCK))
            tl.store(out_head + feature[None, :] * out_stride_d, rotated.to(out_type), mask=ok)
        else:
            ok = s_ok[:, None] & pair_ok[None, :]  # (BLOCK_SEQ, HALF_BLOCK)
            first = tl.load(x_head + pair[None, :] * x_stride_d, mask=ok, other=0.0).to(tl.float32)
            second = tl.load(x_head + (pair + HALF)[None, :] * x_stride_d, mask=ok, other=0.0).to(tl.float32)
            tl.store(out_head + pair[None, :] * out_stride_d, (first * cos - second * sin).to(out_type), mask=ok)
            tl.store(out_head + (pair + HALF)[None, :] * out_stride_d, (first * sin + second * cos).to(out_type),
                     mask=ok)
        x_head += x_stride_h
        out_head += out_stride_h


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, q_positions_ptr, k_positions_ptr, inv_freq_ptr,
    q_heads, k_heads, q_seq, k_seq, q_head_groups, k_head_groups, q_tiles,
    q_stride_b, q_stride_h, q_stride_s, q_stride_d,
    k_stride_b, k_stride_h, k_stride_s, k_stride_d,
    qo_stride_b, qo_stride_h, qo_stride_s, qo_stride_d,
    ko_stride_b, ko_stride_h, ko_stride_s, ko_stride_d,
    q_positions_stride, k_positions_stride, attention_factor, sign,
    HALF: tl.constexpr, HALF_BLOCK: tl.constexpr, BLOCK_SEQ: tl.constexpr, HEADS_PER_PROGRAM: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    seq_start = tl.program_id(0) * BLOCK_SEQ
    tile = tl.program_id(1)  # q tiles first: (batch, head group) of q, then of k
    if tile < q_tiles:
        if seq_start < q_seq:
            _rotate_tile(
                q_ptr, q_out_ptr, q_positions_ptr, inv_freq_ptr, (tile // q_head_groups).to(tl.int64),
                (tile % q_head_groups) * HEADS_PER_PROGRAM, q_heads, seq_start, q_seq,
                q_stride_b, q_stride_h, q_stride_s, q_stride_d,
                qo_stride_b, qo_stride_h, qo_stride_s, qo_stride_d,
                q_positions_stride, attention_factor, sign,
                HALF, HALF_BLOCK, BLOCK_SEQ, HEADS_PER_PROGRAM, INTERLEAVED,
            )
    else:
        tile = tile - q_tiles
        if seq_start < k_seq:
            _rotate_tile(
                k_ptr, k_out_ptr, k_positions_ptr, inv_freq_ptr, (tile // k_head_groups).to(tl.int64),
                (tile % k_head_groups) * HEADS_PER_PROGRAM, k_heads, seq_start, k_seq,
                k_stride_b, k_stride_h, k_stride_s, k_stride_d,
                ko_stride_b, ko_stride_h, ko_stride_s, ko_stride_d,
                k_positions_stride, attention_factor, sign,
                HALF, HALF_BLOCK, BLOCK_SEQ, HEADS_PER_PROGRAM, INTERLEAVED,
            )


def kernel_is_interpreted() -> bool:
    """True when this module's kernel runs through Triton's CPU interpreter (TRITON_INTERPRET=1 at import)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_rope_kernel, InterpretedFunction)


def rotate_query_key(
    q: torch.Tensor,
    k: torch.Tensor,
    inv_freq: torch.Tensor,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    *,
    interleaved: bool,
    attention_factor: float,
    sign: float = 1.0,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel once for q and k; arguments are assumed checked (see ``rope_fused``).

    q (batch, heads, q_len, head_dim) and k (batch', heads', k_len, head_dim) in one of ``TRITON_DTYPES``;
    positions 1-D integer (q_len,) and (k_len,); ``sign=-1`` applies the inverse rotation.
    Returns (q_rot, k_rot) in the input dtype: new contiguous tensors, or ``out`` (any strides, the shapes
    and dtypes of q and k) written in place.
    """
    batch, heads, q_len, head_dim = q.shape
    k_batch, k_heads, k_len = k.shape[:3]
    if out is None:
        out = (torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(k.shape, dtype=k.dtype, device=k.device))
    q_out, k_out = out  # (batch, heads, q_len, head_dim), (batch, heads, k_len, head_dim)
    inv_freq = inv_freq.contiguous()  # (head_dim/2,): the kernel reads it with unit stride; tiny if copied
    half = head_dim // 2
    half_block = triton.next_power_of_2(half)
    block_seq = max(1, min(triton.next_power_of_2(max(q_len, k_len)), _ELEMENTS_PER_TILE // (2 * half_block)))
    q_head_groups = triton.cdiv(heads, _HEADS_PER_PROGRAM)
    k_head_groups = triton.cdiv(k_heads, _HEADS_PER_PROGRAM)
    q_tiles = batch * q_head_groups
    grid = (triton.cdiv(max(q_len, k_len), block_seq), q_tiles + k_batch * k_head_groups)
    _rope_kernel[grid](
        q, k, q_out, k_out, q_positions, k_positions, inv_freq,
        heads, k_heads, q_len, k_len, q_head_groups, k_head_groups, q_tiles,
        *q.stride(), *k.stride(), *q_out.stride(), *k_out.stride(),
        q_positions.stride(0), k_positions.stride(0), float(attention_factor), float(sign),
        HALF=half, HALF_BLOCK=half_block, BLOCK_SEQ=block_seq, HEADS_PER_PROGRAM=_HEADS_PER_PROGRAM,
        INTERLEAVED=interleaved,
    )
    return q_out, k_out
