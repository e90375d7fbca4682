r"""The varied items of chapter 3 (learned tables): 3.6, rows of a table with an offset, and 3.7, untrained
rows under weight decay.

3.6: a table of :math:`R` rows whose token at position :math:`p` uses row :math:`p + 2` (OPT, BART), trained on
lengths :math:`1, \dots, M`: the rows :math:`2, \dots, M + 1` learn, :math:`R - M` rows never do.

3.7: AdamW's decoupled decay multiplies every entry by :math:`1 - \eta\lambda` at each step, gradient or not, so
after :math:`s` steps a row without a gradient keeps :math:`(1 - \eta\lambda)^s` of its norm. The expected ratio
is measured: ``posenc_ref.learned.LearnedPositionalEmbedding``'s table trained with ``torch.optim.AdamW`` (in
float64) on inputs that use only its first rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant

ASSIGNMENT = "03_learned"
OFFSET = 2


def _offset_rows(parameters: Mapping[str, Any]) -> dict[str, Any]:
    rows, longest = parameters["rows"], parameters["longest"]
    return {
        "EXPECTED": [OFFSET, longest - 1 + OFFSET, rows - longest],
        "MISTAKES": [
            ("the offset is ignored: the token at position p is encoded by row p + 2, so the first token uses row 2",
             [0, longest - 1, rows - longest]),
            ("rows 0 and 1 are forgotten: no token ever uses them, so they never receive a gradient either",
             [OFFSET, longest - 1 + OFFSET, rows - longest - OFFSET]),
            ("off by one: a sequence of M tokens has the positions 0 to M - 1, so its last token uses row M - 1 + 2",
             [OFFSET, longest + OFFSET, rows - longest - 1]),
            ("positions count from 0: the first token is at p = 0 and uses row 2",
             [OFFSET + 1, longest + OFFSET, rows - longest]),
        ],
    }


def measured_norm_ratio(learning_rate: float, weight_decay: float, steps: int) -> float:
    """Norm of the untrained rows 32..63 of a 64-row learned table after ``steps`` AdamW steps on 32-token
    inputs, over their norm before (float64)."""
    import torch

    from posenc_ref.learned import LearnedPositionalEmbedding

    torch.manual_seed(0)
    table = LearnedPositionalEmbedding(64, 8).double()
    untrained = table.weight.detach()[32:].norm().item()
    optimizer = torch.optim.AdamW(table.parameters(), lr=learning_rate, weight_decay=weight_decay)
    inputs = torch.randn(2, 32, 8, dtype=torch.float64)
    for _ in range(steps):
        optimizer.zero_grad()
        table(inputs).square().mean().backward()  # only rows 0..31 receive a gradient
        optimizer.step()
    return table.weight.detach()[32:].norm().item() / untrained


def _decay(parameters: Mapping[str, Any]) -> dict[str, Any]:
    rate, decay, steps = parameters["lr"], parameters["weight_decay"], parameters["steps"]
    ratio = measured_norm_ratio(rate, decay, steps)
    return {
        "EXPECTED": [ratio],
        "MISTAKES": [
            (("rows without a gradient are not left alone by AdamW: its decoupled weight decay multiplies every entry "
             "by 1 - lr * weight_decay at every step, gradient or not"),
             [1.0]),
            (("the shrinking compounds: each step multiplies by 1 - lr * weight_decay, so after s steps the factor is "
             "that number to the power s, not 1 - s * lr * weight_decay"),
             [1 - steps * rate * decay]),
            ("that is the ratio of the squared norms; the ratio of the norms is its square root", [ratio**2]),
            (("AdamW multiplies the decay by the learning rate: the factor per step is 1 - lr * weight_decay, not "
             "1 - weight_decay or 1 - lr"),
             [0.0]),
        ],
    }


VARIANTS = (
    Variant.of(ASSIGNMENT, "3.6", "offset_test", _offset_rows),
    Variant.of(ASSIGNMENT, "3.7", "decay_test", _decay),
)
