"""Accelerated attention for every position kind; same signature and results as the reference.

- :func:`fast_attention`: ``(q, k, v, *, position, causal, scale, query_offset, **params)``.
- :func:`apply_rope_fused`: rotate q and k for RoPE in one Triton launch (torch fallback).
- :func:`fast_path_report`: which path each position kind takes on a device.
- :mod:`posenc_ref.fast.params`: the parameters of each kind and their validation, shared with the
  reference.
"""

from posenc_ref.fast.device import fast_path_report
from posenc_ref.fast.dispatch import IMPLEMENTATIONS, fast_attention
from posenc_ref.fast.params import POSITION_PARAMS, resolve_query_offset, validate_position_params
from posenc_ref.fast.rope_fused import apply_rope_fused, apply_rope_torch

__all__ = [
    "IMPLEMENTATIONS",
    "POSITION_PARAMS",
    "apply_rope_fused",
    "apply_rope_torch",
    "fast_attention",
    "fast_path_report",
    "resolve_query_offset",
    "validate_position_params",
]
