r"""Attention computed the plain way: the oracle that every faster path is checked against.

Scaled dot-product attention (Vaswani et al. 2017) with an additive bias :math:`B` and a set of allowed
(query, key) pairs:

.. math::

    \text{logits} = s\, Q K^\top + B, \qquad
    W = \operatorname{softmax}_{\text{keys}}(\text{logits}), \qquad
    \text{out} = W V,

with :math:`s = 1/\sqrt{d_\text{head}}` unless another scale is given. Every position kind of the course
enters through one of four doors: added to the input (sinusoidal, learned), a rotation of queries and keys
(RoPE), a bias :math:`B_{ij}` that depends on :math:`j - i` (T5, ALiBi), or relative keys and values
(Shaw et al. 2018).

Positions: a query at index ``i`` sits at position ``query_offset + i`` and a key at index ``j`` at position
``j``. ``query_offset=None`` means ``k_len - q_len``: the queries are the last positions, as when decoding
with a cache. A causal model lets a query see the keys at its own position and before.

Shapes: queries ``(batch, heads, q_len, head_dim)``, keys and values ``(batch, heads, k_len, head_dim)``,
biases ``(heads, q_len, k_len)`` or ``(batch, heads, q_len, k_len)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from posenc_ref import fast
from posenc_ref._checks import (
    check_choice,
    check_positions,
    check_positive_int,
    check_same_dtype_and_device,
    check_tensor,
)
from posenc_ref.fast.params import resolve_query_offset, validate_position_params
from posenc_ref.learned import LearnedPositionalEmbedding
from posenc_ref.relative import (
    ShawRelativePosition,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    clipped_relative_index,
    relative_position_bucket,
    relative_positions,
)
from posenc_ref.rope import apply_rope, rope_frequencies
from posenc_ref.sinusoidal import SinusoidalPositionalEncoding

BACKENDS = ("reference", "fast")


# --------------------------------------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------------------------------------


def _check_query_key_value(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, tensor, ndim=4, floating=True)
    check_same_dtype_and_device(q=q, k=k, v=v)
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            "q, k and v must share (batch, heads); got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share head_dim; got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must share k_len; got k {tuple(k.shape)} and v {tuple(v.shape)}")


def _check_bias(bias: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
    check_tensor("bias", bias, floating=True)
    batch, heads, q_len = q.shape[:3]
    k_len = k.shape[2]
    allowed = [(heads, q_len, k_len), (batch, heads, q_len, k_len)]
    if tuple(bias.shape) not in allowed:
        raise ValueError(f"bias must have shape (heads, q_len, k_len) = {allowed[0]} or "
                         f"(batch, heads, q_len, k_len) = {allowed[1]}; got {tuple(bias.shape)}")
    if bias.device != q.device:
        raise ValueError(f"bias is on {bias.device} but q is on {q.device}; they must be on one device")


def _check_mask(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True where a query may attend), got dtype {mask.dtype}")
    batch, heads, q_len = q.shape[:3]
    k_len = k.shape[2]
    shape = tuple(mask.shape)
    fits = shape == (q_len, k_len) or (
        len(shape) == 4 and shape[2:] == (q_len, k_len) and shape[0] in (1, batch) and shape[1] in (1, heads)
    )
    if not fits:
        raise ValueError(
            f"mask must have shape (q_len, k_len) = {(q_len, k_len)} or (batch or 1, heads or 1, q_len, k_len) "
            f"with batch={batch}, heads={heads}; got {shape}"
        )


def causal_mask(q_len: int, k_len: int, *, query_offset: int | None = None, device=None) -> torch.Tensor:
    """``(q_len, k_len)`` bool mask, True where key position j <= query position ``query_offset + i``."""
    offset = resolve_query_offset(q_len, k_len, query_offset)
    query_positions = torch.arange(q_len, device=device) + offset  # (q_len,)
    key_positions = torch.arange(k_len, device=device)  # (k_len,)
    return key_positions[None, :] <= query_positions[:, None]  # (q_len, k_len)


def _allowed_pairs(q, k, mask, causal, query_offset) -> torch.Tensor | None:
    """Combine a user mask and the causal rule into one bool mask, or None when every pair is allowed."""
    allowed = None
    if mask is not None:
        _check_mask(mask, q, k)
        allowed = mask
    if causal:
        causal_allowed = causal_mask(q.shape[2], k.shape[2], query_offset=query_offset, device=q.device)
        allowed = causal_allowed if allowed is None else allowed & causal_allowed
    return allowed


def _masked_softmax(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Softmax over keys; masked keys get weight 0, and a row with no allowed key gets all zeros."""
    if allowed is None:
        return torch.softmax(logits, dim=-1)
    logits = logits.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(logits, dim=-1)
    # softmax of an all -inf row is NaN; such a query attends to nothing, so it outputs zero.
    return torch.where(allowed.any(dim=-1, keepdim=True), weights, torch.zeros((), dtype=weights.dtype))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # The oracle keeps half-precision inputs in float32 so that it is the more accurate side of a comparison.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    query_offset: int | None = None,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Explicit attention :math:`\operatorname{softmax}(s\,QK^\top + B)\,V`, the oracle for every faster path.

    Args:
        q: ``(batch, heads, q_len, head_dim)``.
        k, v: ``(batch, heads, k_len, head_dim)``; ``v`` may have its own last dimension.
        bias: additive bias ``(heads, q_len, k_len)`` or ``(batch, heads, q_len, k_len)``, added after scaling.
        mask: bool, True where a query may attend; ``(q_len, k_len)`` or
            ``(batch or 1, heads or 1, q_len, k_len)``.
        causal: let query position ``p`` see key positions ``<= p`` only (see the module docstring for
            positions when ``q_len != k_len``).
        scale: :math:`s`, default :math:`1/\sqrt{d_\text{head}}`.
        query_offset: position of the first query; None means ``k_len - q_len``.
        return_weights: also return the attention weights ``(batch, heads, q_len, k_len)``.

    Returns:
        ``(batch, heads, q_len, head_dim_v)`` in ``q``'s dtype (and the weights, in float32 for half inputs).
        A query that may attend to no key outputs zeros.
    """
    _check_query_key_value(q, k, v)
    if bias is not None:
        _check_bias(bias, q, k)
    allowed = _allowed_pairs(q, k, mask, causal, query_offset)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute = _compute_dtype(q.dtype)

    logits = scale * (q.to(compute) @ k.to(compute).transpose(-2, -1))  # (batch, heads, q_len, k_len)
    if bias is not None:
        logits = logits + bias.to(compute)
    weights = _masked_softmax(logits, allowed)  # (batch, heads, q_len, k_len)
    out = (weights @ v.to(compute)).to(q.dtype)  # (batch, heads, q_len, head_dim_v)
    return (out, weights) if return_weights else out


def relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rel_k: torch.Tensor,
    rel_v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    query_offset: int | None = None,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Shaw et al.'s relative attention with materialized relative keys and values.

    .. math::

        e_{ij} = s\, q_i \cdot (k_j + a^K_{ij}), \qquad
        z_i = \sum_j \operatorname{softmax}_j(e_{ij})\, (v_j + a^V_{ij}),

    where :math:`a^K_{ij}` and :math:`a^V_{ij}` are the rows for the clipped offset
    :math:`\operatorname{clip}(j - i, -k, k)` (:class:`posenc_ref.relative.ShawRelativePosition` builds them).

    Args:
        q, k, v: as in :func:`attention`.
        rel_k: ``(q_len, k_len, head_dim)``, shared by every batch element and head.
        rel_v: ``(q_len, k_len, head_dim_v)``.

    This form holds two ``(q_len, k_len, head_dim)`` tensors and a ``(batch, heads, q_len, k_len, head_dim)``
    intermediate at once: it is the readable oracle, and the memory cost that ``posenc_ref.fast`` avoids.
    """
    _check_query_key_value(q, k, v)
    q_len, k_len = q.shape[2], k.shape[2]
    for name, table, width in (("rel_k", rel_k, q.shape[-1]), ("rel_v", rel_v, v.shape[-1])):
        check_tensor(name, table, ndim=3, floating=True)
        if tuple(table.shape) != (q_len, k_len, width):
            raise ValueError(f"{name} must have shape (q_len, k_len, head_dim) = {(q_len, k_len, width)}; "
                             f"got {tuple(table.shape)}")
    check_same_dtype_and_device(q=q, rel_k=rel_k, rel_v=rel_v)
    allowed = _allowed_pairs(q, k, None, causal, query_offset)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    input_dtype, compute = q.dtype, _compute_dtype(q.dtype)
    q, k, v, rel_k, rel_v = (t.to(compute) for t in (q, k, v, rel_k, rel_v))

    content = q @ k.transpose(-2, -1)  # (batch, heads, q_len, k_len)
    position = (q.unsqueeze(3) * rel_k).sum(-1)  # (b, h, q, 1, d) * (q, k, d) -> (batch, heads, q_len, k_len)
    weights = _masked_softmax(scale * (content + position), allowed)  # (batch, heads, q_len, k_len)
    out = weights @ v + (weights.unsqueeze(-1) * rel_v).sum(3)  # (batch, heads, q_len, head_dim_v)
    out = out.to(input_dtype)
    return (out, weights) if return_weights else out


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    position: str = "none",
    causal: bool = False,
    scale: float | None = None,
    query_offset: int | None = None,
    return_weights: bool = False,
    **params,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Attention with a position kind, built from materialized tables: the oracle of ``fast_attention``.

    Same signature and result as :func:`posenc_ref.fast.fast_attention`; ``return_weights`` (this oracle
    only) also returns the attention weights ``(batch, heads, q_len, k_len)``. ``position`` and its ``params``:

    - ``"none"``: no params.
    - ``"rope"``: ``inv_freq`` ``(head_dim/2,)``, ``layout``, ``attention_factor``; rotate q at the query
      positions and k at the key positions, then :func:`attention`.
    - ``"alibi"``: ``slopes`` ``(heads,)``; bias :math:`-m_h |i - j|`.
    - ``"t5"``: ``bias_table`` ``(num_buckets, heads)``, ``bidirectional``, ``max_distance``;
      bias ``bias_table[bucket(j - i), h]``.
    - ``"shaw"``: ``rel_k_table``, ``rel_v_table`` ``(2k+1, head_dim)``; :func:`relative_attention` with the
      rows of the clipped offsets.
    """
    _check_query_key_value(q, k, v)
    params = validate_position_params(position, params, q=q, k=k)
    q_len, k_len = q.shape[2], k.shape[2]
    offset = resolve_query_offset(q_len, k_len, query_offset)
    options = {"causal": causal, "scale": scale, "query_offset": offset, "return_weights": return_weights}

    if position == "rope":
        rotation = {"inv_freq": params["inv_freq"], "layout": params["layout"],
                        "attention_factor": params["attention_factor"]}
        query_positions = torch.arange(offset, offset + q_len, device=q.device)  # (q_len,)
        key_positions = torch.arange(k_len, device=k.device)  # (k_len,)
        q = apply_rope(q, query_positions, **rotation)
        k = apply_rope(k, key_positions, **rotation)
        return attention(q, k, v, **options)
    if position == "alibi":
        slopes = params["slopes"]
        bias = alibi_bias(q.shape[1], q_len, k_len, query_offset=offset, slopes=slopes)  # (heads, q_len, k_len)
        return attention(q, k, v, bias=bias.to(device=q.device, dtype=_compute_dtype(q.dtype)), **options)
    if position == "t5":
        table = params["bias_table"]  # (num_buckets, heads)
        offsets = relative_positions(q_len, k_len, query_offset=offset, device=q.device)  # (q_len, k_len)
        buckets = relative_position_bucket(offsets, bidirectional=params["bidirectional"],
                                           num_buckets=table.shape[0], max_distance=params["max_distance"])
        bias = table[buckets].permute(2, 0, 1)  # (q_len, k_len, heads) -> (heads, q_len, k_len)
        return attention(q, k, v, bias=bias.to(_compute_dtype(q.dtype)), **options)
    if position == "shaw":
        rel_k_table, rel_v_table = params["rel_k_table"], params["rel_v_table"]  # (2k+1, head_dim)
        max_distance = (rel_k_table.shape[0] - 1) // 2
        index = clipped_relative_index(q_len, k_len, max_distance, query_offset=offset, device=q.device)
        return relative_attention(q, k, v, rel_k_table[index], rel_v_table[index], **options)
    return attention(q, k, v, **options)


# --------------------------------------------------------------------------------------------------------
# Position kinds: one registry serves MultiHeadAttention, the models and the experiments
# --------------------------------------------------------------------------------------------------------


class PositionKind(nn.Module):
    """How one position scheme enters multi-head attention; a subclass overrides one hook.

    - ``encode_input(x, offset, positions)``: absolute schemes add their table to the ``(batch, seq, d_model)``
      input.
    - ``attention_params(seq_len)``: relative and rotary schemes name the ``position`` of
      :func:`reference_attention` / ``fast_attention`` and hand it their parameters.
    - ``rotate(q, k, positions)``: rotary schemes turn queries and keys at explicit positions.

    ``takes_positions``: whether the kind can place tokens at explicit positions ``(seq,)`` rather than
    ``0 .. seq - 1`` (absolute and rotary kinds; e.g. randomized positions, Ruoss et al. 2023). The
    relative kinds here compute their offsets from the indices, so they refuse explicit positions.
    """

    attention_position = "none"
    takes_positions = True

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads

    def encode_input(self, x: torch.Tensor, offset: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        return x

    def attention_params(self, seq_len: int) -> dict:
        return {}

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k


POSITION_KINDS: dict[str, type[PositionKind]] = {}


def register_position_kind(name: str) -> Callable[[type[PositionKind]], type[PositionKind]]:
    """Class decorator: adding a position kind to the course is this one line above its class."""

    def register(kind: type[PositionKind]) -> type[PositionKind]:
        if name in POSITION_KINDS:
            raise ValueError(f"position kind {name!r} is already registered")
        POSITION_KINDS[name] = kind
        return kind

    return register


def _build(kind_name: str, factory: Callable, *args, **options):
    """Build a position module, naming the position kind when an option is unknown or wrong."""
    try:
        return factory(*args, **options)
    except TypeError as error:
        raise TypeError(f"position={kind_name!r}: {error}") from error


@register_position_kind("none")
class NoPosition(PositionKind):
    """No position information: attention sees a set (permutation-equivariant unless causal)."""


@register_position_kind("sinusoidal")
class SinusoidalPosition(PositionKind):
    """The fixed sinusoidal table added to the input (Vaswani et al. 2017)."""

    def __init__(self, d_model: int, num_heads: int, **options) -> None:
        super().__init__(d_model, num_heads)
        self.encoding = _build("sinusoidal", SinusoidalPositionalEncoding, d_model, **options)

    def encode_input(self, x: torch.Tensor, offset: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoding(x, offset=offset, positions=positions)


@register_position_kind("learned")
class LearnedPosition(PositionKind):
    """A trained table of ``max_len`` rows added to the input (BERT, GPT-2); needs ``max_len``."""

    def __init__(self, d_model: int, num_heads: int, **options) -> None:
        super().__init__(d_model, num_heads)
        if "max_len" not in options:
            raise ValueError("position='learned' needs max_len, the number of rows of the table")
        self.embedding = _build("learned", LearnedPositionalEmbedding, options.pop("max_len"), d_model, **options)

    def encode_input(self, x: torch.Tensor, offset: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.embedding(x, offset=offset, positions=positions)


@register_position_kind("shaw")
class ShawPosition(PositionKind):
    """Shaw et al.'s clipped relative keys and values; option ``max_distance`` (k, default 16)."""

    attention_position = "shaw"
    takes_positions = False

    def __init__(self, d_model: int, num_heads: int, *, max_distance: int = 16, **options) -> None:
        super().__init__(d_model, num_heads)
        self.relative = _build("shaw", ShawRelativePosition, max_distance, self.head_dim, **options)

    def attention_params(self, seq_len: int) -> dict:
        return {"rel_k_table": self.relative.keys, "rel_v_table": self.relative.values}


@register_position_kind("t5")
class T5Position(PositionKind):
    """T5's learned bias per log-spaced offset bucket and head."""

    attention_position = "t5"
    takes_positions = False

    def __init__(self, d_model: int, num_heads: int, **options) -> None:
        super().__init__(d_model, num_heads)
        self.bias = _build("t5", T5RelativeBias, num_heads, **options)

    def attention_params(self, seq_len: int) -> dict:
        return {"bias_table": self.bias.weight, "bidirectional": self.bias.bidirectional,
                "max_distance": self.bias.max_distance}


@register_position_kind("alibi")
class AlibiPosition(PositionKind):
    """ALiBi's fixed linear penalty, one slope per head (Press et al. 2022)."""

    attention_position = "alibi"
    takes_positions = False

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__(d_model, num_heads)
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def attention_params(self, seq_len: int) -> dict:
        return {"slopes": self.slopes}


@register_position_kind("rope")
class RopePosition(PositionKind):
    """Rotary position embedding of queries and keys; options ``base``, ``scaling``, ``layout``."""

    attention_position = "rope"

    def __init__(self, d_model: int, num_heads: int, *, base: float = 10000.0, scaling: dict | None = None,
                 layout: str = "interleaved") -> None:
        super().__init__(d_model, num_heads)
        check_choice("layout", layout, ("interleaved", "half"))
        self.base, self.scaling, self.layout = base, scaling, layout
        self._length_dependent = isinstance(scaling, dict) and scaling.get("type") == "dynamic"
        self.attention_params(1)  # validate the options now, not at the first forward

    def attention_params(self, seq_len: int) -> dict:
        # Only dynamic (NTK-aware) scaling has frequencies that depend on the sequence length.
        length = seq_len if self._length_dependent else None
        inv_freq, attention_factor = rope_frequencies(self.head_dim, base=self.base, scaling=self.scaling,
                                                      seq_len=length)
        return {"inv_freq": inv_freq, "layout": self.layout, "attention_factor": attention_factor}

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` and ``k`` ``(batch, heads, seq, head_dim)`` rotated at ``positions`` ``(seq,)``."""
        params = self.attention_params(int(positions.max()) + 1 if positions.numel() else 0)
        return apply_rope(q, positions, **params), apply_rope(k, positions, **params)


def make_position_kind(position: str, d_model: int, num_heads: int, **options) -> PositionKind:
    """Build the registered position kind ``position``."""
    check_choice("position", position, POSITION_KINDS)
    return _build(position, POSITION_KINDS[position], d_model, num_heads, **options)


# --------------------------------------------------------------------------------------------------------
# Multi-head attention
# --------------------------------------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    r"""Multi-head self-attention with any registered position kind.

    .. math::

        \text{out} = \operatorname{concat}_h\big(\operatorname{attn}(X' W^Q_h, X' W^K_h, X' W^V_h)\big) W^O,

    where :math:`X' = X + PE` for absolute kinds and :math:`X' = X` otherwise; relative and rotary kinds act
    inside :math:`\operatorname{attn}`. ``backend="reference"`` computes with :func:`reference_attention`,
    ``backend="fast"`` with ``posenc_ref.fast.fast_attention``: the same function, faster.

    Args:
        d_model: model dimension d, divisible by ``num_heads``.
        num_heads: number of heads.
        position: a name in :data:`POSITION_KINDS`.
        causal: decoder-style attention (position p sees positions <= p).
        backend: ``"reference"`` or ``"fast"``.
        **position_options: passed to the position kind (``max_len`` for learned, ``max_distance`` for
            shaw, ``num_buckets``/``max_distance``/``bidirectional`` for t5, ``base``/``scaling``/``layout``
            for rope, ``base``/``dropout``/``scale_embeddings`` for sinusoidal).

    Input ``(batch, seq, d_model)``, output ``(batch, seq, d_model)``.
    """

    def __init__(self, d_model: int, num_heads: int, *, position: str = "none", causal: bool = False,
                 backend: str = "reference", **position_options) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model must be divisible by num_heads; got d_model={d_model}, num_heads={num_heads}")
        check_choice("backend", backend, BACKENDS)
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.causal, self.backend, self.position_name = causal, backend, position
        self.position = make_position_kind(position, d_model, num_heads, **position_options)
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.output = nn.Linear(d_model, d_model)

    def _check_input(self, x: torch.Tensor, positions: torch.Tensor | None) -> None:
        check_tensor("x", x, ndim=3, floating=True)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}; got shape {tuple(x.shape)}")
        if positions is not None:
            if not self.position.takes_positions:
                raise ValueError(f"position={self.position_name!r} computes offsets from token indices and takes "
                                 f"no explicit positions; kinds that do: "
                                 f"{[name for name, kind in POSITION_KINDS.items() if kind.takes_positions]}")
            check_positions("positions", positions, x.shape[1])

    def _attend(self, x: torch.Tensor, offset: int, positions: torch.Tensor | None, attend: Callable, **options):
        """The attention of every head, ``attend(q, k, v, ...)`` with this layer's position kind."""
        # A kind registered before explicit positions existed overrides encode_input(x, offset) only.
        x = (self.position.encode_input(x, offset) if positions is None
             else self.position.encode_input(x, offset, positions))  # (batch, seq, d_model)
        q, k, v = (self._split_heads(projection(x)) for projection in (self.query, self.key, self.value))
        if positions is not None and self.position.attention_position == "rope":
            q, k = self.position.rotate(q, k, positions)  # (batch, heads, seq, head_dim) each
            return attend(q, k, v, position="none", causal=self.causal, **options)
        params = self.position.attention_params(x.shape[1])
        return attend(q, k, v, position=self.position.attention_position, causal=self.causal, **options, **params)

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        """The softmax weights of every head for input ``x`` ``(batch, seq, d_model)``: ``(batch, heads, seq,
        seq)``, row i the distribution of query i over the keys, computed by :func:`reference_attention`."""
        self._check_input(x, positions)
        _, weights = self._attend(x, 0, positions, attend=reference_attention, return_weights=True)
        return weights

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)  # (batch, heads, seq, head_dim)

    def forward(self, x: torch.Tensor, *, offset: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` ``(batch, seq, d_model)``; ``offset`` is the position of the first token (absolute kinds).

        ``positions`` (absolute and rotary kinds): a 1-D integer tensor ``(seq,)``, the position of each
        token instead of ``offset .. offset + seq - 1``. Rotary kinds then rotate q and k at those positions
        here and attend without a position kind, which is what ``position="rope"`` computes at ``0 .. seq - 1``.
        """
        self._check_input(x, positions)
        heads = self._attend(x, offset, positions, attend=reference_attention if self.backend == "reference"
                             else fast.fast_attention)  # (batch, heads, seq, head_dim)
        batch, _, seq, _ = heads.shape
        merged = heads.transpose(1, 2).reshape(batch, seq, self.d_model)  # (batch, seq, d_model)
        return self.output(merged)
