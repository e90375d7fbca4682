r"""``fast_attention``: the accelerated twin of ``posenc_ref.attention.reference_attention``.

Same signature, same result (within floating-point tolerance), a different path per position kind:

=========  ==============================================================================================
position   path (``implementation="auto"``)
=========  ==============================================================================================
none       ``scaled_dot_product_attention`` (flash / memory-efficient kernels on CUDA)
rope       fused Triton rotation of q and k (torch rotation where Triton cannot run), then SDPA
alibi      causal on CPU without autograd: per block of queries, the diagonal square (bias template) and a
           window of earlier keys (bias as a broadcast mask) by SDPA's flash kernel, the keys beyond the
           window, whose weights vanish, dropped ("window", :mod:`posenc_ref.fast.alibi_window`).
           Otherwise FlexAttention with the computed bias in a ``score_mod``, compiled (on CPU its block mask
           also skips the key blocks where ALiBi's weights vanish); SDPA with a materialized bias for small
           problems, when autograd is needed on CPU (no flex backward there) or FlexAttention is missing
t5         CPU without autograd: the query blocks split at the band of offsets where the bucket changes, the
           far keys by SDPA's flash kernel, the band written out ("banded", :mod:`posenc_ref.fast.banded`).
           Otherwise as alibi, with the per-offset table read in the ``score_mod``
shaw       CPU or CUDA without autograd: "banded", as t5; otherwise query-chunked relative attention that
           never builds a (q, k, head_dim) tensor
=========  ==============================================================================================

Logits: :math:`s\, q \cdot k + B`, where the scale s (default :math:`1/\sqrt{d_\text{head}}`) multiplies
q . k only and the bias B of ALiBi or T5 is added after scaling -- for T5 too, although T5's own model
applies no :math:`1/\sqrt{d}` (pass ``scale=1.0`` to reproduce it). Shaw's relative-key term is scaled with
q . k, as in Shaw et al.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from posenc_ref._checks import check_choice, check_positive_float, check_same_dtype_and_device, check_tensor
from posenc_ref.fast import flex
from posenc_ref.fast.alibi_window import alibi_window_attention
from posenc_ref.fast.banded import (
    CONSTANT_TAIL_POSITIONS,
    banded_available,
    banded_offset_attention,
    check_banded_can_run,
)
from posenc_ref.fast.device import needs_grad
from posenc_ref.fast.offset_bias import BIAS_POSITIONS, bias_by_offset, bias_compute_dtype
from posenc_ref.fast.params import resolve_query_offset, validate_position_params
from posenc_ref.fast.rope_fused import rope_implementation, rotate_checked, rotate_without_autograd
from posenc_ref.fast.sdpa import sdpa_attention, sdpa_bias_attention
from posenc_ref.fast.shaw import shaw_attention

IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "none": ("auto", "sdpa"),
    "rope": ("auto", "triton", "torch"),
    "alibi": ("auto", "window", "banded", "flex", "flex_eager", "sdpa_bias"),
    "t5": ("auto", "banded", "flex", "flex_eager", "sdpa_bias"),
    "shaw": ("auto", "banded", "chunked"),
}
"""The ``implementation`` values each position accepts. "auto" picks the fastest path that runs here;
"flex" is compiled FlexAttention, "flex_eager" the uncompiled one (correct, materializes the scores),
"sdpa_bias" the materialized-bias fallback, "banded" the band split of :mod:`posenc_ref.fast.banded` (CPU;
CUDA for t5 and shaw; no autograd), "window" causal ALiBi's square and window split of :mod:`posenc_ref.fast.alibi_window` (CPU, no
autograd; without ``causal`` it runs "banded"), "chunked" Shaw's query chunks; "triton"/"torch" choose the
RoPE rotation."""

_FLEX_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SMALL_BIAS_ELEMENTS = 1 << 20  # heads * q_len * k_len up to which "auto" materializes an offset bias (4 MiB)


def _check_query_key_value(q: Any, k: Any, v: Any) -> None:
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, tensor, ndim=4, floating=True)
    check_same_dtype_and_device(q=q, k=k, v=v)
    if q.shape[:2] != k.shape[:2] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "q must be (batch, heads, q_len, head_dim) and k, v (batch, heads, k_len, head_dim); got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError(f"q_len and k_len must be >= 1; got q {tuple(q.shape)}, k {tuple(k.shape)}")


CUDA_AUTO_BANDED = ("shaw",)
"""The kinds whose "auto" takes the banded path on CUDA too. Measured on an H200 (bfloat16, causal, see
``posenc_ref/results/bench_cuda_h200.json``): Shaw's band split took 1.4 ms at L = 2048 where the query
chunks took 13 ms; T5's took 2.7 to 3.3 ms at L = 8192 where compiled FlexAttention took 2.4 to 2.7 ms."""


def _banded_runs(position: str, *tensors: torch.Tensor) -> bool:
    """Whether "auto" takes the banded path: no autograd, the kernels present in this torch, and CPU, or
    CUDA for :data:`CUDA_AUTO_BANDED`."""
    device = tensors[0].device
    if device.type == "cuda" and position not in CUDA_AUTO_BANDED:
        return False
    return not needs_grad(*tensors) and banded_available(device)


def _bias_implementation(position: str, implementation: str, q, k, v, params: dict[str, Any], causal: bool
                         ) -> str:
    """Resolve "auto" for alibi/t5: "banded" for t5 and "window" for causal alibi on CPU without autograd
    (alibi: above SMALL_BIAS_ELEMENTS); otherwise compiled flex, except where the materialized bias is the
    better choice.

    That is: no FlexAttention, a dtype other than float32/16 and bfloat16, a small problem (the bias has at
    most SMALL_BIAS_ELEMENTS entries: compiling would cost more than it saves), autograd on a device whose
    FlexAttention has no backward (CPU), or a compile that failed before for this device, dtype and
    head_dim.
    """
    table = params.get("bias_table", params.get("slopes"))
    if implementation != "auto":
        return implementation
    if position == "t5" and _banded_runs(position, q, k, v, table):
        return "banded"
    large = q.shape[1] * q.shape[2] * k.shape[2] > SMALL_BIAS_ELEMENTS
    if position == "alibi" and causal and large and _banded_runs(position, q, k, v, table):
        return "window"
    if not flex.flex_available() or q.dtype not in _FLEX_DTYPES:
        return "sdpa_bias"
    if not large:
        return "sdpa_bias"
    if needs_grad(q, k, v, table) and not flex.flex_backward_supported(q.device):
        return "sdpa_bias"
    return "flex" if flex.compile_allowed(q.device, q.dtype, q.shape[-1]) else "sdpa_bias"


def fast_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    position: str = "none",
    causal: bool = False,
    scale: float | None = None,
    query_offset: int | None = None,
    implementation: str = "auto",
    **params: Any,
) -> torch.Tensor:
    r"""Attention with a position kind, by the fastest path available (see the module docstring).

    :math:`\text{out}_i = \sum_j \operatorname{softmax}_j(s\, q_i \cdot k_j + B_{ij})\, v_j` (plus Shaw's value
    term), with query i at position m = ``query_offset`` + i and key j at position n = j.

    Args:
        q: (batch, heads, q_len, head_dim); k, v: (batch, heads, k_len, head_dim); one dtype and device.
        position: "none", "rope", "alibi", "t5" or "shaw"; its ``params`` are listed in
            :data:`posenc_ref.fast.params.POSITION_PARAMS` (e.g. ``inv_freq``, ``slopes``, ``bias_table``,
            ``rel_k_table``/``rel_v_table``).
        causal: key n visible to query m only when n <= m (bottom-right aligned when q_len < k_len).
        scale: s > 0, default 1/sqrt(head_dim); multiplies q . k (and Shaw's q . a^K), never the bias: the
            ALiBi and T5 biases are added after scaling. T5's own model applies no 1/sqrt(d) at all; pass
            ``scale=1.0`` to reproduce it.
        query_offset: position of query 0; None means k_len - q_len.
        implementation: "auto" or a path from :data:`IMPLEMENTATIONS` for this position, to force one.

    Returns:
        (batch, heads, q_len, head_dim) in q's dtype.

    Raises:
        TypeError, ValueError: bad tensors, an unknown position, implementation or parameter, a missing
        required parameter (each named); a forced path that cannot run here (e.g. "flex" with inputs that
        require grad on CPU, "triton" without CUDA or the Triton interpreter).
    """
    _check_query_key_value(q, k, v)
    check_choice("position", position, IMPLEMENTATIONS)
    check_choice("implementation", implementation, IMPLEMENTATIONS[position])
    params = validate_position_params(position, params, q=q, k=k)
    q_len, k_len = q.shape[2], k.shape[2]
    offset = resolve_query_offset(q_len, k_len, query_offset)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_positive_float("scale", scale)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    options = {"causal": causal, "scale": scale, "offset": offset}

    if position == "rope":
        # positions built here are valid by construction; rotate_checked skips re-checking them on the device
        rotation = {
            "q_positions": torch.arange(offset, offset + q_len, device=q.device),  # (q_len,)
            "k_positions": torch.arange(k_len, device=k.device),  # (k_len,)
            "layout": params["layout"], "attention_factor": params["attention_factor"],
        }
        if rope_implementation(q, implementation) == "torch" and not needs_grad(q, k, params["inv_freq"]):
            q, k = rotate_without_autograd(q, k, params["inv_freq"], query_offset=offset, layout=params["layout"],
                                           attention_factor=params["attention_factor"])  # fewer passes
        else:
            q, k = rotate_checked(q, k, params["inv_freq"], implementation=implementation, **rotation)
        return sdpa_attention(q, k, v, **options)
    if position in BIAS_POSITIONS:
        chosen = _bias_implementation(position, implementation, q, k, v, params, causal)
        if chosen == "window" and causal:
            check_banded_can_run(q.device, q, k, v, params["slopes"], name="window")
            return alibi_window_attention(q, k, v, params["slopes"], scale=scale, offset=offset)
        if chosen in ("banded", "window"):  # "window" without causal: the banded path
            check_banded_can_run(q.device, q, k, v, params.get("bias_table", params.get("slopes")),
                                 constant_tails=position in CONSTANT_TAIL_POSITIONS)
            return banded_offset_attention(q, k, v, position, params, **options)
        if chosen == "sdpa_bias":
            bias_offsets = bias_by_offset(position, params, q_len, k_len, offset, dtype=q.dtype, device=q.device)
            return sdpa_bias_attention(q, k, v, bias_offsets, **options)
        if position == "alibi":
            slopes = params["slopes"].to(bias_compute_dtype(q.dtype))  # (heads,)
            return flex.flex_bias_attention(q, k, v, alibi_slopes=slopes, compiled=chosen == "flex", **options)
        bias_offsets = bias_by_offset(position, params, q_len, k_len, offset, dtype=q.dtype, device=q.device)
        return flex.flex_bias_attention(q, k, v, bias_offsets=bias_offsets, compiled=chosen == "flex", **options)
    if position == "shaw":
        tables = (params["rel_k_table"], params["rel_v_table"])
        if implementation == "banded" or (implementation == "auto" and _banded_runs(position, q, k, v, *tables)):
            check_banded_can_run(q.device, q, k, v, *tables, constant_tails=True)
            return banded_offset_attention(q, k, v, position, params, **options)
        return shaw_attention(q, k, v, params["rel_k_table"], params["rel_v_table"], **options)
    return sdpa_attention(q, k, v, **options)
