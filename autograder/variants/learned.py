r"""The varied items of chapter 3 (learned tables): 3.4 and 3.5, a table trained on packed rows; 3.6, rows of a
table with an offset; 3.7, rows without a task gradient under Adam with coupled L2 decay.

3.4: documents of at most :math:`D` tokens are packed into rows of :math:`C` tokens, with positions counted from
each document's start and from each row's start: no position reaches :math:`\min(C, D)`, so
:math:`L - \min(C, D)` rows of an :math:`L`-row table never learn.

3.5: :math:`n` documents of exactly :math:`D` tokens fill :math:`r` rows of :math:`C` tokens (:math:`D < C`, and
:math:`C` no multiple of :math:`D`). Row 0 is used once per piece of a document; a row that starts inside a
document adds a piece. Row :math:`D - 1` is used only by the documents that no row boundary cuts. The expected
counts are found by walking the stream token by token.

3.6: a table of :math:`R` rows whose token at position :math:`p` uses row :math:`p + 2` (OPT, BART), trained on
lengths :math:`1, \dots, M`: the rows :math:`2, \dots, M + 1` learn, :math:`R - M` rows never do.

3.7: ``torch.optim.Adam(..., weight_decay=wd)`` adds :math:`wd \cdot w` to the gradient (coupled L2). For an entry
that no input reaches, that is its whole gradient, and Adam divides it by its own running size: the entry moves
by about ``lr`` a step towards 0, whatever ``wd`` is, not by the factor :math:`1 - lr \cdot wd` of AdamW. The
expected value is measured: ``posenc_ref.learned.LearnedPositionalEmbedding``'s table trained with
``torch.optim.Adam`` (in float64) on inputs that use only its first rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant

ASSIGNMENT = "03_learned"
OFFSET = 2
PACKED_CONTEXT = 128  # 3.4: the tokens of one training row
PERIODS = 2  # 3.5: the stream is PERIODS times the shortest whole number of documents that fills whole rows
WEIGHT_DECAY = 0.1  # 3.7: the same for every student; Adam's step for an untrained entry does not depend on it
TABLE_ROWS, TRAINED_ROWS, WIDTH = 64, 32, 8  # 3.7: the table and the inputs' length


def packed_stream(document: int, context: int) -> tuple[int, int]:
    """``(n, r)``: the documents and the rows of 3.5's stream, PERIODS times lcm(C, D) tokens."""
    tokens = PERIODS * math.lcm(document, context)
    return tokens // document, tokens // context


def _packed_rows(parameters: Mapping[str, Any]) -> dict[str, Any]:
    rows, longest = parameters["rows"], parameters["longest"]
    shortest_run = min(PACKED_CONTEXT, longest)
    return {
        "EXPECTED": [rows - shortest_run],
        "MISTAKES": [
            (("positions restart both at each document's start and at each row's start, so no position reaches "
              "the larger of the two lengths: the longest run of positions is the smaller one"),
             [rows - max(PACKED_CONTEXT, longest)]),
            ("off by one: a run of m tokens uses the positions 0 to m - 1, so rows m and above never learn",
             [rows - shortest_run - 1]),
            ("off by one: a run of m tokens uses the positions 0 to m - 1, position m - 1 included",
             [rows - shortest_run + 1]),
        ],
    }


def packed_counts(document: int, context: int) -> list[int]:
    """[tokens at position 0, tokens at position D - 1] over 3.5's stream, walked token by token."""
    documents, rows = packed_stream(document, context)
    counts = [0] * context
    position = 0
    for token in range(documents * document):
        starts_row, starts_document = token % context == 0, token % document == 0
        position = 0 if starts_row or starts_document else position + 1
        counts[position] += 1
    assert token + 1 == rows * context
    return [counts[0], counts[document - 1]]


def _packed_counts(parameters: Mapping[str, Any]) -> dict[str, Any]:
    document, context = parameters["document"], parameters["context"]
    documents, rows = packed_stream(document, context)
    return {
        "EXPECTED": packed_counts(document, context),
        "MISTAKES": [
            (("the rows cut documents: a document cut by the end of a row goes on in the next row from position 0, "
              "so it is two pieces, and neither reaches its last position"),
             [documents, documents]),
            (("the document-id mask restarts the positions at every document; counting along the row, position "
              "D - 1 would be used once per row"),
             [rows, rows]),
            (("a row that begins exactly where a document begins adds no piece: only the rows that start inside "
              "a document split one"),
             [documents + rows, documents - rows]),
        ],
    }


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


def measured_untrained_entry(learning_rate: float, steps: int, start: float) -> float:
    """An entry of rows 32..63 of a 64-row learned table, all set to ``start``, after ``steps`` steps of
    ``torch.optim.Adam(lr=learning_rate, weight_decay=WEIGHT_DECAY)`` on 32-token inputs (float64)."""
    import torch

    from posenc_ref.learned import LearnedPositionalEmbedding

    torch.manual_seed(0)
    table = LearnedPositionalEmbedding(TABLE_ROWS, WIDTH).double()
    with torch.no_grad():
        table.weight[TRAINED_ROWS:] = start
    optimizer = torch.optim.Adam(table.parameters(), lr=learning_rate, weight_decay=WEIGHT_DECAY)
    inputs = torch.randn(2, TRAINED_ROWS, WIDTH, dtype=torch.float64)
    for _ in range(steps):
        optimizer.zero_grad()
        table(inputs).square().mean().backward()  # only rows 0..31 receive a gradient from the loss
        optimizer.step()
    untrained = table.weight.detach()[TRAINED_ROWS:]
    assert bool((untrained == untrained[0, 0]).all())  # every untrained entry takes the same steps
    return untrained[0, 0].item()


def _adam_decay(parameters: Mapping[str, Any]) -> dict[str, Any]:
    rate, steps, start = parameters["lr"], parameters["steps"], parameters["start"]
    return {
        "TOLERANCE": rate * steps / 10,
        "EXPECTED": [measured_untrained_entry(rate, steps, start)],
        "MISTAKES": [
            # AdamW's factor leaves the entry within the tolerance of its start for every allowed setting: one
            # mistake, whose message names both
            (("that is AdamW's decoupled decay (a factor 1 - lr * weight_decay a step, which leaves the entry almost "
              "where it started), or no change at all; Adam's weight_decay adds weight_decay * w to the gradient, and "
              "Adam divides the gradient by its own running size, so the entry moves by about lr a step, whatever "
              "weight_decay is"),
             [start * (1 - rate * WEIGHT_DECAY) ** steps]),
        ],
    }


VARIANTS = (
    Variant.of(ASSIGNMENT, "3.4", "packed_rows_test", _packed_rows),
    Variant.of(ASSIGNMENT, "3.5", "packed_counts_test", _packed_counts),
    Variant.of(ASSIGNMENT, "3.6", "offset_test", _offset_rows),
    Variant.of(ASSIGNMENT, "3.7", "decay_test", _adam_decay),
)
