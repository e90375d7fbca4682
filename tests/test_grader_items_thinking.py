"""The items of chapters 4 to 6 that ask students to predict, diagnose and read evidence (4.7, 4.8, 5.6, 5.7,
6.3, 6.4, 6.5 and the quiz questions), and 4.1: the source's solution passes its visible and hidden tests,
right answers in other forms pass, and each plausible wrong answer passes the visible test (it checks the form
only) and fails the hidden one with the message that names its mistake. The hidden tests run as in grading: the
kernel's part here, with its reporter, and the grader's part through :func:`autograder.verdicts.verdict.decide`.
No kernel runs here. The expected answers are derived again here from the chapters' formulas.
"""

from __future__ import annotations

import math

import pytest
import torch
from item_grading import VISIBLE_FAILURE, grade_item, hidden_constants, parameter_cells, source_cells

SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solution_namespace(assignment: str, answer_id: str, *, before: tuple[str, ...] = ()) -> dict:
    """What the source's answer cell defines, run after the notebook's imports and the ``before`` cells."""
    sources = source_cells(assignment)
    namespace: dict = {}
    body = [line for line in sources[answer_id].splitlines() if line.strip() not in SOLUTION_MARKERS]
    for source in (sources["imports"], *(sources[cell] for cell in (*parameter_cells(sources), *before)), "\n".join(body)):
        exec(compile(source, answer_id, "exec"), namespace)  # noqa: S102 (source/ is trusted)
    return namespace


def check_item(assignment, answer_id, test_id, name, right_forms, wrong, monkeypatch, before=()):
    """The solution and ``right_forms`` pass; each ``(value, fragment)`` of ``wrong`` passes the visible test and
    fails the hidden one with a message holding ``fragment``."""
    solution = solution_namespace(assignment, answer_id, before=before)[name]
    for value in (solution, *right_forms):
        assert grade_item(monkeypatch, assignment, test_id, values={name: value}) == (True, ""), value
    for value, fragment in wrong:
        passed, message = grade_item(monkeypatch, assignment, test_id, values={name: value})
        assert not passed and not message.startswith(VISIBLE_FAILURE) and fragment in message, (value, message)
    return solution


def test_4_7_the_last_t5_bucket_begins_at_216(monkeypatch):
    solution = check_item(
        "04_relative", "t5_last_bucket_answer", "t5_last_bucket_test", "t5_last_bucket_start",
        [216.0, torch.tensor(216)],
        [
            (215, "off by one"),
            (240, "bidirectional=False"),
            (256, "max_distance is not where the last bucket begins"),
            (166, "for 32 buckets"),
            (113, "for max_distance 128"),
            (31, "number of the last bucket"),
            (63, "keys after the query"),
            (217, "got 217, expected"),
        ],
        monkeypatch,
    )
    assert solution == 216


def test_4_8_alibi_hides_the_better_token_from_4_and_from_334_positions(monkeypatch):
    solution = check_item(
        "04_relative", "alibi_hiding_answer", "alibi_hiding_test", "alibi_hiding_distance",
        [(4, 334), [4.0, 334.0]],
        [
            ([3, 333], "the key just before the query pays a penalty too"),
            ([334, 4], "the heads are the wrong way round: head 1"),
            ([333, 3], "the wrong way round, and the key just before"),
            ([4, 12], "got 12, expected"),
        ],
        monkeypatch,
    )
    assert solution == [4, 334]


def test_5_6_twenty_one_pairs_of_a_96_feature_head_never_turn_once(monkeypatch):
    solution = check_item(
        "05_rope", "slow_pairs_answer", "slow_pairs_test", "slow_pairs_llama3",
        [21.0, torch.tensor(21)],
        [
            (27, "do complete at least one turn"),
            (10, "base 10,000"),
            (15, "2 pi radians, not 1"),
            (34, "exponent is doubled"),
            (36, "not 360"),
            (29, "Llama 3's count"),
            (20, "got 20, expected"),
        ],
        monkeypatch,
    )
    assert solution == 21


def test_5_7_the_planted_bug_is_the_direction_of_the_rotation(monkeypatch):
    solution = check_item(
        "05_rope", "planted_bug_answer", "planted_bug_test", "planted_bug",
        [" Wrong_Direction "],
        [
            ("doubled_exponent", "pair 0 turns by m * base**0"),
            ("half_layout", "keeps it in features 0 and 1"),
            ("degrees", "a whole radian"),
            ("squared_positions", "passes the relative test"),
            ("none", "mystery_rope and RoPE disagree"),
        ],
        monkeypatch,
    )
    assert solution == "wrong_direction"


def test_5_7_the_planted_bug_is_detectable_with_the_tools_the_item_names():
    """mystery_rope turns each pair by -m theta_i: it passes the relative test of 5.2, differs from the
    rope_rotate of 5.1, and agrees with it at negated positions; e_0 at m = 1 shows the sign."""
    namespace = solution_namespace("05_rope", "relative_answer", before=("rope_answer", "planted_bug_code"))
    mystery, reference, gap = namespace["mystery_rope"], namespace["rope_rotate"], namespace["relative_gap"]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, dtype=torch.float64, generator=generator)
    positions = torch.tensor([0, 1, 5, 17])
    assert (mystery(x, positions) - reference(x, positions)).abs().max() > 0.1
    torch.testing.assert_close(mystery(x, positions), reference(x, -positions))
    q, k = torch.randn(8, dtype=torch.float64, generator=generator), torch.randn(8, dtype=torch.float64, generator=generator)
    assert gap(mystery, q, k, 2, 7, 5) < 1e-12
    e0 = torch.eye(8, dtype=torch.float64)[:1]
    torch.testing.assert_close(mystery(e0, torch.tensor([1]))[0, :2], torch.tensor([math.cos(1), -math.sin(1)], dtype=torch.float64))
    assert mystery(e0, torch.tensor([1]))[0, 2:].abs().max() == 0  # stays in pair 0: not the half layout


def test_6_3_the_range_rule_separates_alibi_from_t5_only(monkeypatch):
    solution = check_item(
        "06_comparison", "seeds_answer", "seeds_test", "range_rule_separates",
        [(False, True, False)],
        [
            ([True, True, True], "the means differ for every pair"),
            ([True, True, False], "strictly above"),
            ([False, True, True], "t5's best seed (0.40)"),
            ([False, False, False], "every seed of alibi lies above every seed of t5"),
            ([True, False, True], "wrong for the pairs 0, 1, 2"),
        ],
        monkeypatch,
    )
    assert solution == [False, True, False]


def test_6_4_shaw_materializes_12288_mib_where_t5_adds_48(monkeypatch):
    solution = check_item(
        "06_comparison", "shaw_memory_answer", "shaw_memory_test", "shaw_memory_mib",
        [[12288, 48], (12288.4, 48.0)],
        [
            ([98304, 384], "these are bits"),
            ([24576, 96], "not 8"),
            ([12884.901888, 50.331648], "not 10**6"),
            ([12, 0.046875], "these are GiB"),
            ([256, 48], "table of relative keys"),
            ([3072, 48], "every batch element"),
            ([12288, 192], "shared by the batch"),
            ([1024, 4], "a row for every head"),
        ],
        monkeypatch,
    )
    assert solution == [12288.0, 48.0]


def test_the_shaw_intermediate_has_the_shape_the_item_counts():
    """The reference path's product of queries and relative keys is (batch, heads, n, n, head_dim)."""
    q, rel_k = torch.randn(2, 3, 5, 4), torch.randn(5, 5, 4)
    assert tuple((q.unsqueeze(3) * rel_k).shape) == (2, 3, 5, 5, 4)
    import inspect

    from posenc_ref.attention import relative_attention

    assert "(q.unsqueeze(3) * rel_k).sum(-1)" in inspect.getsource(relative_attention)


def expected(assignment: str, test_id: str) -> list:
    """The EXPECTED constant of a test cell's hidden tests, as the grader loads it."""
    return hidden_constants(assignment, test_id)["EXPECTED"]


def test_the_expected_values_agree_with_posenc_ref_and_hugging_face():
    """Each constant written in a hidden test, derived again with the reference package (and T5's buckets with
    Hugging Face transformers, where it is installed)."""
    from posenc_ref.lab.evidence import rank
    from posenc_ref.relative import alibi_bias, relative_position_bucket
    from posenc_ref.rope import rope_frequencies

    def first_in_last_bucket(bucket) -> int:
        far = bucket(-100_000)
        return next(a for a in range(1, 100_000) if bucket(-a) == far)

    def ours(r):
        return int(relative_position_bucket(torch.tensor([r]), num_buckets=64, max_distance=256)[0])

    assert expected("04_relative", "t5_last_bucket_test") == [first_in_last_bucket(ours)]
    try:
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:
        pass
    else:
        def hugging_face(r):
            return int(T5Attention._relative_position_bucket(torch.tensor([r]), True, 64, 256)[0])

        assert expected("04_relative", "t5_last_bucket_test") == [first_in_last_bucket(hugging_face)]

    bias = alibi_bias(8, 401, 401).double()  # (heads, q_len, k_len); the query at position 400

    def hidden_from(head: int) -> int:
        for distance in range(2, 400):
            scores = torch.tensor([1.3 + bias[head, 400, 400 - distance], bias[head, 400, 399]])
            weights = torch.softmax(scores, 0)
            if weights[0] < weights[1]:
                return distance
        raise AssertionError("never hidden")

    assert expected("04_relative", "alibi_hiding_test") == [hidden_from(0), hidden_from(7)]

    inv_freq, _ = rope_frequencies(96, base=500000.0)
    for last in (8191, 8192):
        assert expected("05_rope", "slow_pairs_test") == [int((inv_freq.double() * last < 2 * math.pi).sum())]

    ranking = rank({"alibi": [0.62, 0.71, 0.55, 0.68, 0.66], "rope": [0.41, 0.55, 0.47, 0.38, 0.52],
                    "t5": [0.12, 0.30, 0.21, 0.05, 0.40]})
    pairs = (("alibi", "rope"), ("alibi", "t5"), ("rope", "t5"))
    assert expected("06_comparison", "seeds_test") == [ranking.separated(a, b) for a, b in pairs]


# ---------------------------------------------------------------------------------------------------------
# 4.1, 6.5 and the quiz questions of chapters 4 to 6 that ask for a prediction or a diagnosis
# ---------------------------------------------------------------------------------------------------------


def test_4_1_the_weights_are_the_softmax_of_the_biased_scores(monkeypatch):
    scores = [0.3 + 0.8, 0.9 + 0.0, 0.6 - 0.4]  # content plus b(-1), b(0), b(+1)
    right = [math.exp(score) / sum(math.exp(other) for other in scores) for score in scores]
    assert hidden_constants("04_relative", "bias_test")["EXPECTED"] == pytest.approx(right, abs=1e-11)
    reversed_bias = [0.3 - 0.4, 0.9, 0.6 + 0.8]
    check_item(
        "04_relative", "bias_answer", "bias_test", "relative_bias_weights",
        [[round(weight, 3) for weight in right]],
        [
            ([math.exp(score) / sum(math.exp(other) for other in reversed_bias) for score in reversed_bias],
             "the wrong way round"),
            ([math.exp(score) for score in scores], "before normalising"),
            ([score / sum(scores) for score in scores], "instead of going through a softmax"),
            ([math.exp(score) / sum(math.exp(other) for other in (0.3, 0.9, 0.6)) for score in (0.3, 0.9, 0.6)],
             "the bias was not added"),
            ([0.45, 0.37, 0.18], "got 0.45, expected"),
        ],
        monkeypatch,
    )


# (answer cell, test cell, variable, right letter, {wrong letter: a fragment of its feedback}) by assignment
LETTERED = {
    "04_relative": [
        ("quiz_alibi_reach", "B", {"A": "shrink as h grows", "C": "each head has its own slope", "D": "fixed numbers"}),
        ("quiz_t5_shared_bias", "D", {"A": "buckets 3 and 4", "B": "not linear", "C": "12 and 20 fall in buckets 5 and 6"}),
        ("quiz_absolute_relative", "A", {"B": "not the best answer", "C": "not the best answer", "D": "not the best answer"}),
    ],
    "05_rope": [
        ("quiz_rope_shift", "B", {"A": "signed offset", "C": "not on their ratio", "D": "another base"}),
        ("quiz_raised_base", "C", {"A": "does not change at all", "B": "that is position interpolation",
                                   "D": "depends on the base for every pair"}),
        ("quiz_rotated_input", "B", {"A": "never meet", "C": "the layout only decides", "D": "keeps the norm"}),
    ],
    "06_comparison": [
        ("quiz_far_keys", "A", {"B": "neither method clips", "C": "stop at the last one", "D": "every distance has a bucket"}),
        ("quiz_order_blind", "C", {"A": "the layout only orders", "B": "1 radian a token", "D": "a scaled table"}),
        ("claims", "B", {"A": "flat perplexity", "C": "touch at 512", "D": "the ranges of seeds overlap"}),
    ],
}
VARIABLE = {"claims": "supported_claim"}


@pytest.mark.parametrize(("assignment", "item", "right", "wrong"),
                         [(assignment, *entry) for assignment, entries in LETTERED.items() for entry in entries],
                         ids=lambda value: value if isinstance(value, str) else "")
def test_each_lettered_item_takes_its_right_letter_and_says_why_each_other_is_wrong(monkeypatch, assignment, item, right,
                                                                                     wrong):
    name = VARIABLE.get(item, item)
    solution = check_item(assignment, f"{item}_answer", f"{item}_test", name, [f" {right.lower()} "],
                          list(wrong.items()), monkeypatch)
    assert solution == right


def t5_bucket_back(distance: int, num_buckets: int, max_distance: int) -> int:
    """T5's bucket of a key ``distance`` tokens before the query, bidirectional, from the T5 paper's formula."""
    n = num_buckets // 2
    exact = n // 2
    if distance < exact:
        return distance
    return min(n - 1, exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (n - exact)))


def test_the_quiz_answers_of_chapter_4_follow_from_the_formulas():
    slopes = [2.0 ** (-8 * head / 8) for head in range(1, 9)]
    # with equal content scores, the weight of a key 50 back against the key 1 back is exp(-m * 49)
    reach = [math.exp(-slope * 49) for slope in slopes]
    assert max(range(8), key=reach.__getitem__) == 7  # head 8
    shared = {letter: t5_bucket_back(a, 16, 64) == t5_bucket_back(b, 16, 64)
              for letter, (a, b) in {"A": (3, 4), "B": (8, 16), "C": (12, 20), "D": (40, 400)}.items()}
    assert shared == {"A": False, "B": False, "C": False, "D": True}
    assert [t5_bucket_back(a, 16, 64) for a in (3, 4, 8, 16, 12, 20)] == [3, 4, 5, 6, 5, 6]


def rotate(x: torch.Tensor, position: int, base: float = 10000.0) -> torch.Tensor:
    """RoPE of one vector, interleaved, written from the rotation of each pair."""
    d = x.shape[-1]
    out = x.clone()
    for i in range(d // 2):
        angle = position * base ** (-2 * i / d)
        a, b = x[2 * i], x[2 * i + 1]
        out[2 * i], out[2 * i + 1] = a * math.cos(angle) - b * math.sin(angle), a * math.sin(angle) + b * math.cos(angle)
    return out


def test_the_quiz_answers_of_chapter_5_follow_from_the_formulas():
    generator = torch.Generator().manual_seed(5)
    q, k = torch.randn(8, dtype=torch.float64, generator=generator), torch.randn(8, dtype=torch.float64, generator=generator)

    def score(m, n, base=10000.0):
        return float(rotate(q, m, base) @ rotate(k, n, base))

    assert score(110, 104) == pytest.approx(score(10, 4), abs=1e-9)  # B
    for other in (score(4, 10), score(20, 8), score(10, 4, base=500000.0)):  # A, C, D
        assert abs(other - score(10, 4)) > 1e-3
    ratios = [10000 ** (-2 * i / 64) / 40000 ** (-2 * i / 64) for i in range(32)]  # old theta_i / new theta_i
    assert ratios[0] == 1 and max(range(32), key=ratios.__getitem__) == 31 and 3.5 < ratios[31] < 4
    w_q, w_k = torch.randn(8, 8, dtype=torch.float64, generator=generator), torch.randn(8, 8, dtype=torch.float64, generator=generator)
    x, y = torch.randn(8, dtype=torch.float64, generator=generator), torch.randn(8, dtype=torch.float64, generator=generator)

    def input_rotated(m, n):
        return float((w_q @ rotate(x, m)) @ (w_k @ rotate(y, n)))

    assert abs(input_rotated(10, 4) - input_rotated(110, 104)) > 1e-3  # the property is lost: B


def test_the_quiz_answers_of_chapter_6_follow_from_the_formulas():
    assert t5_bucket_back(1000, 32, 128) == t5_bucket_back(2000, 32, 128) == 15  # quiz 1: A
    # quiz 2: an encoder that adds one row to every token is blind to order; the other bugs are not
    generator = torch.Generator().manual_seed(6)
    tokens, permutation = torch.randn(6, 8, dtype=torch.float64, generator=generator), torch.tensor([3, 0, 5, 1, 4, 2])
    pe = torch.randn(6, 8, dtype=torch.float64, generator=generator)

    def pooled(x):
        weights = torch.softmax(x @ x.T, dim=-1)
        return (weights @ x).mean(0)

    torch.testing.assert_close(pooled(tokens[permutation] + pe[0]), pooled(tokens + pe[0]))
    assert (pooled(tokens[permutation] + 0.1 * pe) - pooled(tokens + 0.1 * pe)).abs().max() > 1e-6


def test_6_5_the_range_rule_on_the_table_of_the_question_supports_claim_b_only():
    """The table parsed from the question's markdown, the four claims checked on it with the range rule."""
    import re

    question = source_cells("06_comparison")["claims_question"]
    rows = {}
    for line in question.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 6 and "[" in line:
            rows[cells[0]] = [tuple(float(value) for value in re.findall(r"\[([\d.]+), ([\d.]+)\]", cell)[0])
                              if "[" in cell else None for cell in cells[1:]]
    lengths = (512, 1024, 2048, 4096)
    alibi, rope, fine_tuned, sinusoidal = (rows[kind] for kind in (
        "alibi", "rope", "rope, position interpolation, fine-tuned at 4,096", "sinusoidal"))

    def lower(a, b):  # every seed of a below every seed of b
        return a[1] < b[0]

    claim_b = lower(rope[0], alibi[0]) and fine_tuned[4][0] > alibi[4][1]
    claim_c = all(lower(fine_tuned[index], alibi[index]) for index in range(len(lengths)))
    claim_d = all(lower(rope[index], sinusoidal[index]) for index in range(1, len(lengths)))
    claim_a = alibi[4][1] >= 0.5  # a model that uses the whole input finds the far fact
    assert (claim_a, claim_b, claim_c, claim_d) == (False, True, False, False)
    assert solution_namespace("06_comparison", "claims_answer")["supported_claim"] == "B"


def test_4_4_and_4_5_the_slopes_with_a_maximum_bias_are_mpts():
    """Every expected list of 4.4 and 4.5 against MosaicML MPT's slopes as Hugging Face computes them (float32),
    and the default bias against posenc_ref's ALiBi slopes (Press et al.'s rule)."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    from posenc_ref.relative import alibi_slopes

    checked = 0
    for test_id in ("alibi_power_test", "alibi_other_test"):
        for name, values in hidden_constants("04_relative", test_id).items():
            if not name.startswith("EXPECTED_"):
                continue
            heads, _, bias = name.removeprefix("EXPECTED_").partition("_MAX_BIAS_")
            heads, bias = int(heads), float(bias or 8)
            mpt = -build_mpt_alibi_tensor(heads, 2, bias)[:, 0, 0].double()  # (heads,): the key one step back
            torch.testing.assert_close(torch.tensor(values, dtype=torch.float64), mpt, rtol=1e-6, atol=1e-9)
            if bias == 8:
                torch.testing.assert_close(torch.tensor(values, dtype=torch.float64), alibi_slopes(heads).double(),
                                           rtol=1e-6, atol=1e-9)
            checked += 1
    assert checked == 5
