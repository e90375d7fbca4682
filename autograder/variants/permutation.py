r"""The varied items of chapter 1 (the permutation problem): 1.4, 1.5, 1.6 and 1.7.

- 1.4: self-attention with the prefix mask of 1.1 (prefix :math:`k`) on 6 tokens, and a shuffle :math:`\pi` (row
  :math:`i` of the shuffled input is row :math:`\pi(i)` of :math:`x`). The query at :math:`i` sees the keys
  :math:`V(i) = \{j : j \le i \text{ or } j < k\}`. Row :math:`i` of :math:`f(PX)` is the token :math:`\pi(i)` reading
  the tokens :math:`\pi(V(i))`; row :math:`i` of :math:`P f(X)` is the same token reading :math:`V(\pi(i))`; for
  generic weights they agree exactly when the two sets are equal.
- 1.5: which of the student's eight maps are permutation-equivariant.
- 1.6: what the classifier decides (a palindrome, ...) and the length of the sequences; the hidden test checks a
  pair against them.
- 1.7: one head with zero queries and the prefix mask of 1.1 reads 8 tokens, the first of value :math:`a` and the
  seven others :math:`b`. The query at :math:`p` averages the keys :math:`0, \dots, \max(p, k - 1)`:

  .. math:: y_p = \frac{a + m\,b}{m + 1}, \qquad m = \max(p, k - 1).

  The right outputs come from ``posenc_ref.attention.attention`` with that mask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autograder.student.parameters import MAPS
from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "01_permutation"
TOKENS = 8
SHUFFLED = 6  # tokens in 1.4


# ---------------------------------------------------------------------------------------------------------
# 1.4: the rows that the prefix mask keeps under your shuffle
# ---------------------------------------------------------------------------------------------------------


def agreeing_rows(prefix: int, shuffle: tuple[int, ...], visible=None) -> list[int]:
    """The rows i with shuffle(V(i)) == V(shuffle(i)), V(i) the keys that the query at i sees (``visible(i)``)."""
    visible = visible or (lambda i: {j for j in range(len(shuffle)) if j <= i or j < prefix})
    return [i for i in range(len(shuffle)) if {shuffle[j] for j in visible(i)} == visible(shuffle[i])]


def _prefix_rows(parameters: Mapping[str, Any]) -> dict[str, Any]:
    prefix, shuffle = parameters["setting"]
    expected = agreeing_rows(prefix, shuffle)
    return {
        "EXPECTED": expected,
        "MISTAKES": distinct_mistakes(expected, [
            (("these are the rows whose token the shuffle leaves in place; a token that stays where it is can still "
              "see other keys after the shuffle, and a token that moves can see the same set: compare the set of "
              "tokens each query sees"),
             [i for i in range(SHUFFLED) if shuffle[i] == i]),
            (("these are the rows of the causal mask (prefix 0); with prefix k the first k tokens see the whole "
              "prompt, so a shuffle inside the prompt leaves what they see unchanged"),
             agreeing_rows(0, shuffle)),
            (("too many keys are visible: with prefix k every query sees the keys j < k, not j <= k"),
             agreeing_rows(prefix, shuffle, lambda i: {j for j in range(SHUFFLED) if j <= i or j <= prefix})),
            (("a masked layer is not equivariant row by row: a row agrees only when its query sees the same set of "
              "tokens before and after the shuffle"),
             list(range(SHUFFLED))),
        ]),
    }


# ---------------------------------------------------------------------------------------------------------
# 1.5: which maps are equivariant
# ---------------------------------------------------------------------------------------------------------

# Whether each map of autograder.student.parameters.MAPS is permutation-equivariant, and why.
EQUIVARIANT = {
    "column_softmax": (True, (
        "a softmax over the rows of each column reorders with the rows: its denominator is a sum over all "
        "rows"
    )),
    "minus_mean": (True, (
        "the mean of all rows does not depend on their order, so each row minus it moves with its row"
    )),
    "learned_table": (False, (
        "row p of the table is added at position p whatever token stands there: the sum depends on positions"
    )),
    "sort_rows": (False, (
        "sorting gives the same rows in the same order whatever the input order: that is invariance, not "
        "equivariance (the output does not move with the input)"
    )),
    "distance_bias": (False, (
        "the bias -|i - j| depends on the positions of the query and the key, not on their contents"
    )),
    "plain_block": (True, (
        "attention without a mask, residuals, layer norm and a position-wise MLP are each equivariant, and a "
        "composition of equivariant maps is equivariant"
    )),
    "running_max": (False, (
        "a running maximum reads the rows in their order: row p depends on which tokens come before it"
    )),
    "not_itself": (True, (
        "this mask only compares a query with itself, and a shuffle moves every token together with its own "
        "query and key, so it is not tied to positions the way a causal mask is"
    )),
    "kernel_one": (True, (
        "a kernel of size 1 applies one linear map to each row alone: a row-wise map moves with its row"
    )),
    "reverse_rows": (False, (
        "the output's row p is the input's row n - 1 - p: shuffling the input and then reversing is not "
        "reversing and then shuffling the same way"
    )),
    "content_mask": (True, (
        "the mask compares the contents of the query's and the key's rows, not their positions, so it moves "
        "with the tokens"
    )),
    "add_previous": (False, (
        "which row is 'the row before' depends on the order: a shuffle gives each token another neighbour to "
        "add"
    )),
    "broadcast_max": (True, (
        "the maximum over all rows does not depend on their order, and an output whose rows are all equal is "
        "unchanged by any shuffle of its rows"
    )),
    "scale_by_position": (False, (
        "the factor p + 1 belongs to the position, not to the token standing there"
    )),
}
assert set(EQUIVARIANT) == set(MAPS)


def _maps(parameters: Mapping[str, Any]) -> dict[str, Any]:
    names = parameters["maps"]
    return {
        "EXPECTED_MAPS": "".join(letter for letter, name in zip("abcdefgh", names, strict=True) if EQUIVARIANT[name][0]),
        "EXPECTED_WHY": {letter: EQUIVARIANT[name][1] for letter, name in zip("abcdefgh", names, strict=True)},
    }


# ---------------------------------------------------------------------------------------------------------
# 1.6: two inputs, one verdict
# ---------------------------------------------------------------------------------------------------------


def _blind(parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {"EXPECTED_VERDICT": parameters["verdict"], "EXPECTED_LENGTH": parameters["length"]}


# ---------------------------------------------------------------------------------------------------------
# 1.7: counting with the prefix mask
# ---------------------------------------------------------------------------------------------------------


def prefix_outputs(first: float, others: float, prefix: int) -> list[float]:
    """The head's 8 outputs, from ``posenc_ref``'s attention (zero queries, the prefix mask of 1.1 as its mask)."""
    import torch

    from posenc_ref.attention import attention

    values = torch.full((1, 1, TOKENS, 1), float(others), dtype=torch.float64)  # (batch, heads, n, d_v)
    values[0, 0, 0, 0] = float(first)
    queries = torch.zeros(1, 1, TOKENS, 4, dtype=torch.float64)
    keys = torch.randn(1, 1, TOKENS, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(TOKENS)
    visible = (positions[None, :] <= positions[:, None]) | (positions[None, :] < prefix)  # (n, n): [query, key]
    return attention(queries, keys, values, mask=visible)[0, 0, :, 0].tolist()


def _counting(parameters: Mapping[str, Any]) -> dict[str, Any]:
    a, b = parameters["values"]
    k = parameters["prefix"]
    expected = prefix_outputs(a, b, k)
    return {
        "EXPECTED": expected,
        "MISTAKES": distinct_mistakes(expected, [
            (("the prefix is ignored: this is the causal mask; with prefix k the queries 0, ..., k - 1 also see the "
              "keys after them up to position k - 1, so the first k outputs are the same"),
             [(a + p * b) / (p + 1) for p in range(TOKENS)]),
            (("too many keys are visible: with prefix k the prompt is the keys j < k (k tokens), not j <= k"),
             [(a + max(p, k) * b) / (max(p, k) + 1) for p in range(TOKENS)]),
            (("this is attention without the mask: every query averages all 8 values; with the prefix mask the query "
              "at position p >= k sees only the keys 0, ..., p"),
             [(a + (TOKENS - 1) * b) / TOKENS] * TOKENS),
            (("these are the weights that each query gives the first token, not the outputs: each output averages the "
              "values that its query sees"),
             [1 / (max(p, k - 1) + 1) for p in range(TOKENS)]),
        ]),
    }


VARIANTS = (
    Variant.of(ASSIGNMENT, "1.4", "conclusions_test", _prefix_rows),
    Variant.of(ASSIGNMENT, "1.5", "maps_test", _maps),
    Variant.of(ASSIGNMENT, "1.6", "blind_test", _blind),
    Variant.of(ASSIGNMENT, "1.7", "count_test", _counting),
)
