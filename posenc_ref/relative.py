r"""Relative positions: offsets, Shaw's clipped relative embeddings, T5 buckets and bias, ALiBi.

All three methods see a pair (query position i, key position j) only through the offset

.. math:: r_{ij} = j - i \qquad \text{(key minus query, as T5 and Hugging Face compute it).}

Query positions are ``query_offset + arange(q_len)`` and key positions ``arange(k_len)``. With
``query_offset=None`` the queries are the *last* ``q_len`` of the ``k_len`` positions (cached decoding), so
the offset is ``k_len - q_len``; for ``q_len == k_len`` that is 0.

- Shaw et al. (2018) clip the offset to ``[-k, k]`` and look up learned vectors ``a^K``, ``a^V`` (shared
  across heads) that enter the scores and the values.
- T5 (Raffel et al., 2020) maps the offset to one of ``num_buckets`` buckets (exact for small offsets,
  log-spaced for larger ones) and learns one scalar bias per bucket and head.
- ALiBi (Press et al., 2022) adds a fixed, head-specific linear penalty ``-m_h |i - j|``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc_ref._checks import check_int, check_positive_int, check_tensor

__all__ = [
    "ShawRelativePosition",
    "T5RelativeBias",
    "alibi_bias",
    "alibi_slopes",
    "clipped_relative_index",
    "query_positions_offset",
    "relative_position_bucket",
    "relative_positions",
]

# Learned relative tables start small, like a scaled nn.Embedding: N(0, 0.02^2).
_INIT_STD = 0.02


def query_positions_offset(q_len: int, k_len: int, query_offset: int | None) -> int:
    """The position of the first query: ``query_offset``, or ``k_len - q_len`` when it is ``None``.

    ``None`` places the queries at the last ``q_len`` of the ``k_len`` key positions (cached decoding).

    Raises:
        TypeError: a length or ``query_offset`` is not an int.
        ValueError: a length is < 1, ``query_offset`` is negative, or ``query_offset`` is ``None`` while
            ``q_len > k_len`` (the queries cannot be the last ``q_len`` of fewer keys).
    """
    check_positive_int("q_len", q_len)
    check_positive_int("k_len", k_len)
    if query_offset is None:
        if q_len > k_len:
            raise ValueError(
                f"query_offset=None places the queries at the last q_len key positions, which needs "
                f"q_len <= k_len; got q_len={q_len}, k_len={k_len} (pass query_offset explicitly)"
            )
        return k_len - q_len
    return check_int("query_offset", query_offset, minimum=0)


def relative_positions(
    q_len: int,
    k_len: int,
    *,
    query_offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The matrix of offsets ``r[i, j] = j - i`` (key position minus query position).

    Query positions are ``offset + arange(q_len)``, key positions ``arange(k_len)``; ``offset`` follows
    :func:`query_positions_offset`. Returns an int64 tensor of shape ``(q_len, k_len)``.

    Raises:
        TypeError, ValueError: as :func:`query_positions_offset`.
    """
    offset = query_positions_offset(q_len, k_len, query_offset)
    query_positions = torch.arange(offset, offset + q_len, dtype=torch.int64, device=device)  # (q_len,)
    key_positions = torch.arange(k_len, dtype=torch.int64, device=device)  # (k_len,)
    return key_positions[None, :] - query_positions[:, None]  # (q_len, k_len)


def clipped_relative_index(
    q_len: int,
    k_len: int,
    max_distance: int,
    *,
    query_offset: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Row indices into a Shaw table: ``clip(j - i, -k, k) + k`` with ``k = max_distance``.

    Every offset beyond ``k`` in either direction shares the edge row (0 or ``2k``). Returns an int64 tensor
    of shape ``(q_len, k_len)`` with values in ``[0, 2k]``.

    Raises:
        TypeError, ValueError: ``max_distance`` is not an int >= 1, or as :func:`relative_positions`.
    """
    check_positive_int("max_distance", max_distance)
    offsets = relative_positions(q_len, k_len, query_offset=query_offset, device=device)  # (q_len, k_len)
    return offsets.clamp(-max_distance, max_distance) + max_distance  # (q_len, k_len)


class ShawRelativePosition(nn.Module):
    r"""Shaw et al. (2018) clipped relative position representations, shared across heads.

    Two learned tables ``keys`` (:math:`a^K`) and ``values`` (:math:`a^V`), each ``(2k + 1, head_dim)``,
    initialised from N(0, 0.02^2). For query i and key j,

    .. math:: a^K_{ij} = \text{keys}[\mathrm{clip}(j - i, -k, k) + k], \qquad
              e_{ij} = \frac{q_i \cdot (k_j + a^K_{ij})}{\sqrt{d}}, \qquad
              z_i = \sum_j \alpha_{ij} (v_j + a^V_{ij}).

    Raises:
        TypeError, ValueError: ``max_distance`` or ``head_dim`` is not an int >= 1.
    """

    def __init__(self, max_distance: int, head_dim: int) -> None:
        super().__init__()
        self.max_distance = check_positive_int("max_distance", max_distance)
        self.head_dim = check_positive_int("head_dim", head_dim)
        num_rows = 2 * max_distance + 1
        self.keys = nn.Parameter(torch.empty(num_rows, head_dim))  # (2k+1, head_dim)
        self.values = nn.Parameter(torch.empty(num_rows, head_dim))  # (2k+1, head_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.keys, std=_INIT_STD)
        nn.init.normal_(self.values, std=_INIT_STD)

    def forward(
        self, q_len: int, k_len: int, *, query_offset: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(rel_k, rel_v)``, each ``(q_len, k_len, head_dim)``: the table rows for ``j - i``."""
        index = clipped_relative_index(
            q_len, k_len, self.max_distance, query_offset=query_offset, device=self.keys.device
        )  # (q_len, k_len)
        return self.keys[index], self.values[index]  # (q_len, k_len, head_dim) each

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, head_dim={self.head_dim}"


def _check_bucket_arguments(bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """Validate T5 bucket arguments; return the number of buckets per direction."""
    if not isinstance(bidirectional, bool):
        raise TypeError(f"bidirectional must be a bool, got {bidirectional!r}")
    if bidirectional:
        check_int("num_buckets", num_buckets, minimum=4)
        if num_buckets % 2:
            raise ValueError(
                f"num_buckets must be even when bidirectional (half per direction), got {num_buckets}"
            )
        per_direction = num_buckets // 2
    else:
        per_direction = check_int("num_buckets", num_buckets, minimum=2)
    max_exact = per_direction // 2
    check_int("max_distance", max_distance)
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be larger than the exact range max_exact={max_exact} "
            f"(half the buckets of one direction), got {max_distance}"
        )
    return per_direction


def relative_position_bucket(
    relative_position: torch.Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    r"""T5's bucket for each key-minus-query offset ``r = j - i`` (Raffel et al., 2020).

    The same rule as mesh-tensorflow and Hugging Face's ``T5Attention._relative_position_bucket``.

    Bidirectional: ``n = num_buckets / 2`` buckets per direction; offsets ``r > 0`` (keys after the query)
    take the upper half (bucket ``+ n``), and ``a = |r|``. Unidirectional: ``n = num_buckets`` and
    ``a = max(-r, 0)``, so every future key (``r > 0``) lands in bucket 0 together with ``r = 0``.
    With ``max_exact = n // 2``:

    .. math:: \text{bucket}(a) = \begin{cases} a & a < \text{max\_exact} \\
              \min\!\Big(n - 1,\ \text{max\_exact} + \Big\lfloor
              \frac{\ln(a / \text{max\_exact})}{\ln(\text{max\_distance} / \text{max\_exact})}
              (n - \text{max\_exact}) \Big\rfloor\Big) & \text{otherwise.} \end{cases}

    The logarithm is evaluated in float32, as in the reference implementations.

    Why the last bucket starts at ``|j - i| = 91``, not 128, with the defaults (bidirectional, 32, 128):
    ``n = 16`` and ``max_exact = 8``, so for ``a >= 8`` the bucket is
    ``8 + floor(8 ln(a/8) / ln 16) = 8 + floor(2 log2(a/8))``. The last bucket, 15, is reached when
    ``2 log2(a/8) >= 7``, i.e. ``a >= 8 * 2^3.5 = 90.51``, so at ``a = 91``. ``max_distance`` is where the
    log scale *would* reach bucket ``n`` (the end of the last bucket), not where the last bucket begins;
    the clipping to ``n - 1`` only merges everything from 128 on into that same bucket.

    Args:
        relative_position: integer tensor of offsets ``j - i``, any shape.

    Returns:
        int64 tensor of the same shape with values in ``[0, num_buckets)``.

    Raises:
        TypeError: ``relative_position`` is not an integer tensor, or ``bidirectional`` is not a bool.
        ValueError: ``num_buckets`` is odd or < 4 when bidirectional (< 2 otherwise; each direction needs at
            least one exact and one log bucket), or ``max_distance <= max_exact``.
    """
    check_tensor("relative_position", relative_position)
    dtype = relative_position.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"relative_position must be an integer tensor, got dtype {dtype}")
    per_direction = _check_bucket_arguments(bidirectional, num_buckets, max_distance)
    offsets = relative_position.to(torch.int64)
    if bidirectional:
        direction_start = (offsets > 0).to(torch.int64) * per_direction
        distance = offsets.abs()
    else:
        direction_start = torch.zeros_like(offsets)
        distance = (-offsets).clamp(min=0)
    max_exact = per_direction // 2
    # Clamping before the log keeps log(0) = -inf out of the (discarded) large-offset branch.
    scaled = distance.clamp(min=max_exact).to(torch.float32) / max_exact
    log_bucket = max_exact + (
        torch.log(scaled) / math.log(max_distance / max_exact) * (per_direction - max_exact)
    ).to(torch.int64)
    log_bucket = log_bucket.clamp(max=per_direction - 1)
    return direction_start + torch.where(distance < max_exact, distance, log_bucket)


class T5RelativeBias(nn.Module):
    r"""T5's learned relative attention bias: one scalar per (bucket, head).

    ``weight`` has shape ``(num_buckets, num_heads)``, the layout of Hugging Face's
    ``relative_attention_bias.weight``, initialised from N(0, 0.02^2). The bias added to the scores is

    .. math:: b[h, i, j] = \text{weight}[\text{bucket}(j - i), h],

    which depends on ``i`` and ``j`` only through ``j - i`` (translation invariant).

    Raises:
        TypeError, ValueError: ``num_heads`` is not an int >= 1, or the bucket arguments are invalid (see
            :func:`relative_position_bucket`).
    """

    def __init__(
        self, num_heads: int, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        _check_bucket_arguments(bidirectional, num_buckets, max_distance)
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads))  # (num_buckets, heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=_INIT_STD)

    def forward(self, q_len: int, k_len: int, *, query_offset: int | None = None) -> torch.Tensor:
        """Return the bias, shape ``(heads, q_len, k_len)``."""
        offsets = relative_positions(q_len, k_len, query_offset=query_offset, device=self.weight.device)
        buckets = relative_position_bucket(
            offsets,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # (q_len, k_len)
        return self.weight[buckets].permute(2, 0, 1)  # (heads, q_len, k_len)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, bidirectional={self.bidirectional}, "
            f"num_buckets={self.num_buckets}, max_distance={self.max_distance}"
        )


def alibi_slopes(num_heads: int) -> torch.Tensor:
    r"""ALiBi's head-specific slopes ``m_h`` (Press et al., 2022), float32, shape ``(num_heads,)``.

    For a power of two ``n``: the geometric sequence :math:`m_h = 2^{-8h/n}`, ``h = 1..n`` (ratio
    :math:`2^{-8/n}`; for 8 heads 1/2, 1/4, ..., 1/256). Otherwise, with ``n`` the largest power of two
    below ``num_heads``: the ``n`` slopes of ``n`` heads, followed by the odd-numbered slopes of ``2n`` heads,
    :math:`2^{-8h/(2n)}` for ``h = 1, 3, 5, ...``, until ``num_heads`` are filled. This is what the authors'
    reference code (``get_slopes`` in ofirpress/attention_with_linear_biases) computes; for 6 heads it gives
    2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3.

    Raises:
        TypeError, ValueError: ``num_heads`` is not an int >= 1.
    """
    check_positive_int("num_heads", num_heads)
    power_of_two = 2 ** (num_heads.bit_length() - 1)
    exponents = [-8 * h / power_of_two for h in range(1, power_of_two + 1)]
    exponents += [-8 * h / (2 * power_of_two) for h in range(1, 2 * (num_heads - power_of_two), 2)]
    # Exact powers of two in float64, then a single rounding to float32.
    return torch.exp2(torch.tensor(exponents, dtype=torch.float64)).to(torch.float32)  # (num_heads,)


def alibi_bias(
    num_heads: int,
    q_len: int,
    k_len: int,
    *,
    query_offset: int | None = None,
    slopes: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""ALiBi's bias ``b[h, i, j] = -m_h |i - j|``, shape ``(heads, q_len, k_len)``.

    Symmetric in ``i - j``; in a causal model the masked half (``j > i``) is simply unused. ``slopes``
    defaults to :func:`alibi_slopes`; the result has the dtype and device of ``slopes``.

    Press et al.'s code adds :math:`m_h \cdot j` instead (one row vector over the key positions, built once
    for the longest sequence and broadcast over every query row). Under the causal mask ``j <= i``,
    :math:`-m_h |i - j| = m_h j - m_h i`: the two differ by ``m_h i``, a constant in each row, and softmax
    over a row is unchanged by adding a constant, so the attention weights are identical.

    Raises:
        TypeError, ValueError: ``num_heads`` or a length is not an int >= 1, ``query_offset`` is invalid (see
            :func:`query_positions_offset`), or ``slopes`` is not a floating 1-D tensor of ``num_heads``
            entries.
    """
    check_positive_int("num_heads", num_heads)
    if slopes is None:
        slopes = alibi_slopes(num_heads)
    check_tensor("slopes", slopes, ndim=1, floating=True)
    if slopes.shape[0] != num_heads:
        raise ValueError(f"slopes must have num_heads={num_heads} entries, got {slopes.shape[0]}")
    offsets = relative_positions(q_len, k_len, query_offset=query_offset, device=slopes.device)
    distance = offsets.abs().to(slopes.dtype)  # (q_len, k_len)
    return -slopes[:, None, None] * distance[None, :, :]  # (heads, q_len, k_len)
