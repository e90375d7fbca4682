r"""Shaw et al.'s relative attention without the (q_len, k_len, head_dim) tensors.

With the clipped index :math:`c_{ij} = \operatorname{clip}(n_j - m_i, -k, k) + k` into the tables
:math:`a^K, a^V` of 2k+1 rows,

.. math::

    e_{ij} = s\,(q_i \cdot k_j + q_i \cdot a^K_{c_{ij}}), \qquad
    z_i = \sum_j w_{ij} v_j + \sum_j w_{ij} a^V_{c_{ij}}, \qquad w = \operatorname{softmax}_j(e).

Both relative terms only need the 2k+1 table rows:

- :math:`q_i \cdot a^K_c` for every c is one product :math:`Q (a^K)^\top` of shape (q, 2k+1), then
  gathered at :math:`c_{ij}`;
- :math:`\sum_j w_{ij} a^V_{c_{ij}} = \sum_c \big(\sum_{j: c_{ij} = c} w_{ij}\big) a^V_c`: the weights are
  summed per bucket, giving (q, 2k+1), then multiplied by :math:`a^V`. The keys of bucket c form one
  contiguous range of j (everything at or before m - k for c = 0, the single key m + c - k in between,
  everything at or after m + k for c = 2k), so each bucket sum is a difference of two prefix sums of the
  weights.

Queries are processed in chunks so that only (batch, heads, chunk, k_len) tensors are alive at once; with
``causal`` a chunk only reads the keys its last query can see. Plain torch ops, so autograd works on every
device. Softmax and the bucket sums are float32 for 16-bit inputs.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 21  # batch * heads * chunk * k_len per chunk: 8 MiB of float32 logits


def _chunk_size(batch_heads: int, k_len: int, chunk_elements: int) -> int:
    return max(1, chunk_elements // max(1, batch_heads * k_len))


def _bucket_boundaries(query_positions: torch.Tensor, max_distance: int, keys: int) -> torch.Tensor:
    """(chunk, 2k+2) int64: bucket c of query m covers keys [B_c, B_{c+1}), clamped to [0, keys].

    B_0 = 0, B_c = m + c - k for c = 1..2k, B_{2k+1} = keys.
    """
    buckets = torch.arange(1, 2 * max_distance + 1, device=query_positions.device)  # (2k,)
    inner = query_positions[:, None] + buckets[None, :] - max_distance  # (chunk, 2k)
    first = inner.new_zeros(inner.shape[0], 1)  # not zeros_like(inner[:, :1]): inner is empty when k = 0
    last = inner.new_full((inner.shape[0], 1), keys)
    return torch.cat((first, inner, last), dim=1).clamp(0, keys)  # (chunk, 2k+2)


def _chunk_attention(q_chunk, k, v, rel_k_table, rel_v_table, query_positions, *, causal, scale):
    """Shaw attention for one chunk of queries at ``query_positions`` against keys 0..k_len-1."""
    batch, heads, chunk, _ = q_chunk.shape
    keys = k.shape[2]
    max_distance = (rel_k_table.shape[0] - 1) // 2
    compute = torch.float64 if q_chunk.dtype == torch.float64 else torch.float32
    key_positions = torch.arange(keys, device=q_chunk.device)  # (keys,)
    offsets = key_positions[None, :] - query_positions[:, None]  # (chunk, keys)
    index = offsets.clamp(-max_distance, max_distance) + max_distance  # (chunk, keys)

    # Peak memory matters here: results overwrite their inputs in place and names are reused, so that at
    # most two (batch, heads, chunk, keys) tensors are alive at once under no_grad.
    q_scaled = q_chunk * scale  # (batch, heads, chunk, head_dim)
    relative = (q_scaled @ rel_k_table.transpose(0, 1)).to(compute)  # (batch, heads, chunk, 2k+1)
    logits = (q_scaled @ k.transpose(-2, -1)).to(compute)  # (batch, heads, chunk, keys)
    logits.add_(relative.gather(-1, index.expand(batch, heads, chunk, keys)))
    if causal:
        logits.masked_fill_(offsets > 0, float("-inf"))
    weights = torch.softmax(logits, dim=-1)  # (batch, heads, chunk, keys)
    del logits

    # prefix[b] = sum of the weights of keys < b, read from the inclusive cumulative sum at b - 1.
    cumulative = weights.cumsum(-1)  # (batch, heads, chunk, keys)
    bounds = _bucket_boundaries(query_positions, max_distance, keys)  # (chunk, 2k+2)
    at_bounds = cumulative.gather(-1, (bounds - 1).clamp(min=0).expand(batch, heads, chunk, bounds.shape[1]))
    at_bounds = at_bounds.masked_fill(bounds == 0, 0.0)  # (batch, heads, chunk, 2k+2)
    del cumulative
    bucket_weights = at_bounds[..., 1:] - at_bounds[..., :-1]  # (batch, heads, chunk, 2k+1)

    out = weights.to(v.dtype) @ v  # (batch, heads, chunk, head_dim)
    return out + bucket_weights.to(v.dtype) @ rel_v_table  # (batch, heads, chunk, head_dim)


def shaw_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rel_k_table: torch.Tensor,
    rel_v_table: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    offset: int,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> torch.Tensor:
    """Relative attention of Shaw et al. (see the module docstring) in query chunks.

    Args:
        q: (batch, heads, q_len, head_dim); k, v: (batch, heads, k_len, head_dim).
        rel_k_table, rel_v_table: (2k+1, head_dim), shared by all heads, in q's dtype.
        causal, offset: query i sits at position offset + i and sees keys j <= offset + i when causal.
        scale: s, applied to both q . k and q . a^K.
        chunk_elements: about batch * heads * chunk * k_len; peak memory is a few float32 tensors of
            this many elements (plus inputs and output), whatever q_len.

    Returns:
        (batch, heads, q_len, head_dim) in q's dtype. Differentiable (plain torch ops).
    """
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    chunk = _chunk_size(batch * heads, k_len, chunk_elements)
    outputs = []
    for start in range(0, q_len, chunk):
        stop = min(q_len, start + chunk)
        query_positions = torch.arange(offset + start, offset + stop, device=q.device)  # (chunk,)
        visible = min(k_len, offset + stop) if causal else k_len  # keys the chunk's last query can see
        outputs.append(_chunk_attention(q[:, :, start:stop], k[:, :, :visible], v[:, :, :visible],
                                        rel_k_table, rel_v_table, query_positions, causal=causal, scale=scale))
    return torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]  # (batch, heads, q_len, head_dim)
