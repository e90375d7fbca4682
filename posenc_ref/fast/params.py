"""The parameters of every position kind, checked once for the reference and the fast paths.

``fast_attention`` and ``posenc_ref.attention.reference_attention`` share one signature,
``(q, k, v, *, position, causal, scale, query_offset, **params)``; this module says which ``params`` each
``position`` takes (``POSITION_PARAMS``), fills the defaults and checks every tensor against ``q`` and ``k``
(``validate_position_params``), so both implementations reject the same input with the same message.

Positions: query i sits at ``m = query_offset + i``, key j at ``n = j``; ``query_offset=None`` means
``k_len - q_len`` (the queries are the last positions, as in cached decoding); see ``resolve_query_offset``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from posenc_ref._checks import check_choice, check_positive_float, check_tensor
from posenc_ref.relative import query_positions_offset, relative_position_bucket
from posenc_ref.rope import ROPE_LAYOUTS


@dataclass(frozen=True)
class PositionParams:
    """Names a position kind accepts: ``required`` ones and ``optional`` ones with their defaults."""

    required: tuple[str, ...]
    optional: dict[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> tuple[str, ...]:
        return self.required + tuple(self.optional)


POSITION_PARAMS: dict[str, PositionParams] = {
    "none": PositionParams(required=()),
    "rope": PositionParams(required=("inv_freq",), optional={"layout": "interleaved", "attention_factor": 1.0}),
    "alibi": PositionParams(required=("slopes",)),
    "t5": PositionParams(required=("bias_table",), optional={"bidirectional": True, "max_distance": 128}),
    "shaw": PositionParams(required=("rel_k_table", "rel_v_table")),
}
"""For each ``position``: the required parameter names and the optional ones with their defaults.

- ``"none"``: plain attention.
- ``"rope"``: ``inv_freq`` (head_dim/2,) float; ``layout`` "interleaved" | "half"; ``attention_factor``.
- ``"alibi"``: ``slopes`` (heads,) float; bias ``-slopes[h] * |m - n|``.
- ``"t5"``: ``bias_table`` (num_buckets, heads); ``bidirectional``; ``max_distance``.
- ``"shaw"``: ``rel_k_table`` and ``rel_v_table``, each (2k+1, head_dim) in q's dtype.
"""


def resolve_query_offset(q_len: int, k_len: int, query_offset: int | None) -> int:
    """The position ``m`` of query 0: ``query_offset``, or ``k_len - q_len`` when it is ``None``.

    Query i sits at ``m = offset + i`` and key j at ``n = j``. ``None`` puts the queries at the last
    positions (cached decoding; 0 when ``q_len == k_len``). The rule is
    :func:`posenc_ref.relative.query_positions_offset`; this name is the one attention code imports.

    Raises:
        TypeError: a length or ``query_offset`` that is not an int.
        ValueError: a length < 1; ``query_offset < 0``; ``query_offset=None`` with ``q_len > k_len``
            (the queries cannot be the last positions of a shorter key sequence; pass it explicitly).
    """
    return query_positions_offset(q_len, k_len, query_offset)


def validate_position_params(
    position: str, params: dict[str, Any], *, q: torch.Tensor, k: torch.Tensor
) -> dict[str, Any]:
    """Check ``params`` for ``position`` against ``q`` and ``k``; return them with defaults filled in.

    q is (batch, heads, q_len, head_dim) and k (batch, heads, k_len, head_dim) (their own checks belong to
    the attention functions). Every tensor parameter must be on q's device; float tables of a fixed size:

    - rope: ``inv_freq`` 1-D floating (head_dim/2,) (head_dim even); ``layout`` in ROPE_LAYOUTS;
      ``attention_factor`` a real > 0.
    - alibi: ``slopes`` 1-D floating (heads,).
    - t5: ``bias_table`` 2-D floating (num_buckets, heads); ``bidirectional`` a bool; num_buckets and
      ``max_distance`` as :func:`posenc_ref.relative.relative_position_bucket` allows them (num_buckets even
      and >= 4 when bidirectional, >= 2 otherwise; max_distance larger than the exact range).
    - shaw: ``rel_k_table`` and ``rel_v_table`` 2-D (2k+1, head_dim) with the same odd row count, q's dtype
      (they enter matrix products with q and with the attention weights).

    Raises:
        ValueError: unknown ``position``; an unknown or missing parameter name (named, with the allowed
            ones); a wrong shape, device or value.
        TypeError: a parameter of the wrong type or dtype.
    """
    check_choice("position", position, POSITION_PARAMS)
    spec = POSITION_PARAMS[position]
    unknown = sorted(set(params) - set(spec.allowed))
    if unknown:
        allowed = ", ".join(spec.allowed) or "no parameters"
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for position={position!r}; allowed: {allowed}")
    missing = [name for name in spec.required if name not in params]
    if missing:
        raise ValueError(f"position={position!r} requires parameter(s) {', '.join(missing)}")
    filled = {**spec.optional, **params}
    _VALIDATORS[position](filled, q, k)
    return filled


def _check_on_device(name: str, tensor: torch.Tensor, q: torch.Tensor) -> None:
    if tensor.device != q.device:
        raise ValueError(f"{name} is on {tensor.device} but q is on {q.device}; they must be on one device")


def _check_float_table(name: str, value: Any, shape: tuple[int, ...], q: torch.Tensor) -> torch.Tensor:
    check_tensor(name, value, ndim=len(shape), floating=True)
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
    _check_on_device(name, value, q)
    return value


def _validate_none(params: dict[str, Any], q: torch.Tensor, k: torch.Tensor) -> None:
    return None


def _validate_rope(params: dict[str, Any], q: torch.Tensor, k: torch.Tensor) -> None:
    head_dim = q.shape[-1]
    if head_dim % 2:
        raise ValueError(f"rope needs an even head_dim (features rotate in pairs), got head_dim={head_dim}")
    _check_float_table("inv_freq", params["inv_freq"], (head_dim // 2,), q)
    check_choice("layout", params["layout"], ROPE_LAYOUTS)
    check_positive_float("attention_factor", params["attention_factor"])


def _validate_alibi(params: dict[str, Any], q: torch.Tensor, k: torch.Tensor) -> None:
    _check_float_table("slopes", params["slopes"], (q.shape[1],), q)


def _validate_t5(params: dict[str, Any], q: torch.Tensor, k: torch.Tensor) -> None:
    table = params["bias_table"]
    check_tensor("bias_table", table, ndim=2, floating=True)
    if table.shape[1] != q.shape[1]:
        raise ValueError(
            f"bias_table must have shape (num_buckets, heads={q.shape[1]}), got {tuple(table.shape)}"
        )
    _check_on_device("bias_table", table, q)
    num_buckets = table.shape[0]
    try:  # one rule for bucket arguments: the one of relative_position_bucket
        relative_position_bucket(torch.zeros(1, dtype=torch.int64), bidirectional=params["bidirectional"],
                                 num_buckets=num_buckets, max_distance=params["max_distance"])
    except (TypeError, ValueError) as error:
        raise type(error)(f"t5 with bias_table of {num_buckets} rows (num_buckets): {error}") from error


def _validate_shaw(params: dict[str, Any], q: torch.Tensor, k: torch.Tensor) -> None:
    head_dim = q.shape[-1]
    for name in ("rel_k_table", "rel_v_table"):
        table = check_tensor(name, params[name], ndim=2, floating=True)
        rows = table.shape[0]
        if rows % 2 == 0 or table.shape[1] != head_dim:
            raise ValueError(
                f"{name} must have shape (2k+1, head_dim={head_dim}) with an odd row count, got "
                f"{tuple(table.shape)}"
            )
        if table.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {table.dtype} but q has {q.dtype}; they must match")
        _check_on_device(name, table, q)
    if params["rel_k_table"].shape != params["rel_v_table"].shape:
        raise ValueError(
            f"rel_k_table {tuple(params['rel_k_table'].shape)} and rel_v_table "
            f"{tuple(params['rel_v_table'].shape)} must have the same shape (one clipping distance k)"
        )


_VALIDATORS = {
    "none": _validate_none,
    "rope": _validate_rope,
    "alibi": _validate_alibi,
    "t5": _validate_t5,
    "shaw": _validate_shaw,
}
