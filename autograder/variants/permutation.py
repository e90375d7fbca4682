r"""The varied item of chapter 1 (the permutation problem): 1.7, counting with a causal mask.

One head reads 8 tokens with zero queries, so every visible key gets the same weight; the first token's
value is :math:`a`, the seven others' :math:`b`. With the causal mask the query at position :math:`p` sees the
:math:`p + 1` keys :math:`0, \dots, p`, so

.. math:: y_p = \frac{a + p\,b}{p + 1}.

The right outputs come from ``posenc_ref.attention.reference_attention``; the known mistakes (no mask, the mask
the wrong way round, off by one, the weights instead of the outputs) from the formula with one thing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant

ASSIGNMENT = "01_permutation"
TOKENS = 8


def causal_outputs(first: float, others: float) -> list[float]:
    """The head's 8 outputs, from ``posenc_ref``'s reference attention (zero queries, causal mask)."""
    import torch

    from posenc_ref.attention import reference_attention

    values = torch.full((1, 1, TOKENS, 1), float(others), dtype=torch.float64)  # (batch, heads, n, d_v)
    values[0, 0, 0, 0] = float(first)
    queries = torch.zeros(1, 1, TOKENS, 4, dtype=torch.float64)
    keys = torch.randn(1, 1, TOKENS, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return reference_attention(queries, keys, values, causal=True)[0, 0, :, 0].tolist()


def _counting(parameters: Mapping[str, Any]) -> dict[str, Any]:
    a, b = parameters["values"]
    everything = (a + (TOKENS - 1) * b) / TOKENS
    return {
        "EXPECTED": causal_outputs(a, b),
        "MISTAKES": [
            (("this is attention without the mask: every query averages all 8 values; with the causal mask the "
             "query at position p sees only the keys 0, ..., p"),
             [everything] * TOKENS),
            (("the mask is the wrong way round: the query at position p may see the keys j <= p (the past), not "
             "j >= p"),
             [everything] + [float(b)] * (TOKENS - 1)),
            (("off by one: the query at position p sees p + 1 keys (positions 0, ..., p, itself included), so y_0 "
             "is the first value alone"),
             [(a + (p + 1) * b) / (p + 2) for p in range(TOKENS)]),
            (("these are the weights 1 / (p + 1) that each query gives the first token, not the outputs: each "
             "output averages the values that its query sees"),
             [1 / (p + 1) for p in range(TOKENS)]),
        ],
    }


VARIANTS = (Variant.of(ASSIGNMENT, "1.7", "count_test", _counting),)
