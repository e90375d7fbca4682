r"""``torch.nn.functional.scaled_dot_product_attention`` with the course's position conventions.

Logits :math:`s\,q_i \cdot k_j + B_{ij}` (the bias, when given, is added after scaling), softmax over the
allowed keys, output :math:`W V`. Query i sits at position ``offset + i``, key j at j; causal allows
``j <= offset + i``. SDPA's own ``is_causal`` aligns the mask top-left (``j <= i``), which is the course's
rule only when ``offset == 0``; other offsets get an explicit mask, and when every key is visible to every
query (``offset >= k_len - 1``, e.g. one decoding step) no mask at all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc_ref.fast.offset_bias import bias_compute_dtype, expand_bias


def causal_allowed(q_len: int, k_len: int, offset: int, device: torch.device) -> torch.Tensor:
    """(q_len, k_len) bool, True where key position j <= query position offset + i."""
    query_positions = torch.arange(offset, offset + q_len, device=device)  # (q_len,)
    return torch.arange(k_len, device=device)[None, :] <= query_positions[:, None]  # (q_len, k_len)


def _causal_arguments(q_len: int, k_len: int, offset: int, causal: bool, device) -> dict:
    """SDPA keyword arguments for the causal rule: nothing, ``is_causal=True`` or an explicit bool mask."""
    if not causal or offset >= k_len - 1:
        return {}
    if offset == 0:
        return {"is_causal": True}
    return {"attn_mask": causal_allowed(q_len, k_len, offset, device)}


def sdpa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float, offset: int
) -> torch.Tensor:
    """softmax(s q k^T) v by SDPA (flash or memory-efficient kernels where they apply).

    q (batch, heads, q_len, head_dim), k and v (batch, heads, k_len, head_dim); returns
    (batch, heads, q_len, head_dim) in q's dtype.
    """
    masking = _causal_arguments(q.shape[2], k.shape[2], offset, causal, q.device)
    return F.scaled_dot_product_attention(q, k, v, scale=scale, **masking)


def sdpa_bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias_offsets: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    offset: int,
) -> torch.Tensor:
    """The fallback for offset biases: materialize B (heads, q_len, k_len) and pass it to SDPA as attn_mask.

    ``bias_offsets`` is (heads, q_len + k_len - 1) (see :mod:`posenc_ref.fast.offset_bias`); masked keys get
    ``-inf``. Half-precision inputs are computed in float32, because a 16-bit bias would be rounded (see
    :func:`posenc_ref.fast.offset_bias.bias_compute_dtype`). Supports autograd on every device; memory grows
    as heads * q_len * k_len.
    """
    q_len, k_len = q.shape[2], k.shape[2]
    compute = bias_compute_dtype(q.dtype)
    bias = expand_bias(bias_offsets.to(compute), q_len, k_len)  # (heads, q_len, k_len)
    if causal and offset < k_len - 1:
        bias = bias.masked_fill(~causal_allowed(q_len, k_len, offset, q.device), float("-inf"))
    out = F.scaled_dot_product_attention(q.to(compute), k.to(compute), v.to(compute), attn_mask=bias, scale=scale)
    return out.to(q.dtype)  # (batch, heads, q_len, head_dim)
