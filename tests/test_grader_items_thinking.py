"""The items of chapters 4 to 6 that ask students to predict, diagnose and read evidence (4.7, 4.8, 5.6, 5.7,
6.3, 6.4): the source's solution passes its visible and hidden tests, right answers in other forms pass, and
each plausible wrong answer passes the visible test (it checks the form only) and fails the hidden one with
the message that names its mistake. The hidden tests run as in grading: the kernel's part here, with its
reporter, and the grader's part through :func:`autograder.verdicts.verdict.decide`. No kernel runs here.
"""

from __future__ import annotations

import math

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


def test_5_6_twenty_nine_pairs_of_llama_3_never_turn_once(monkeypatch):
    solution = check_item(
        "05_rope", "slow_pairs_answer", "slow_pairs_test", "slow_pairs_llama3",
        [29.0, torch.tensor(29)],
        [
            (35, "do complete at least one turn"),
            (14, "base 10,000"),
            (20, "2 pi radians, not 1"),
            (46, "exponent is doubled"),
            (48, "not 360"),
            (28, "got 28, expected"),
        ],
        monkeypatch,
    )
    assert solution == 29


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
    from posenc_ref.evidence import rank
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

    inv_freq, _ = rope_frequencies(128, base=500000.0)
    for last in (8191, 8192):
        assert expected("05_rope", "slow_pairs_test") == [int((inv_freq.double() * last < 2 * math.pi).sum())]

    ranking = rank({"alibi": [0.62, 0.71, 0.55, 0.68, 0.66], "rope": [0.41, 0.55, 0.47, 0.38, 0.52],
                    "t5": [0.12, 0.30, 0.21, 0.05, 0.40]})
    pairs = (("alibi", "rope"), ("alibi", "t5"), ("rope", "t5"))
    assert expected("06_comparison", "seeds_test") == [ranking.separated(a, b) for a, b in pairs]
