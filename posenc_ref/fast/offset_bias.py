r"""Biases that depend only on the offset j - i: one value per (head, offset) instead of (head, i, j).

ALiBi and T5 add to the logit of query position m and key position n a bias that depends on the relative
position r = n - m and the head h only:

.. math:: \text{ALiBi: } b_h(r) = -m_h |r|, \qquad \text{T5: } b_h(r) = \text{bias\_table}[\text{bucket}(r), h].

For q_len queries at positions ``offset + i`` and k_len keys at positions j, the index ``j - i`` runs over
``-(q_len - 1) .. k_len - 1``; :func:`bias_by_offset` returns the (heads, q_len + k_len - 1) vector whose
column ``t = j - i + q_len - 1`` holds :math:`b_h(j - i - \text{offset})`. A FlexAttention ``score_mod`` reads
one entry per logit; the SDPA fallback expands it to (heads, q_len, k_len).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from posenc_ref.relative import relative_position_bucket

BIAS_POSITIONS = ("alibi", "t5")


def bias_compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Biases are kept in float32 (float64 for float64 inputs): -m_h |r| reaches thousands, and a 16-bit
    float would round it to a step of 8 or more at |r| ~ 4096, changing the softmax."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def relative_offsets(q_len: int, k_len: int, offset: int, device: torch.device) -> torch.Tensor:
    """(q_len + k_len - 1,) int64: the relative position r = n - m for column t = j - i + q_len - 1."""
    return torch.arange(-(q_len - 1), k_len, device=device) - offset  # (q_len + k_len - 1,)


@functools.lru_cache(maxsize=64)
def offset_buckets(q_len: int, k_len: int, offset: int, bidirectional: bool, num_buckets: int, max_distance: int,
                   device: torch.device) -> torch.Tensor:
    """(q_len + k_len - 1,) T5 bucket of every offset column, computed once per shape and device (a dozen
    small device operations that would otherwise run on every call); the learned table is read per call."""
    offsets = relative_offsets(q_len, k_len, offset, device)  # (q_len + k_len - 1,)
    return relative_position_bucket(offsets, bidirectional=bidirectional, num_buckets=num_buckets,
                                    max_distance=max_distance)


def bias_by_offset(
    position: str, params: dict[str, Any], q_len: int, k_len: int, offset: int, *, dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """The (heads, q_len + k_len - 1) table of :math:`b_h(r)` for every offset (see the module docstring).

    ``params`` are the validated parameters of ``position`` ("alibi" or "t5"); the result is in
    :func:`bias_compute_dtype` of ``dtype`` and differentiable with respect to ``bias_table`` / ``slopes``.
    """
    compute = bias_compute_dtype(dtype)
    if position == "alibi":
        offsets = relative_offsets(q_len, k_len, offset, device)  # (q_len + k_len - 1,)
        slopes = params["slopes"].to(compute)  # (heads,)
        return -slopes[:, None] * offsets.abs().to(compute)[None, :]  # (heads, q_len + k_len - 1)
    if position == "t5":
        table = params["bias_table"]  # (num_buckets, heads)
        buckets = offset_buckets(q_len, k_len, offset, params["bidirectional"], table.shape[0],
                                 params["max_distance"], torch.device(device))
        return table.to(compute)[buckets].transpose(0, 1)  # (heads, q_len + k_len - 1)
    raise ValueError(f"position must be one of {BIAS_POSITIONS} for an offset bias, got {position!r}")


def expand_bias(bias_offsets: torch.Tensor, q_len: int, k_len: int) -> torch.Tensor:
    """(heads, q_len + k_len - 1) -> (heads, q_len, k_len), entry [h, i, j] = bias_offsets[h, j - i + q_len - 1]."""
    device = bias_offsets.device
    index = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
    return bias_offsets[:, index + (q_len - 1)]  # (heads, q_len, k_len)
