"""The items of chapters 4 to 6 that ask students to predict, diagnose and read evidence (4.7, 4.8, 5.6, 5.7,
6.3, 6.4, 6.5 and the quiz questions), and 4.1: the source's solution passes its visible and hidden tests,
right answers in other forms pass, and each plausible wrong answer passes the visible test (it checks the form
only) and fails the hidden one with the message that names its mistake. The hidden tests run as in grading: the
kernel's part here, with its reporter, and the grader's part through :func:`autograder.verdicts.verdict.decide`.
No kernel runs here. The expected answers are derived again here from the chapters' formulas.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
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


def test_5_6_five_of_the_twenty_one_slow_pairs_pass_twice_their_trained_angles(monkeypatch):
    solution = check_item(
        "05_rope", "slow_pairs_answer", "slow_pairs_test", "ntk_slow_pairs",
        [(21, 5), [21.0, 5.0], [np.int64(21), 5]],
        [
            ([27, 5], "do complete a turn in training"),
            ([21, 32], "also those that completed a turn"),
            ([21, 21], "plain RoPE read at sL"),
            ([21, 6], "not base * s"),
            ([21, 0], "position interpolation"),
            ([10, 0], "base 10,000"),
            ([21, 4], "got 4, expected"),
        ],
        monkeypatch,
    )
    assert solution == [21, 5]


def test_5_6_the_counts_follow_from_the_angles_at_every_position():
    """21 pairs of d = 96 (base 500000) never turn within 8,192 positions; with base' = 500000 * 8**(96/94), 5 of
    them reach more than twice their trained angle somewhere in 65,536 positions (checked at every position)."""
    trained_positions = torch.arange(8192, dtype=torch.float64)
    read_positions = torch.arange(8 * 8192, dtype=torch.float64)
    scaled_base = 500000.0 * 8 ** (96 / 94)
    slow = beyond = 0
    for i in range(48):
        trained = trained_positions * 500000.0 ** (-2 * i / 96)
        if bool((trained < 2 * math.pi).all()):
            slow += 1
            beyond += bool(((read_positions * scaled_base ** (-2 * i / 96)) > 2 * trained.max()).any())
    assert [slow, beyond] == [21, 5]


def mystery_namespace() -> dict:
    """The notebook's rope_rotate (5.1), relative_gap (5.2) and six mystery functions, for the answer key's 5.7."""
    return solution_namespace("05_rope", "relative_answer", before=("rope_answer", "planted_bug_code"))


def test_5_7_the_answer_keys_mystery_turns_the_wrong_way_and_shows_its_angle(monkeypatch):
    right_angle = -9 * 10 ** (-3 / 4)  # e_6 is pair 3, theta_3 = 10**(-6/8) at base 10, turned by -m theta_3
    namespace = solution_namespace("05_rope", "planted_bug_answer",
                                   before=("rope_answer", "relative_answer", "planted_bug_code"))
    assert namespace["planted_bug"] == "wrong_direction"
    assert namespace["planted_bug_angle"] == pytest.approx(right_angle, abs=1e-12)
    right = {"planted_bug": "wrong_direction", "planted_bug_angle": right_angle}
    for other in (right, {**right, "planted_bug": " Wrong_Direction "},
                  {**right, "planted_bug_angle": right_angle + 2 * math.pi},
                  {**right, "planted_bug_angle": np.float32(right_angle)}):
        assert grade_item(monkeypatch, "05_rope", "planted_bug_test", values=other) == (True, ""), other
    wrong = [
        ({"planted_bug": "doubled_exponent"}, "leaves pair 0 as RoPE turns it"),
        ({"planted_bug": "half_layout"}, "moves part of the basis vector e_0"),
        ({"planted_bug": "degrees"}, "0.9998"),
        ({"planted_bug": "squared_positions"}, "fails the relative test"),
        ({"planted_bug": "none"}, "agrees with rope_rotate on every vector"),
        ({"planted_bug_angle": -right_angle}, "the angle RoPE itself would give"),
        ({"planted_bug_angle": math.degrees(right_angle)}, "asked in radians"),
        ({"planted_bug_angle": -1.7}, "got -1.7, expected"),
    ]
    for change, fragment in wrong:
        passed, message = grade_item(monkeypatch, "05_rope", "planted_bug_test", values={**right, **change})
        assert not passed and not message.startswith(VISIBLE_FAILURE) and fragment in message, (change, message)


def rotated_pairs(x: torch.Tensor, position: int, bug: str, base: float = 10000.0) -> torch.Tensor:
    """One vector rotated to ``position`` with ``bug``, pair by pair from the rotation formula (not from posenc_ref)."""
    d = x.shape[-1]
    out = x.clone()
    for i in range(d // 2):
        exponent = 4 if bug == "doubled_exponent" else 2
        angle = position * base ** (-exponent * i / d)
        angle = {"wrong_direction": -angle, "degrees": math.radians(angle),
                 "squared_positions": position * angle}.get(bug, angle)
        first, second = (i, i + d // 2) if bug == "half_layout" else (2 * i, 2 * i + 1)
        a, b = x[first], x[second]
        out[first], out[second] = a * math.cos(angle) - b * math.sin(angle), a * math.sin(angle) + b * math.cos(angle)
    return out


def test_5_7_each_mystery_has_the_bug_the_grader_says_and_the_tools_tell_them_apart():
    """Each mystery_rope_<n> agrees with the bug the grader's map gives it, written here pair by pair; the
    solution's diagnosis, which runs the tools the item names, finds that bug for every number."""
    from autograder.variants.rope import MYSTERY_BUGS

    namespace = mystery_namespace()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, dtype=torch.float64, generator=generator)
    positions = [0, 1, 5, 17]
    assert sorted(MYSTERY_BUGS.values()) == sorted(
        ("doubled_exponent", "half_layout", "degrees", "squared_positions", "wrong_direction", "none"))
    answer = source_cells("05_rope")["planted_bug_answer"]
    for number, bug in MYSTERY_BUGS.items():
        mystery = namespace[f"mystery_rope_{number}"]
        for base in (10000.0, 10.0):
            expected = torch.stack([rotated_pairs(row, m, bug, base) for row, m in zip(x, positions, strict=True)])
            torch.testing.assert_close(mystery(x, torch.tensor(positions), base=base), expected)
        assert mystery(x.float(), torch.tensor(positions)).dtype == torch.float32
        diagnosed = {**namespace, "mystery_rope": mystery, "my_parameters": {"5.7": {"position": 9}}}
        exec(answer, diagnosed)  # noqa: S102 (source/ is trusted)
        assert diagnosed["planted_bug"] == bug, number


# ---------------------------------------------------------------------------------------------------------
# 6.3: the pairs that six seeds support, decided as chapter 6 decides them, derived here without posenc_ref
# ---------------------------------------------------------------------------------------------------------

SEEDS_KINDS = ("alibi", "t5", "rope", "sinusoidal")  # the question's pairs are their itertools.combinations
ALPHA = MARGIN = FLOOR = 0.05


def seeds_table() -> dict[str, list[float]]:
    """The scores of 6.3, read from the table of its question: kind -> one score per seed."""
    rows = {}
    for line in source_cells("06_comparison")["seeds_question"].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] in SEEDS_KINDS:
            rows[cells[0]] = [float(cell) for cell in cells[1:]]
    assert list(rows) == list(SEEDS_KINDS)
    return rows


def t_two_sided_closed_form(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with a whole number df of degrees of freedom, from the closed forms of its
    distribution: with theta = atan(|t| / sqrt(df)), for odd df
    1 - (2 / pi) (theta + sin(theta) (cos(theta) + 2/3 cos(theta)**3 + ... + (2 4 ... (df - 3)) / (3 5 ... (df - 2))
    cos(theta)**(df - 2))), and for even df 1 - sin(theta) (1 + 1/2 cos(theta)**2 + ... + (1 3 ... (df - 3)) /
    (2 4 ... (df - 2)) cos(theta)**(df - 2)). For df = 2 that is 1 - |t| / sqrt(t**2 + 2)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos = math.sin(theta), math.cos(theta)
    if df % 2:
        series, term = 0.0, cos
        for k in range(1, (df - 1) // 2):  # cos, then each term times cos**2 (2k) / (2k + 1)
            series += term
            term *= cos * cos * (2 * k) / (2 * k + 1)
        series += term if df > 1 else 0.0
        return 1.0 - 2.0 / math.pi * (theta + sin * series)
    series, term = 0.0, 1.0
    for k in range(1, df // 2):  # 1, then each term times cos**2 (2k - 1) / (2k)
        series += term
        term *= cos * cos * (2 * k - 1) / (2 * k)
    return 1.0 - sin * (series + term)


def t_two_sided_simpson(t: float, df: float, intervals: int = 200_000) -> float:
    """P(|T| >= |t|) for any df > 0: one minus twice Simpson's integral of Student's density from 0 to |t|."""
    x = np.linspace(0.0, abs(t), intervals + 1)
    log_density = (math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
                   - (df + 1) / 2 * np.log1p(x * x / df))
    weights = np.ones(intervals + 1)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return 1.0 - 2.0 * float(weights @ np.exp(log_density)) * float(x[1] - x[0]) / 3.0


def paired_t(a, b) -> tuple[float, int]:
    """The paired t statistic of the per-seed differences a - b, and its degrees of freedom."""
    d = np.asarray(a) - np.asarray(b)
    return float(d.mean() / (d.std(ddof=1) / math.sqrt(d.size))), d.size - 1


def pooled_t(a, b) -> tuple[float, int]:
    """Student's unpaired t statistic with pooled variances, and its degrees of freedom."""
    a, b = np.asarray(a), np.asarray(b)
    pooled = ((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2)
    return float((a.mean() - b.mean()) / math.sqrt(pooled * (1 / a.size + 1 / b.size))), a.size + b.size - 2


def welch_t(a, b) -> tuple[float, float]:
    """Welch's unpaired t statistic and its Welch-Satterthwaite degrees of freedom."""
    a, b = np.asarray(a), np.asarray(b)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    return float((a.mean() - b.mean()) / math.sqrt(va + vb)), (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))


def holm_adjusted(p_values, running_maximum: bool = True) -> list[float]:
    """Holm's step-down adjustment: the k-th smallest of m p-values times m - k + 1 (k from 1), capped at 1, and
    made non-decreasing in that order (unless ``running_maximum`` is False: a mistake 6.3 names)."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        value = min(1.0, (len(p_values) - rank) * p_values[index])
        running = max(running, value) if running_maximum else value
        adjusted[index] = running
    return adjusted


def seeds_decisions(scores, adjusted, effect: bool = True) -> list[bool]:
    """For each pair: adjusted p below alpha and, with ``effect``, a mean difference of at least the margin
    between two kinds not both below the floor."""
    decided = []
    for (a, b), p in zip(itertools.combinations(scores, 2), adjusted, strict=True):
        mean_a, mean_b = float(np.mean(scores[a])), float(np.mean(scores[b]))
        big_enough = abs(mean_a - mean_b) >= MARGIN and not (mean_a < FLOOR and mean_b < FLOOR)
        decided.append(bool(p < ALPHA and (big_enough or not effect)))
    return decided


def seeds_derivation() -> dict:
    """Every answer 6.3 expects or names, derived from the question's table with numpy and closed forms: the
    adjusted p-values and the orderings, each as ``(a fragment of the message that names it, the answer)``, the
    expected ones under ``"expected"``."""
    scores = seeds_table()
    pairs = list(itertools.combinations(scores, 2))
    tests = {name: [statistic(scores[a], scores[b]) for a, b in pairs]
             for name, statistic in (("paired", paired_t), ("pooled", pooled_t), ("welch", welch_t))}
    assert {df for _, df in tests["paired"]} == {5} and {df for _, df in tests["pooled"]} == {10}
    raw = {
        "paired": [t_two_sided_closed_form(t, df) for t, df in tests["paired"]],
        "pooled": [t_two_sided_closed_form(t, df) for t, df in tests["pooled"]],
        "welch": [t_two_sided_simpson(t, df) for t, df in tests["welch"]],
    }
    for name in ("paired", "pooled"):  # the closed forms against the integral of the density
        assert raw[name] == pytest.approx([t_two_sided_simpson(t, df) for t, df in tests[name]], abs=1e-9), name
    one_sided = holm_adjusted([p / 2 for p in raw["paired"]])
    expected_p = holm_adjusted(raw["paired"])
    p_values = [
        ("the p-values before the correction", raw["paired"]),
        ("Bonferroni", [min(1.0, len(pairs) * p) for p in raw["paired"]]),
        ("never decrease", holm_adjusted(raw["paired"], running_maximum=False)),
        ("unpaired test (Welch's)", holm_adjusted(raw["welch"])),
        ("unpaired test (with pooled variances)", holm_adjusted(raw["pooled"])),
        ("one-sided", one_sided),
        ("unpaired tests (Welch's), before the correction", raw["welch"]),
        ("unpaired tests (with pooled variances), before the correction", raw["pooled"]),
    ]
    ranges = [min(scores[a]) > max(scores[b]) or min(scores[b]) > max(scores[a]) for a, b in pairs]
    orderings = [
        ("range rule", ranges),
        ("an unpaired test sets", seeds_decisions(scores, holm_adjusted(raw["welch"]))),
        ("which an unpaired test misses", seeds_decisions(scores, raw["welch"])),
        ("which an unpaired test misses", seeds_decisions(scores, holm_adjusted(raw["pooled"]))),
        ("which an unpaired test misses", seeds_decisions(scores, raw["pooled"])),
        ("pass a test on their own", seeds_decisions(scores, raw["paired"])),
        ("pass a test on their own", seeds_decisions(scores, one_sided)),
        ("less than the margin", seeds_decisions(scores, expected_p, effect=False)),
        ("never decrease", seeds_decisions(scores, holm_adjusted(raw["paired"], running_maximum=False))),
        ("the means differ for every pair", [True] * len(pairs)),
        ("alibi lies above t5, rope and sinusoidal", [False] * len(pairs)),
    ]
    return {"scores": scores, "pairs": pairs, "raw": raw, "p_values": p_values, "orderings": orderings,
            "expected": (expected_p, seeds_decisions(scores, expected_p))}


def test_6_3_expects_the_paired_holm_corrected_decision_and_names_the_range_rule_unpaired_and_uncorrected_answers():
    """The expected p-values and orderings derived again with numpy and the closed forms of Student's t (5 and 10
    degrees of freedom) or its integral (Welch's), against posenc_ref.lab.evidence and the hidden test's constants;
    the range rule, the unpaired tests and the uncorrected test each give another answer, which the hidden test
    lists with its own message, and so does every other listed mistake."""
    from posenc_ref.lab.evidence import holm, paired_comparisons, paired_t_test

    derived = seeds_derivation()
    scores, pairs, (expected_p, expected_order) = derived["scores"], derived["pairs"], derived["expected"]
    reference = {pair: paired_t_test(scores[pair[0]], scores[pair[1]]).p_value for pair in pairs}
    assert derived["raw"]["paired"] == pytest.approx(list(reference.values()), rel=1e-9, abs=1e-12)
    assert expected_p == pytest.approx(list(holm(reference).values()), rel=1e-9, abs=1e-12)
    findings = paired_comparisons({"far": scores}, alpha=ALPHA, margin=MARGIN, floor=FLOOR)
    assert [(comparison.higher, comparison.lower) for comparison in findings] == pairs
    assert [comparison.finding for comparison in findings] == expected_order

    constants = hidden_constants("06_comparison", "seeds_test")
    assert constants["EXPECTED_ADJUSTED_P"] == pytest.approx(expected_p, abs=1e-6)
    assert constants["EXPECTED"] == expected_order == [True, True, True, False, False, False]
    # What each rule of the chapter changes: pairing finds alibi above t5 where their ranges overlap, the
    # correction drops t5's two pairs, which pass uncorrected, and the floor drops rope against sinusoidal.
    first = dict(reversed(derived["orderings"]))  # by fragment: the range rule, Welch's test with Holm's, ...
    range_rule, unpaired, uncorrected = (first[name] for name in ("range rule", "an unpaired test sets",
                                                                   "pass a test on their own"))
    assert not range_rule[0] and range_rule[4] and not unpaired[0]
    assert max(derived["raw"]["paired"][3:5]) < ALPHA <= min(expected_p[3:5]) and uncorrected[3] and uncorrected[4]
    assert expected_p[5] < ALPHA and not expected_order[5]

    listed = constants["MISTAKES_ADJUSTED_P"]
    assert len(listed) == len(derived["p_values"])
    for description, values in listed:
        (derived_values,) = [values for fragment, values in derived["p_values"] if fragment in description]
        assert values == pytest.approx(derived_values, abs=1e-6), description
    named = [values for _, values in listed] + [constants["EXPECTED_ADJUSTED_P"]]
    for first, second in itertools.combinations(named, 2):  # no answer lies within the tolerance of two of these
        assert max(abs(a - b) for a, b in zip(first, second, strict=True)) > 2 * constants["TOLERANCE"]

    messages = {tuple(wrong): message for wrong, message in constants["MISTAKES"]}
    assert len(messages) == len(constants["MISTAKES"]) and tuple(expected_order) not in messages
    for fragment, answer in derived["orderings"]:
        assert fragment in messages[tuple(answer)], (fragment, answer)
    assert set(messages) == {tuple(answer) for _, answer in derived["orderings"]}
    assert len({tuple(range_rule), tuple(unpaired), tuple(uncorrected)}) == 3


def test_6_3_alibi_lies_above_the_other_three_and_no_other_pair_is_ordered(monkeypatch):
    solution = solution_namespace("06_comparison", "seeds_answer")
    adjusted_p, ordered_pairs = solution["adjusted_p"], solution["ordered_pairs"]
    assert ordered_pairs == [True, True, True, False, False, False]
    right = {"adjusted_p": adjusted_p, "ordered_pairs": ordered_pairs}
    for values in (right, {"adjusted_p": tuple(round(p, 3) for p in adjusted_p), "ordered_pairs": tuple(ordered_pairs)},
                   {"adjusted_p": [np.float64(p) for p in adjusted_p], "ordered_pairs": ordered_pairs}):
        assert grade_item(monkeypatch, "06_comparison", "seeds_test", values=values) == (True, "")
    derived = seeds_derivation()
    wrong = [({"adjusted_p": values}, fragment) for fragment, values in derived["p_values"]]
    wrong += [({"ordered_pairs": answer}, fragment) for fragment, answer in derived["orderings"]]
    wrong += [
        ({"adjusted_p": [round(p, 2) for p in adjusted_p]}, "entry 3: got 0.07, expected 0.067262"),
        ({"ordered_pairs": [True, False, True, False, True, False]}, "wrong for the pairs 1, 4 (counted from 0)"),
        ({"ordered_pairs": [True, True, True, False, False]}, f"{VISIBLE_FAILURE}ordered_pairs must have 6 entries"),
        ({"ordered_pairs": [1, 1, 1, 0, 0, 0]}, f"{VISIBLE_FAILURE}every entry of ordered_pairs must be True or False"),
        ({"adjusted_p": [0.0, 0.02, 0.02, 0.07, 0.07, 1.5]}, f"{VISIBLE_FAILURE}an adjusted p-value lies between 0 and 1"),
    ]
    for change, fragment in wrong:
        passed, message = grade_item(monkeypatch, "06_comparison", "seeds_test", values={**right, **change})
        assert not passed and fragment in message, (change, message)
        if not fragment.startswith(VISIBLE_FAILURE):  # the message names the variable that is wrong
            assert message.startswith(f"{next(iter(change))}: "), (change, message)


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
    from posenc_ref.lab.evidence import paired_comparisons
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
    scaled, _ = rope_frequencies(96, base=500000.0 * 8 ** (96 / 94))  # NTK-aware, s = 8
    for last in (8191, 8192):
        slow = inv_freq.double() * last < 2 * math.pi
        beyond = scaled.double() * (8 * 8192 - 1) > 2 * inv_freq.double() * last
        assert expected("05_rope", "slow_pairs_test") == [int(slow.sum()), int((slow & beyond).sum())]

    findings = paired_comparisons({"far": seeds_table()}, alpha=ALPHA, margin=MARGIN, floor=FLOOR)
    assert expected("06_comparison", "seeds_test") == [comparison.finding for comparison in findings]


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
        ("quiz_cached_position", "B", {"A": "offsets 3 to 6 instead of 1 to 4", "C": "at position 4 only",
                                       "D": "which B alone never produces"}),
        ("quiz_raised_base", "C", {"A": "does not change at all", "B": "that is position interpolation",
                                   "D": "depends on the base for every pair"}),
        ("quiz_partial_rotary", "A", {"B": "the rotated part of the logit, which is zero here",
                                      "C": "nothing of this logit turns", "D": "the logit stays relative"}),
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
    # Quiz 1: row B's prompt was rotated at 0..3 and its keys cached; B alone puts its next token at 4.
    prompt_keys = torch.randn(4, 8, dtype=torch.float64, generator=generator)
    new_token = torch.randn(8, dtype=torch.float64, generator=generator)
    cached = torch.stack([rotate(key, position) for position, key in enumerate(prompt_keys)])

    def weights(position):
        keys = torch.cat([cached, rotate(new_token, position)[None]])  # the new token attends to itself too
        return torch.softmax(keys @ rotate(new_token, position), dim=0)

    alone = weights(4)
    assert all((weights(position) - alone).abs().max() > 1e-3 for position in (6, 0, 5, 100))  # A, D; C: not any
    # Quiz 2
    ratios = [10000 ** (-2 * i / 64) / 40000 ** (-2 * i / 64) for i in range(32)]  # old theta_i / new theta_i
    assert ratios[0] == 1 and max(range(32), key=ratios.__getitem__) == 31 and 3.5 < ratios[31] < 4
    # Quiz 3: the first 16 of 64 features turn, with frequencies base**(-2i/16); content only in 16..63.

    def partial(x, position):
        return torch.cat([rotate(x[:16], position), x[16:]])

    q, k = torch.randn(2, 64, dtype=torch.float64, generator=generator).unbind(0)
    q_pass, k_pass = q.clone(), k.clone()
    q_pass[:16], k_pass[:16] = 0.0, 0.0
    logits = [float(partial(q_pass, 1000) @ partial(k_pass, 1000 - distance)) for distance in (1, 10, 100, 1000)]
    assert max(logits) - min(logits) < 1e-12  # A
    turning = [float(partial(q, 1000) @ partial(k, 1000 - distance)) for distance in (1, 10, 100, 1000)]
    assert max(turning) - min(turning) > 1e-2  # with content in the rotated features it would change


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
