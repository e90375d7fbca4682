"""The items of chapters 1 to 3 that ask for a prediction, a diagnosis, a derivation or a design (1.6, 1.7,
2.5, 2.6, 2.7, 3.4, 3.5, 3.6, 3.7), graded here as the grader grades them, without a notebook kernel.

Each answer runs in a fresh namespace after the notebook's imports (and, for 2.6, the locked cell that defines
the implementation to diagnose); then the cell's visible test, then the kernel's part of its hidden tests,
whose reports :func:`autograder.verdicts.verdict.decide` judges. The source's solution and other right forms
must pass; each plausible wrong answer must fail with the message that names its mistake. The expected
constants written in the hidden tests are checked against an independent computation with posenc_ref.
"""

from __future__ import annotations

import math

import pytest
import torch
from item_grading import adam_l2_entry, grade_item, hidden_constants, source_cells
from planted import solutions

# The locked code cells that the answers of an item may use, beyond the notebook's imports.
SETUP = {"planted_bug_test": ("planted_bug_code",)}


def grade(monkeypatch, assignment: str, test_id: str, answer: str) -> tuple[bool, str]:
    """Run ``answer`` and the test cell ``test_id`` here, as the grader's kernel would, and decide the item."""
    return grade_item(monkeypatch, assignment, test_id, answer, setup=SETUP.get(test_id, ()))


# 3.1 and 3.2: an answer written out, with any of its parts replaced (padded_module(positions=...)).
PADDED_PARTS = {
    "padding": "",
    "init": "nn.init.normal_(self.position_embeddings.weight, std=0.02)",
    "check": ("real = int(attention_mask.sum(dim=-1).max())\n"
              "        if real > self.max_len:\n"
              "            raise ValueError(f\"{real} real tokens but max_len is {self.max_len}\")"),
    "positions": "(attention_mask.cumsum(dim=-1) - 1).clamp(min=0)",
    "output": "embeddings + self.position_embeddings(position_ids)",
}
PADDED_MODULE = """
class PaddedLearnedPositions(nn.Module):
    def __init__(self, max_len, d):
        super().__init__()
        self.max_len = max_len
        self.position_embeddings = nn.Embedding(max_len, d{padding})
        {init}

    def forward(self, embeddings, attention_mask):
        {check}
        position_ids = {positions}
        return {output}
"""


def padded_module(**parts: str) -> str:
    """The source of a PaddedLearnedPositions whose named parts replace those of :data:`PADDED_PARTS`."""
    return PADDED_MODULE.format(**{**PADDED_PARTS, **parts})


def padded_check(condition: str, message: str = "f\"{real} real tokens but max_len is {self.max_len}\"") -> str:
    """A length check of forward that raises a ValueError with ``message`` when ``condition`` holds."""
    return (f"real = int(attention_mask.sum(dim=-1).max())\n        if {condition}:\n"
            f"            raise ValueError({message})")


# A right answer other than the source's: one loop over the sequences, the padded places at row 1 (as older
# versions of Hugging Face's generate), the rows read from the weight.
PADDED_BY_LOOP = """
class PaddedLearnedPositions(nn.Module):
    def __init__(self, max_len, d):
        super().__init__()
        self.position_embeddings = nn.Embedding(max_len, d)
        with torch.no_grad():
            self.position_embeddings.weight.normal_(0.0, 0.02)

    def forward(self, embeddings, attention_mask):
        rows = self.position_embeddings.weight.shape[0]
        position_ids = torch.ones_like(attention_mask)
        for b, mask in enumerate(attention_mask.tolist()):
            real = sum(mask)
            if real > rows:
                raise ValueError(f"sequence {b} has {real} real tokens; max_len = {rows}")
            position_ids[b, len(mask) - real:] = torch.arange(real)
        return embeddings + self.position_embeddings.weight[position_ids]
"""


# (assignment, answer cell, test cell, answer): right answers, the source's solution first.
RIGHT = [
    ("01_permutation", "attention_answer", "attention_test", None),
    ("01_permutation", "attention_answer", "causal_test", None),
    ("01_permutation", "equivariance_answer", "equivariance_test", None),
    (
        "01_permutation",
        "equivariance_answer",
        "equivariance_test",
        ("def equivariance_error(layer, x, shuffle):\n"
        "    order = shuffle.argmax(dim=1)\n"
        "    return float((layer(x[:, order]) - layer(x)[:, order]).abs().max())"),
    ),
    ("01_permutation", "conclusions_answer", "conclusions_test", None),
    ("01_permutation", "conclusions_answer", "conclusions_test", "agreeing_rows = {5, 2, 1, 0}"),
    ("01_permutation", "conclusions_answer", "conclusions_test", "agreeing_rows = (0.0, 1, 2, 5, 5)"),
    ("01_permutation", "maps_answer", "maps_test", None),
    ("01_permutation", "maps_answer", "maps_test", 'equivariant_maps = [" H", "f", "B", "a"]'),
    ("01_permutation", "blind_answer", "blind_test", None),
    ("01_permutation", "blind_answer", "blind_test", "blind_pair = [(3, 1, 3, 0, 0), [0, 3, 1, 3, 0]]"),
    ("01_permutation", "blind_answer", "blind_test", "blind_pair = ([9, 9, 9, 9, 8], [9, 9, 8, 9, 9])"),
    ("01_permutation", "count_answer", "count_test", None),
    ("01_permutation", "count_answer", "count_test", "prefix_outputs = [1.67, 1.67, 1.67, 1.5, 1.4, 1.33, 1.29, 1.25]"),
    (
        "01_permutation",
        "count_answer",
        "count_test",
        "from fractions import Fraction\nprefix_outputs = [Fraction(3 + max(p, 2), max(p, 2) + 1) for p in range(8)]",
    ),
    ("02_sinusoidal", "most_moved_answer", "most_moved_test", None),
    ("02_sinusoidal", "most_moved_answer", "most_moved_test", "most_moved = (1.0, 1.21)"),
    ("02_sinusoidal", "decode_answer", "decode_test", None),
    (
        "02_sinusoidal",
        "decode_answer",
        "decode_test",
        ("def decode_positions(rows, base=10000.0):\n"
        "    d = rows.shape[1]\n"
        "    turned = torch.atan2(rows[:, -2], rows[:, -1]).double() % (2 * math.pi)\n"
        "    return [int(t / base ** (-(d - 2) / d) + 0.5) for t in turned]"),
    ),
    ("02_sinusoidal", "first_turn_answer", "first_turn_test", None),
    (
        "02_sinusoidal",
        "first_turn_answer",
        "first_turn_test",
        "first_full_turn = (7.0, 20.0, 63.0, 199.0, 629.0, 1987.0, 6284.0, 19870.0)",
    ),
    ("02_sinusoidal", "planted_bug_answer", "planted_bug_test", None),
    ("02_sinusoidal", "planted_bug_answer", "planted_bug_test",
     'bug_evidence = [0, 0.09, 0.01, 0.001, 0]\nplanted_bug = " c "'),
    ("02_sinusoidal", "dot_answer", "dot_test", None),
    (
        "02_sinusoidal",
        "dot_answer",
        "dot_test",
        'pe_gap_d6_at_k = "2*(1 - cos(10*10^(-8/3))) + 2*(1 - cos(10)) + 4*sin(10*10^(-4/3)/2)^2"',
    ),
    ("03_learned", "learned_answer", "learned_test", None),
    ("03_learned", "learned_answer", "learned_test", PADDED_BY_LOOP),
    ("03_learned", "learned_answer", "learned_test", padded_module()),
    ("03_learned", "learned_answer", "length_test", None),
    ("03_learned", "learned_answer", "length_test", PADDED_BY_LOOP),
    ("03_learned", "learned_answer", "length_test", padded_module()),
    (
        "03_learned",
        "learned_answer",
        "length_test",
        padded_module(check=padded_check(
            "real > self.max_len",
            'f"the table has {self.max_len} rows but a sequence has {real} real tokens"')),
    ),
    ("03_learned", "extend_answer", "extend_test", None),
    ("03_learned", "extend_answer", "extend_test", 'extend_plan = " b"'),
    ("03_learned", "packed_rows_answer", "packed_rows_test", None),
    ("03_learned", "packed_rows_answer", "packed_rows_test", "packed_never_trained = 440.0"),
    ("03_learned", "packed_counts_answer", "packed_counts_test", None),
    ("03_learned", "packed_counts_answer", "packed_counts_test", "packed_counts = (20.0, 12)"),
    ("03_learned", "offset_answer", "offset_test", None),
    ("03_learned", "offset_answer", "offset_test", "offset_rows = (2.0, 101.0, 412.0)"),
    ("03_learned", "decay_answer", "decay_test", None),
    ("03_learned", "decay_answer", "decay_test", "untrained_entry = 0.09"),
    ("03_learned", "decay_answer", "decay_test", "untrained_entry = 0.0902"),
    ("03_learned", "decay_answer", "decay_test", "from fractions import Fraction\nuntrained_entry = Fraction(9, 100)"),
]


PREFIX_BODY = """
def self_attention(x, w_query, w_key, w_value, prefix=None):
    scores = (x @ w_query) @ (x @ w_key).T / math.sqrt(w_key.shape[1])
    if prefix is not None:
        i, j = torch.arange(x.shape[0])[:, None], torch.arange(x.shape[0])[None, :]
        scores = scores.masked_fill(~({visible}), float("-inf"))
    return torch.softmax(scores, dim=-1) @ (x @ w_value)
"""

# (assignment, test cell, wrong answer, a fragment of the feedback that names the mistake)
WRONG = [
    ("01_permutation", "attention_test", PREFIX_BODY.format(visible="j <= i"), "the prefix is ignored"),
    ("01_permutation", "attention_test", PREFIX_BODY.format(visible="(j <= i) | (j <= prefix)"), "too many keys"),
    ("01_permutation", "attention_test", PREFIX_BODY.format(visible="(j <= i) | (i < prefix)"), "too many keys"),
    ("01_permutation", "causal_test", PREFIX_BODY.format(visible="(j >= i) | (j < prefix)"), "causal output of the first"),
    # Round 12: no attention at all (each token its own value) is causal too; a later token must see earlier ones.
    ("01_permutation", "causal_test", "def self_attention(x, w_query, w_key, w_value, prefix=None):\n    return x @ w_value",
     "row 3 did not change when token 0"),
    (
        "01_permutation",
        "equivariance_test",
        "def equivariance_error(layer, x, shuffle):\n    return (layer(shuffle @ x) - layer(x)).abs().max().item()",
        "this measures invariance",
    ),
    (
        "01_permutation",
        "equivariance_test",
        ("def equivariance_error(layer, x, shuffle):\n"
        "    return (layer(shuffle @ x) - shuffle.T @ layer(x)).abs().max().item()"),
        "inverse permutation",
    ),
    ("01_permutation", "maps_test", 'equivariant_maps = {"a", "b", "f"}', "missing ['h']"),
    ("01_permutation", "maps_test", 'equivariant_maps = {"a", "b", "d", "f", "h"}', "invariance, not"),
    ("01_permutation", "maps_test", 'equivariant_maps = {"a", "b", "f", "h", "x"}', "one of the letters a to h"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 2, 1], [1, 2, 3, 2, 1])", "the same sequence twice"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 2, 1], [1, 2, 3, 4, 5])", "do not hold the same tokens"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 2, 1], [2, 1, 3, 1, 2])", "both are palindromes"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])", "both are not palindromes"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 2, 1], [1, 1, 2, 2, 3.5])", "integers from 0 to 9"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 2, 1], [1, 1, 2, 2, 10])", "integers from 0 to 9"),
    ("01_permutation", "count_test", "prefix_outputs = [3, 2, 1.67, 1.5, 1.4, 1.33, 1.29, 1.25]", "the prefix is ignored"),
    ("01_permutation", "count_test", "prefix_outputs = [1.5] * 4 + [1.4, 1.33, 1.29, 1.25]", "too many keys"),
    ("01_permutation", "count_test", "prefix_outputs = [1.25] * 8", "attention without the mask"),
    ("01_permutation", "count_test", "prefix_outputs = [1 / max(p + 1, 3) for p in range(8)]", "the weights that each"),
    ("01_permutation", "count_test", "prefix_outputs = [1.67, 1.67, 1.5, 1.5, 1.4, 1.33, 1.29, 1.25]", "the first is entry 2"),
    ("01_permutation", "conclusions_test", "agreeing_rows = [5, 0]", "leaves in place"),
    ("01_permutation", "conclusions_test", "agreeing_rows = [5]", "too many keys"),
    ("01_permutation", "conclusions_test", "agreeing_rows = list(range(6))", "not equivariant row by row"),
    ("01_permutation", "conclusions_test", "agreeing_rows = [0, 1, 2]", "not the rows that agree"),
    ("01_permutation", "conclusions_test", "agreeing_rows = [0, 1, 2, 6]", "from 0 to 5"),
    ("01_permutation", "conclusions_test", "agreeing_rows = 5", "a list of row indices"),
    ("01_permutation", "blind_test", "blind_pair = ([1, 2, 3, 3, 2, 1], [1, 1, 2, 2, 3, 3])", "list of 5 token ids"),
    ("02_sinusoidal", "most_moved_test", "most_moved = [0, 0.43]", "pair 0 turns fastest"),
    ("02_sinusoidal", "most_moved_test", "most_moved = [0, 13]", "the angle pair 0 turns"),
    ("02_sinusoidal", "most_moved_test", "most_moved = [1, 1.47]", "squared distance"),
    ("02_sinusoidal", "most_moved_test", "most_moved = [1, 1.77]", "the exponent runs over features"),
    ("02_sinusoidal", "most_moved_test", "most_moved = [1, 1.3]", "got 1.3, expected"),
    (
        "02_sinusoidal",
        "decode_test",
        ("def decode_positions(rows, base=10000.0):\n"
        "    d = rows.shape[1]\n"
        "    return [round(torch.atan2(row[-2], row[-1]).item() / base ** (-(d - 2) / d)) for row in rows]"),
        "returns angles in (-pi, pi]",
    ),
    (
        "02_sinusoidal",
        "decode_test",
        ("def decode_positions(rows, base=10000.0):\n"
        "    return [round(torch.atan2(row[0], row[1]).item() % (2 * math.pi)) for row in rows]"),
        "pair 0 alone",
    ),
    (
        "02_sinusoidal",
        "decode_test",
        ("def decode_positions(rows, base=10000.0):\n"
        "    d = rows.shape[1]\n"
        "    return [round((torch.atan2(row[-1], row[-2]).item() % (2 * math.pi)) / base ** (-(d - 2) / d))\n"
        "            for row in rows]"),
        "arguments of atan2 are swapped",
    ),
    (
        "02_sinusoidal",
        "first_turn_test",
        "first_full_turn = [6.28, 19.87, 62.83, 198.69, 628.32, 1986.92, 6283.19, 19869.18]",
        "these are the wavelengths",
    ),
    (
        "02_sinusoidal",
        "first_turn_test",
        "first_full_turn = [6, 19, 62, 198, 628, 1986, 6283, 19869]",
        "rounded down",
    ),
    (
        "02_sinusoidal",
        "first_turn_test",
        "first_full_turn = [math.ceil(math.pi * 10000 ** (2 * i / 16)) for i in range(8)]",
        "half a turn",
    ),
    (
        "02_sinusoidal",
        "first_turn_test",
        "first_full_turn = [math.ceil(2 * math.pi * 10000 ** (4 * i / 16)) for i in range(8)]",
        "the exponent is doubled",
    ),
    (
        "02_sinusoidal",
        "first_turn_test",
        "first_full_turn = [math.ceil(2 * math.pi * 10000 ** (i / 16)) for i in range(8)]",
        "the exponent runs over features",
    ),
    (
        "02_sinusoidal",
        "first_turn_test",
        "first_full_turn = [math.ceil(360 * 10000 ** (2 * i / 16)) for i in range(8)]",
        "treated as degrees",
    ),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [1.68, 0.11, 0.0101, 0.001, 0]\nplanted_bug = "C"',
     "M_1 is applied the wrong way round"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0, 0.0, 0.0, 0.0]\nplanted_bug = "C"', "got 0"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099]\nplanted_bug = "C"', "5 entries"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099, 0.001, 0.0]\nplanted_bug = "A"', "starts with the row (1, 0, 1, 0, ...)"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099, 0.001, 0.0]\nplanted_bug = "B"', "starts with d/2 zeros"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099, 0.001, 0.0]\nplanted_bug = "D"', "turns faster than"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099, 0.001, 0.0]\nplanted_bug = "E"', "starts with PE(1)"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099, 0.001, 0.0]\nplanted_bug = "F"', "in degrees pair 0 would turn by pi/180"),
    ("02_sinusoidal", "planted_bug_test", 'bug_evidence = [0.0, 0.0898, 0.0099, 0.001, 0.0]\nplanted_bug = "G"', "must be one of"),
    ("02_sinusoidal", "dot_test", 'pe_gap_d6_at_k = "cos(10) + cos(10/10000^(1/3)) + cos(10/10000^(2/3))"',
     "that is the dot product"),
    ("02_sinusoidal", "dot_test", 'pe_gap_d6_at_k = "3 - 2*(cos(10) + cos(10/10000^(1/3)) + cos(10/10000^(2/3)))"',
     "there are two rows"),
    ("02_sinusoidal", "dot_test", 'pe_gap_d6_at_k = "6 - cos(10) - cos(10/10000^(1/3)) - cos(10/10000^(2/3))"',
     "the factor 2 of the cross term"),
    ("02_sinusoidal", "dot_test", 'pe_gap_d6_at_k = "3 - cos(10) - cos(10/10000^(1/3)) - cos(10/10000^(2/3))"',
     "half the squared distance"),
    (
        "02_sinusoidal",
        "dot_test",
        'pe_gap_d6_at_k = "6 - 2*cos(10) - 2*cos(10/10000^(2/3)) - 2*cos(10/10000^(4/3))"',
        "the exponent is doubled",
    ),
    (
        "02_sinusoidal",
        "dot_test",
        'pe_gap_d6_at_k = "6 - 2*cos(10) - 2*cos(10/10000^(1/6)) - 2*cos(10/10000^(1/3))"',
        "the exponent runs over features",
    ),
    (
        "02_sinusoidal",
        "dot_test",
        'pe_gap_d6_at_k = "6 - 2*cos(10*pi/180) - 2*cos(10*pi/180/10000^(1/3)) - 2*cos(10*pi/180/10000^(2/3))"',
        "treated as degrees",
    ),
    ("02_sinusoidal", "dot_test", 'pe_gap_d6_at_k = "3.890210"', "numerically close"),
    (
        "03_learned",
        "learned_test",
        padded_module(positions="torch.arange(attention_mask.shape[1]).expand_as(attention_mask)"),
        "the mask is ignored",
    ),
    ("03_learned", "learned_test", padded_module(positions="attention_mask.cumsum(dim=-1)"), "first real token got row 1"),
    (
        "03_learned",
        "learned_test",
        padded_module(positions="(attention_mask.cumsum(dim=0) - 1).clamp(min=0)"),
        "counted down the batch",
    ),
    (
        "03_learned",
        "learned_test",
        padded_module(positions="(attention_mask.flip(-1).cumsum(dim=-1).flip(-1) - 1).clamp(min=0)"),
        "count back from the last token",
    ),
    ("03_learned", "learned_test", padded_module(output="self.position_embeddings(position_ids)"), "the rows alone"),
    ("03_learned", "learned_test", padded_module(padding=", padding_idx=0"), "row 0 receives no gradient"),
    (
        "03_learned",
        "learned_test",
        padded_module(output="embeddings + self.position_embeddings.weight.detach()[position_ids]"),
        "no gradient reaches",
    ),
    ("03_learned", "learned_test", padded_module(init="pass"), "nn.Embedding's own initialisation"),
    ("03_learned", "learned_test", padded_module(init="nn.init.normal_(self.position_embeddings.weight, std=0.02**2)"),
     "std 0.0004"),
    ("03_learned", "length_test", padded_module(check=padded_check("real >= self.max_len")), "off by one"),
    (
        "03_learned",
        "length_test",
        padded_module(check=padded_check("embeddings.shape[1] > self.max_len")),
        "a padded place takes no row",
    ),
    (
        "03_learned",
        "length_test",
        padded_module(check=padded_check("int(attention_mask.sum()) > self.max_len")),
        "nor the real tokens of all its sequences together",
    ),
    ("03_learned", "length_test", padded_module(check="pass"), "raised IndexError"),
    (
        "03_learned",
        "length_test",
        padded_module(check="pass", positions="(attention_mask.cumsum(dim=-1) - 1).clamp(0, self.max_len - 1)"),
        "must raise a ValueError on 5 real tokens",
    ),
    (
        "03_learned",
        "length_test",
        padded_module(check=padded_check("int(attention_mask[-1].sum()) > self.max_len")),
        "11 real tokens for a table of 10 rows raised IndexError",
    ),
    (
        "03_learned",
        "length_test",
        padded_module(check=padded_check("int(attention_mask[-1].sum()) > self.max_len"),
                      positions="(attention_mask.cumsum(dim=-1) - 1).clamp(0, self.max_len - 1)"),
        "raised no error",
    ),
    (
        "03_learned",
        "length_test",
        padded_module(check=padded_check("real > self.max_len", '"the sequence is too long for the table"')),
        "it must name the limit (max_len, or its value 10) and the number of real tokens",
    ),
    ("03_learned", "extend_test", 'extend_plan = "A"', "frozen random rows never learn"),
    ("03_learned", "extend_test", 'extend_plan = "C"', "trained to read the learned rows"),
    ("03_learned", "extend_test", 'extend_plan = "D"', "the same code"),
    ("03_learned", "packed_rows_test", "packed_never_trained = 512 - 128", "the larger of the two lengths"),
    ("03_learned", "packed_rows_test", "packed_never_trained = 439", "rows m and above never learn"),
    ("03_learned", "packed_rows_test", "packed_never_trained = 441", "position m - 1 included"),
    ("03_learned", "packed_counts_test", "packed_counts = [16, 16]", "the rows cut documents"),
    ("03_learned", "packed_counts_test", "packed_counts = [6, 6]", "the document-id mask restarts"),
    ("03_learned", "packed_counts_test", "packed_counts = [22, 10]", "adds no piece"),
    ("03_learned", "packed_counts_test", "packed_counts = [20, 13]", "got 13, expected 12"),
    ("03_learned", "offset_test", "offset_rows = [0, 99, 412]", "the offset is ignored"),
    ("03_learned", "offset_test", "offset_rows = [2, 101, 410]", "rows 0 and 1 are forgotten"),
    ("03_learned", "offset_test", "offset_rows = [2, 102, 411]", "off by one"),
    ("03_learned", "offset_test", "offset_rows = [3, 102, 412]", "positions count from 0"),
    ("03_learned", "decay_test", "untrained_entry = 0.1 * (1 - 1e-4 * 0.1) ** 100", "that is AdamW's decoupled decay"),
    ("03_learned", "decay_test", "untrained_entry = 0.1", "or no change at all"),
    ("03_learned", "decay_test", "untrained_entry = 0.0", "got 0, expected 0.0901744"),
]


@pytest.mark.parametrize("assignment, answer_id, test_id, answer", RIGHT)
def test_right_answers_pass_the_visible_and_the_hidden_tests(monkeypatch, assignment, answer_id, test_id, answer):
    source = solutions(assignment)[answer_id] if answer is None else answer
    assert grade(monkeypatch, assignment, test_id, source) == (True, "")


@pytest.mark.parametrize("assignment, test_id, answer, fragment", WRONG)
def test_each_plausible_wrong_answer_fails_with_the_message_naming_its_mistake(
    monkeypatch, assignment, test_id, answer, fragment
):
    passed, message = grade(monkeypatch, assignment, test_id, answer)
    assert not passed and fragment in message, message


# ------------------------------------------------------------------------------ the constants, derived again


def test_counting_outputs_are_what_the_reference_attention_computes_with_the_prefix_mask():
    from posenc_ref.attention import attention

    values = torch.tensor([3.0] + [1.0] * 7, dtype=torch.float64).reshape(1, 1, 8, 1)
    zeros = torch.zeros(1, 1, 8, 1, dtype=torch.float64)  # all queries and keys zero: every score equal
    allowed = torch.ones(8, 8, dtype=torch.bool).tril()
    allowed[:, :3] = True  # the answer key's prefix k = 3: every query sees the keys 0, 1, 2
    prefix = attention(zeros, zeros, values, mask=allowed).flatten().tolist()
    constants = hidden_constants("01_permutation", "count_test")
    assert prefix == pytest.approx(constants["EXPECTED"], abs=1e-12)
    causal = attention(zeros, zeros, values, causal=True).flatten().tolist()
    assert causal == pytest.approx(constants["MISTAKES"][0][1], abs=1e-12)
    unmasked = attention(zeros, zeros, values).flatten().tolist()
    assert unmasked == pytest.approx(constants["MISTAKES"][2][1], abs=1e-12)


def test_prefix_outputs_are_what_the_reference_attention_computes_with_that_mask():
    from posenc_ref.attention import attention

    constants = hidden_constants("01_permutation", "attention_test")
    x = torch.tensor([[1.0, 0.0, -1.0], [0.5, 2.0, 0.25], [-1.5, 0.5, 1.0], [0.0, -0.5, 2.0]], dtype=torch.float64)
    w_query = torch.tensor([[0.2, -1.0], [1.0, 0.4], [-0.3, 0.6]], dtype=torch.float64)
    w_key = torch.tensor([[1.2, 0.1], [-0.4, 0.9], [0.5, -0.7]], dtype=torch.float64)
    w_value = torch.tensor([[1.0, 0.0, 0.5], [0.0, -1.0, 1.0], [2.0, 0.5, 0.0]], dtype=torch.float64)
    q, k, v = ((x @ w)[None, None] for w in (w_query, w_key, w_value))  # (1, 1, 4, d)
    i, j = torch.arange(4)[:, None], torch.arange(4)[None, :]

    def outputs(allowed):
        return attention(q, k, v, mask=allowed).flatten().tolist()

    assert outputs((j <= i) | (j < 3)) == pytest.approx(constants["EXPECTED_C"], abs=1e-11)
    assert outputs(j <= i) == pytest.approx(constants["MISTAKES_C"][0][1], abs=1e-11)
    assert outputs((j <= i) | (j <= 3)) == pytest.approx(constants["MISTAKES_C"][1][1], abs=1e-11)
    assert outputs(torch.ones(4, 4, dtype=torch.bool)) == pytest.approx(constants["EXPECTED_B"], abs=1e-11)


def test_the_equivariant_maps_are_those_a_random_shuffle_commutes_with():
    """Each map of 1.5 built here and tried on a shuffle: the equivariant ones are exactly the hidden test's."""
    torch.manual_seed(0)
    n, d = 6, 4
    x, table = torch.randn(n, d, dtype=torch.float64), torch.randn(n, d, dtype=torch.float64)
    w = [torch.randn(d, d, dtype=torch.float64) for _ in range(5)]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]

    def attend(t, bias=0.0, allowed=None):
        scores = (t @ w[0]) @ (t @ w[1]).T + bias
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return torch.softmax(scores, dim=-1) @ (t @ w[2])

    def block(t):
        t = torch.nn.functional.layer_norm(t + attend(t), (d,))
        return t + torch.relu(t @ w[3]) @ w[4]

    maps = {
        "a": lambda t: torch.softmax(t, dim=0),
        "b": lambda t: t - t.mean(dim=0),
        "c": lambda t: t + table,
        "d": lambda t: t[t[:, 0].argsort()],
        "e": lambda t: attend(t, bias=-(i - j).abs()),
        "f": block,
        "g": lambda t: torch.cummax(t, dim=0).values,
        "h": lambda t: attend(t, allowed=i != j),
    }
    order = torch.randperm(n)
    equivariant = {name for name, f in maps.items() if torch.allclose(f(x[order]), f(x)[order], atol=1e-10)}
    assert equivariant == set(hidden_constants("01_permutation", "maps_test")["EXPECTED_MAPS"])


def test_the_farthest_pair_of_the_answer_key_is_measured_on_the_table():
    from posenc_ref.sinusoidal import sinusoidal_table

    table = sinusoidal_table(120, 8, dtype=torch.float64)  # (120, 8)
    moved = (table[113] - table[100]).reshape(4, 2).norm(dim=-1)  # (4,): each pair between p = 100 and 113
    expected = hidden_constants("02_sinusoidal", "most_moved_test")["EXPECTED"]
    assert expected == [int(moved.argmax()), pytest.approx(moved.max().item(), abs=1e-12)]


def test_the_decoded_positions_are_those_of_the_rows_and_the_mistakes_are_what_they_say():
    """The rows built by posenc_ref (not the hidden test's own builder) decode to the hidden test's positions."""
    from posenc_ref.sinusoidal import sinusoidal_frequencies, sinusoidal_table

    constants = hidden_constants("02_sinusoidal", "decode_test")
    found, wrapped, first_pair = [], [], []
    for positions, d, base in (([0, 5, 6, 7, 150, 3000, 12345, 19000], 16, 1e4), ([3, 70, 150, 197], 8, 100.0)):
        assert max(positions) < 2 * math.pi / sinusoidal_frequencies(d, base=base)[-1]  # within one slow turn
        rows = torch.cat([sinusoidal_table(1, d, base=base, offset=p) for p in positions])  # (n, d), float32
        slow = torch.atan2(rows[:, -2].double(), rows[:, -1].double())  # (n,), in (-pi, pi]
        omega = sinusoidal_frequencies(d, base=base)[-1].item()
        found += [round(angle / omega) for angle in torch.remainder(slow, 2 * math.pi).tolist()]
        wrapped += [round(angle / omega) for angle in slow.tolist()]
        first_pair += [round(a) for a in torch.remainder(torch.atan2(rows[:, 0], rows[:, 1]).double(), 2 * math.pi).tolist()]
    assert found == constants["EXPECTED"]
    assert wrapped == constants["MISTAKES"][0][1] and first_pair == constants["MISTAKES"][1][1]


def test_the_first_full_turn_is_read_from_the_table():
    """Unwrap each pair's angle along the table and find where it first reaches a full turn."""
    from posenc_ref.sinusoidal import sinusoidal_table

    table = sinusoidal_table(20000, 16, dtype=torch.float64)  # (20000, 16)
    first = []
    for pair in range(8):
        angle = torch.atan2(table[:, 2 * pair], table[:, 2 * pair + 1])  # (20000,), in (-pi, pi]
        steps = torch.remainder(angle.diff() + math.pi, 2 * math.pi) - math.pi  # each step's turn
        turned = torch.cat((torch.zeros(1, dtype=torch.float64), steps.cumsum(0)))  # (20000,)
        first.append(int(torch.nonzero(turned >= 2 * math.pi)[0]))
    assert first == hidden_constants("02_sinusoidal", "first_turn_test")["EXPECTED"]


def test_the_planted_bug_is_the_doubled_exponent_and_the_tools_show_it():
    from posenc_ref.sinusoidal import shift_matrix, sinusoidal_table

    namespace: dict = {"my_parameters": {"2.6": {"submission": 26}}}  # the one answer key's submission
    exec(source_cells("02_sinusoidal")["planted_bug_code"], namespace)  # noqa: S102
    d = 8
    assert namespace["base"] == 10000.0
    candidate = namespace["table"].double()  # (32, 8)
    assert tuple(candidate.shape) == (32, d)
    right = sinusoidal_table(32, d, dtype=torch.float64)
    assert torch.allclose(candidate[0], right[0])  # PE(0): not swapped (A), not halves (B), not shifted (E)
    moved = candidate[:-5] @ shift_matrix(5, d).T  # rows p moved by M_5
    gap = (moved - candidate[5:]).abs().amax(dim=0)  # (8,): per feature
    assert gap[:2].max() < 1e-5 and gap[2:4].min() > 0.1  # pair 0 is right (not F); pair 1 breaks the property
    turn = math.atan2(candidate[1, 2].item(), candidate[1, 3].item())
    assert turn == pytest.approx(0.01, abs=1e-5)  # pair 1 turns slower than 0.1 (so not D): 10000**(-4/8)
    doubled = 10000.0 ** (-4 * torch.arange(d // 2, dtype=torch.float64) / d)  # (4,)
    angles = torch.arange(32, dtype=torch.float64)[:, None] * doubled  # (32, 4)
    expected = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).reshape(32, d)
    assert torch.allclose(candidate, expected, atol=1e-5)
    constants = hidden_constants("02_sinusoidal", "planted_bug_test")
    assert constants["EXPECTED"] == "C"
    # The evidence: per pair the largest |T[p+1] - M_1 T[p]|, then ||T[0] - PE(0)||, measured here with the formula
    residual = [max(abs(math.sin((p + 1) * w) - math.sin(p * w + 10000 ** (-i / 4))) for p in range(31)
                    for w in [10000.0 ** (-i / 2)]) for i in range(4)]
    assert constants["EXPECTED_EVIDENCE"][0] < 1e-5 and constants["EXPECTED_EVIDENCE"][4] == 0
    assert constants["EXPECTED_EVIDENCE"][1:4] == pytest.approx(residual[1:4], abs=2e-3)


def test_the_squared_distance_at_distance_ten_is_the_expected_expression():
    import sympy

    from posenc_ref.sinusoidal import sinusoidal_table

    table = sinusoidal_table(60, 6, dtype=torch.float64)
    gaps = ((table[10:] - table[:-10]) ** 2).sum(dim=-1)  # (50,): |PE(p + 10) - PE(p)|^2
    [expected] = hidden_constants("02_sinusoidal", "dot_test")["EXPECTED"]
    value = float(sympy.sympify(expected))
    assert gaps.tolist() == pytest.approx([value] * 50, abs=1e-12)


def packed_position_ids(documents: list[int], context: int) -> list[list[int]]:
    """The position ids of the rows of C tokens cut from ``documents`` (their lengths) laid back to back: each
    document's ids count from 0, and each row starts again from 0 (built row by row, as a data loader would)."""
    stream = [(index, offset) for index, length in enumerate(documents) for offset in range(length)]
    rows = []
    for start in range(0, len(stream), context):
        row, ids = stream[start:start + context], []
        for place, (document, _) in enumerate(row):
            ids.append(0 if place == 0 or row[place - 1][0] != document else ids[-1] + 1)
        rows.append(ids)
    return rows


def gradient_counts(rows_of_ids: list[list[int]], table_rows: int) -> list[float]:
    """How many tokens each row of a table encodes: the gradient of the sum of the looked-up rows, summed over the
    features of posenc_ref's table, for the position ids of each training row."""
    from posenc_ref.learned import LearnedPositionalEmbedding

    table = LearnedPositionalEmbedding(table_rows, 2).double()
    for ids in rows_of_ids:
        table.weight[torch.tensor(ids)].sum().backward()
    return (table.weight.grad.sum(dim=-1) / 2).tolist()


def test_rows_of_3_4_are_the_rows_a_packed_training_run_reaches():
    """The answer key's corpus: documents of 1 to 72 tokens, one of 72 at the start of a row, packed into rows of
    128."""
    counts = gradient_counts(packed_position_ids([72, 56, *range(1, 73)], 128), 512)
    never = sum(count == 0 for count in counts)
    assert counts[71] > 0 and never == 512 - 72
    assert hidden_constants("03_learned", "packed_rows_test")["EXPECTED"] == [never]
    long_documents = gradient_counts(packed_position_ids([300, 17, 300], 128), 512)  # longer than a row
    assert sum(count == 0 for count in long_documents) == 512 - 128


def test_counts_of_3_5_are_those_of_the_packed_stream():
    """16 documents of 48 tokens fill 6 rows of 128 tokens: the tokens that rows 0 and 47 encode."""
    rows_of_ids = packed_position_ids([48] * 16, 128)
    assert [len(ids) for ids in rows_of_ids] == [128] * 6
    counts = gradient_counts(rows_of_ids, 128)
    assert hidden_constants("03_learned", "packed_counts_test")["EXPECTED"] == [counts[0], counts[47]]
    assert max(index for index, count in enumerate(counts) if count) == 47


def test_offset_rows_are_the_rows_that_receive_a_gradient():
    from posenc_ref.learned import LearnedPositionalEmbedding

    table = LearnedPositionalEmbedding(512, 2)
    for length in range(1, 101):
        table(torch.zeros(1, length, 2), offset=2).sum().backward()
    learned = torch.nonzero(table.weight.grad.abs().sum(dim=-1)).flatten().tolist()
    assert [learned[0], learned[-1], 512 - len(learned)] == hidden_constants("03_learned", "offset_test")["EXPECTED"]


def test_the_rows_of_3_1_are_those_of_a_loop_over_each_sequence_and_of_gpt2_with_generates_positions():
    """EXPECTED and each mistake of 3.1, built token by token in a loop over the sequences; EXPECTED again from a
    GPT-2 table read at the position ids that Hugging Face's generate builds from the mask; the gradient as the
    count of real tokens at each position."""
    from transformers import GPT2Config, GPT2LMHeadModel

    constants = hidden_constants("03_learned", "learned_test")
    mask_rows = [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]  # as the hidden test's
    table = torch.arange(12, dtype=torch.float32).reshape(6, 2) / 8  # W[p, j] = (2p + j) / 8
    embeddings = 1 + torch.arange(30, dtype=torch.float32).reshape(3, 5, 2) / 4  # as the hidden test's
    rows_at: dict[str, list[float]] = {name: [] for name in ("right", "start", "one", "batch", "back", "alone")}
    counts = [0] * 6
    for b, mask in enumerate(mask_rows):
        before = 0  # the real tokens before this place in sequence b
        for s, real in enumerate(mask):
            if not real:
                continue
            after = sum(mask[s + 1:])
            down = sum(mask_rows[above][s] for above in range(b + 1)) - 1
            for name, position in (("right", before), ("start", s), ("one", before + 1), ("batch", down),
                                   ("back", after)):
                rows_at[name] += (embeddings[b, s] + table[position]).tolist()
            rows_at["alone"] += table[before].tolist()
            counts[before] += 1
            before += 1
    assert rows_at["right"] == constants["EXPECTED"]
    assert [wrong for _, wrong in constants["MISTAKES"]] == [
        rows_at[name] for name in ("start", "one", "batch", "back", "alone")
    ]
    assert constants["EXPECTED_GRADIENT"] == [float(count) for count in counts for _ in range(2)]

    config = GPT2Config(n_embd=2, n_layer=1, n_head=1, n_positions=6, vocab_size=8, bos_token_id=0, eos_token_id=0)
    gpt2 = GPT2LMHeadModel(config)
    with torch.no_grad():
        gpt2.transformer.wpe.weight.copy_(table)
    mask = torch.tensor(mask_rows)
    position_ids = gpt2._prepare_position_ids_for_generation(torch.zeros_like(mask), {"attention_mask": mask})
    assert (position_ids[mask == 0] == 0).all()  # the id the prompt gives a padded place, as generate does
    with torch.no_grad():
        gpt2_rows = (embeddings + gpt2.transformer.wpe(position_ids))[mask == 1]  # (9, 2)
    assert gpt2_rows.flatten().tolist() == constants["EXPECTED"]


def test_adam_moves_the_untrained_entries_by_about_the_learning_rate_a_step():
    constants = hidden_constants("03_learned", "decay_test")
    [expected] = constants["EXPECTED"]
    assert expected == pytest.approx(adam_l2_entry(1e-4, 100, 0.1), abs=1e-12)
    assert abs(expected - (0.1 - 1e-4 * 100)) < constants["TOLERANCE"] / 2  # "about lr a step" is accepted
    # a tenth of the weight decay: the same step but for eps (1e-8 against a gradient of 1e-4)
    assert adam_l2_entry(1e-4, 100, 0.1, weight_decay=0.01) == pytest.approx(expected, abs=1e-6)
    [adamw] = constants["MISTAKES"][0][1]
    assert adamw == pytest.approx(0.1 * (1 - 1e-4 * 0.1) ** 100, abs=1e-15)


def _planted_answers():
    from planted import CHEAT_PRELUDE, CHEATS, NAMED_MISTAKES, OTHER_MISTAKES

    yield "01_permutation", "blind_test", OTHER_MISTAKES["01_permutation"]["blind_answer"], "do not hold the same"
    yield "02_sinusoidal", "first_turn_test", NAMED_MISTAKES["doubled"]["02_sinusoidal"]["first_turn_answer"], (
        "exponent is doubled"
    )
    yield "03_learned", "length_test", OTHER_MISTAKES["03_learned"]["learned_answer"], "a padded place takes no row"
    yield "03_learned", "offset_test", OTHER_MISTAKES["03_learned"]["offset_answer"], "the offset is ignored"
    for answer_id, test_id in (
        ("most_moved_answer", "most_moved_test"),
        ("decode_answer", "decode_test"),
        ("first_turn_answer", "first_turn_test"),
        ("planted_bug_answer", "planted_bug_test"),
        ("dot_answer", "dot_test"),
    ):
        yield "02_sinusoidal", test_id, CHEAT_PRELUDE + CHEATS["02_sinusoidal"][answer_id], "is an object of type"


def test_the_planted_mistake_of_3_2_keeps_the_points_of_3_1(monkeypatch):
    from planted import OTHER_MISTAKES

    assert grade(monkeypatch, "03_learned", "learned_test", OTHER_MISTAKES["03_learned"]["learned_answer"]) == (True, "")


@pytest.mark.parametrize("assignment, test_id, answer, fragment", list(_planted_answers()))
def test_the_planted_class_loses_these_items_with_the_roundtrips_messages(
    monkeypatch, assignment, test_id, answer, fragment
):
    """The answers of tests/planted for the new items fail here already, as test_grader_roundtrip expects."""
    passed, message = grade(monkeypatch, assignment, test_id, answer)
    assert not passed and fragment in message, message
