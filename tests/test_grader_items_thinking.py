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
from pathlib import Path

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


def t5_decoder_bucket_back(distance: int, num_buckets: int, max_distance: int) -> int:
    """T5's bucket of a key ``distance`` tokens before the query in a decoder (bidirectional=False): all
    ``num_buckets`` buckets for the past, the first half exact, from the T5 paper's formula."""
    exact = num_buckets // 2
    if distance < exact:
        return distance
    return min(num_buckets - 1,
               exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact)))


def test_4_3_a_short_run_trains_47_encoder_and_43_decoder_buckets(monkeypatch):
    """64 buckets, max_distance 1000, sequences of 100 tokens: offsets -99 to 99, counted bucket by bucket."""
    encoder = {(32 if r > 0 else 0) + t5_bucket_back(abs(r), 64, 1000) for r in range(-99, 100)}
    decoder = {t5_decoder_bucket_back(a, 64, 1000) for a in range(100)}
    assert [len(encoder), len(decoder)] == [47, 43]
    solution = check_item(
        "04_relative", "bucket_reach_answer", "bucket_reach_test", "t5_trained_buckets",
        [(47, 43), [47.0, 43.0], torch.tensor([47, 43]).tolist()],
        [
            ([48, 43], "counted twice"),
            ([24, 43], "the encoder has both directions"),
            ([47, 24], "the decoder spends all num_buckets"),
            ([43, 47], "the wrong way round"),
            ([64, 64], "do not reach every bucket"),
            ([31, 31], "T5's defaults"),
            ([47, 42], "got 42, expected"),
        ],
        monkeypatch,
    )
    assert solution == [47, 43]
    for value, message in (([47, 65], "each count lies between 1 and num_buckets"),
                           ([47.5, 43], "each count is a whole number of buckets")):
        assert grade_item(monkeypatch, "04_relative", "bucket_reach_test", values={"t5_trained_buckets": value}) == (
            False, VISIBLE_FAILURE + message)


def test_4_7_the_decoders_key_150_back_shares_its_bias_with_145_to_160(monkeypatch):
    """64 buckets, max_distance 1000: the distances whose decoder bucket is that of 150, found by scanning."""
    mine = t5_decoder_bucket_back(150, 64, 1000)
    shared = [a for a in range(1, 4000) if t5_decoder_bucket_back(a, 64, 1000) == mine]
    assert [shared[0], shared[-1]] == [145, 160]
    solution = check_item(
        "04_relative", "t5_shared_answer", "t5_shared_test", "t5_shared_distances",
        [(145, 160), [145.0, 160.0]],
        [
            ([127, 163], "bucket of an encoder"),
            ([145, 161], "the last distance is one too far"),
            ([144, 160], "the first distance is one too near"),
            ([144, 161], "both ends are one too far out"),
            ([145, 159], "got 159, expected"),
        ],
        monkeypatch,
    )
    assert solution == [145, 160]
    passed, message = grade_item(monkeypatch, "04_relative", "t5_shared_test", values={"t5_shared_distances": [160, 145]})
    assert (passed, message) == (False, f"{VISIBLE_FAILURE}the first distance comes before the last")


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

ALPHA = MARGIN = FLOOR = 0.05


def seeds_tables() -> tuple[dict, ...]:
    """The allowed tables of 6.3 (the student's side of the item), the one answer key's first."""
    from autograder.student.parameters import varied_item

    return varied_item("06_comparison", "6.3").choices["table"]


def seeds_table() -> dict[str, list[float]]:
    """The scores of the one answer key's table of 6.3: kind -> one score per seed."""
    return {kind: list(scores) for kind, scores in seeds_tables()[0]["scores"].items()}


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


def seeds_derivation(scores: dict | None = None) -> dict:
    """Every answer 6.3 expects or names for a table (the answer key's by default), derived with numpy and closed
    forms: the adjusted p-values and the orderings, each as ``(a fragment of the message that names it, the
    answer)``, the expected ones under ``"expected"``."""
    scores = {kind: list(values) for kind, values in (scores or seeds_table()).items()}
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
        ("unpaired test (Welch's), which sets", seeds_decisions(scores, holm_adjusted(raw["welch"]))),
        ("unpaired test (Welch's) without Holm's", seeds_decisions(scores, raw["welch"])),
        ("unpaired test (with pooled variances): every", seeds_decisions(scores, holm_adjusted(raw["pooled"]))),
        ("unpaired test (with pooled variances) without", seeds_decisions(scores, raw["pooled"])),
        ("pass the paired test on their own", seeds_decisions(scores, raw["paired"])),
        ("one-sided", seeds_decisions(scores, one_sided)),
        ("at least the margin of 0.05", seeds_decisions(scores, expected_p, effect=False)),
        ("never decrease", seeds_decisions(scores, holm_adjusted(raw["paired"], running_maximum=False))),
        ("not every pair has all three", [True] * len(pairs)),
        ("those are ordered", [False] * len(pairs)),
    ]
    return {"scores": scores, "pairs": pairs, "raw": raw, "p_values": p_values, "orderings": orderings,
            "expected": (expected_p, seeds_decisions(scores, expected_p))}


def check_seeds_constants(derived: dict, constants: dict) -> None:
    """The constants of 6.3 for one table against the derivation: the expected answers, every listed mistake
    (in the derivation's order, those that coincide with the right answer or an earlier mistake left out), each
    with its own message."""
    expected_p, expected_order = derived["expected"]
    assert constants["EXPECTED"] == pytest.approx(expected_p, abs=1e-6)
    assert constants["EXPECTED_ORDER"] == expected_order
    kept, seen = [], [expected_p]
    for fragment, values in derived["p_values"]:  # the far-apart rule of the grader, applied here again
        if all(max(abs(a - b) for a, b in zip(values, other, strict=True)) > 2 * 0.001 for other in seen):
            kept.append((fragment, values))
            seen.append(values)
    assert len(constants["MISTAKES"]) == len(kept)
    for (fragment, values), (description, listed) in zip(kept, constants["MISTAKES"], strict=True):
        assert fragment in description and listed == pytest.approx(values, abs=1e-6), (fragment, description)
    named = [values for _, values in constants["MISTAKES"]] + [constants["EXPECTED"]]
    for first, second in itertools.combinations(named, 2):  # no answer lies within the tolerance of two of these
        assert max(abs(a - b) for a, b in zip(first, second, strict=True)) > 2 * 0.001
    kept, seen = [], [expected_order]
    for fragment, answer in derived["orderings"]:
        if answer not in seen:
            kept.append((fragment, answer))
            seen.append(answer)
    assert len(constants["MISTAKES_ORDER"]) == len(kept)
    for (fragment, answer), (why, listed) in zip(kept, constants["MISTAKES_ORDER"], strict=True):
        assert listed == answer and fragment in why, (fragment, why)
    assert len({why for why, _ in constants["MISTAKES_ORDER"]}) == len(constants["MISTAKES_ORDER"])


def test_6_3_expects_the_paired_holm_corrected_decision_and_names_the_range_rule_unpaired_and_uncorrected_answers():
    """The expected p-values and orderings of the answer key's table derived again with numpy and the closed forms
    of Student's t (5 and 10 degrees of freedom) or its integral (Welch's), against posenc_ref.lab.evidence and
    the hidden test's constants; the range rule, the unpaired tests and the uncorrected test each give another
    answer, which the hidden test lists with its own message, and so does every other listed mistake."""
    from posenc_ref.lab.evidence import holm, paired_comparisons, paired_t_test

    derived = seeds_derivation()
    scores, pairs, (expected_p, expected_order) = derived["scores"], derived["pairs"], derived["expected"]
    reference = {pair: paired_t_test(scores[pair[0]], scores[pair[1]]).p_value for pair in pairs}
    assert derived["raw"]["paired"] == pytest.approx(list(reference.values()), rel=1e-9, abs=1e-12)
    assert expected_p == pytest.approx(list(holm(reference).values()), rel=1e-9, abs=1e-12)
    findings = paired_comparisons({"far": scores}, alpha=ALPHA, margin=MARGIN, floor=FLOOR)
    assert [(comparison.higher, comparison.lower) for comparison in findings] == pairs
    assert [comparison.finding for comparison in findings] == expected_order
    assert expected_order == [True, False, True, False, False, False]
    # What each rule of the chapter changes on this table: the range rule and the uncorrected test order other pairs.
    first = dict(reversed(derived["orderings"]))
    assert first["range rule"] != expected_order and first["pass the paired test on their own"] != expected_order
    assert first["unpaired test (Welch's), which sets"] != expected_order
    check_seeds_constants(derived, hidden_constants("06_comparison", "seeds_test"))


@pytest.mark.parametrize("index", range(7))
def test_6_3_every_allowed_table_gets_the_derived_answers_and_mistakes(index):
    """Each allowed table: the grader's constants for it against the derivation here, and the chapter's
    paired_comparisons; every table orders some pair and leaves another unordered."""
    from autograder.variants.comparison import VARIANTS
    from posenc_ref.lab.evidence import paired_comparisons

    table = seeds_tables()[index]
    (variant,) = [variant for variant in VARIANTS if variant.item == "6.3"]
    derived = seeds_derivation(table["scores"])
    check_seeds_constants(derived, variant.constants({"table": table}))
    findings = paired_comparisons({"far": derived["scores"]}, alpha=ALPHA, margin=MARGIN, floor=FLOOR)
    assert [comparison.finding for comparison in findings] == derived["expected"][1]
    assert 0 < sum(derived["expected"][1]) < 6


def test_6_3_the_tables_are_the_committed_studys_seed_scores():
    """Every allowed table is the study's: each score a seed's mean exact match over the sizes, to two decimals."""
    import csv
    import statistics

    from autograder import REPOSITORY

    names = {"who-bites-whom": "bites", "associative recall": "recall", "copy": "copy"}
    exact: dict = {}
    with open(Path(REPOSITORY) / "book" / "data" / "length-generalization" / "results.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            exact.setdefault((row["task"], row["position"], int(row["seed"])), {})[int(row["length"])] = float(row["accuracy"])
    for table in seeds_tables():
        low, high = table["sizes"]
        assert (low, high) in ((9, 16), (17, 24)) and len(table["seeds"]) == 6 and len(table["scores"]) == 4
        for kind, scores in table["scores"].items():
            study = [statistics.fmean(exact[names[table["task"]], kind, seed][n] for n in range(low, high + 1))
                     for seed in table["seeds"]]
            assert list(scores) == [round(score, 2) for score in study], (table["task"], kind)


def test_6_3_the_solution_and_right_forms_pass_and_each_mistake_gets_its_message(monkeypatch):
    solution = solution_namespace("06_comparison", "seeds_answer")
    adjusted_p, ordered_pairs = solution["adjusted_p"], solution["ordered_pairs"]
    assert ordered_pairs == [True, False, True, False, False, False]
    right = {"adjusted_p": adjusted_p, "ordered_pairs": ordered_pairs}
    for values in (right, {"adjusted_p": tuple(round(p, 3) for p in adjusted_p), "ordered_pairs": tuple(ordered_pairs)},
                   {"adjusted_p": [np.float64(p) for p in adjusted_p], "ordered_pairs": ordered_pairs}):
        assert grade_item(monkeypatch, "06_comparison", "seeds_test", values=values) == (True, "")
    constants = hidden_constants("06_comparison", "seeds_test")
    wrong = [({"adjusted_p": values}, why) for why, values in constants["MISTAKES"]]
    wrong += [({"ordered_pairs": answer}, why) for why, answer in constants["MISTAKES_ORDER"]]
    wrong += [
        ({"adjusted_p": [round(p, 2) for p in adjusted_p]}, "values are wrong (tolerance 0.001)"),
        ({"ordered_pairs": [True, False, False, False, False, True]}, "wrong for the pairs 2, 5 (counted from 0)"),
        ({"ordered_pairs": [True, True, True, False, False]}, f"{VISIBLE_FAILURE}ordered_pairs must have 6 entries"),
        ({"ordered_pairs": [1, 1, 1, 0, 0, 0]}, f"{VISIBLE_FAILURE}every entry of ordered_pairs must be True or False"),
        ({"adjusted_p": [0.0, 0.02, 0.02, 0.07, 0.07, 1.5]}, f"{VISIBLE_FAILURE}an adjusted p-value lies between 0 and 1"),
    ]
    for change, fragment in wrong:
        passed, message = grade_item(monkeypatch, "06_comparison", "seeds_test", values={**right, **change})
        assert not passed and fragment in message, (change, message)
        if not fragment.startswith(VISIBLE_FAILURE):  # the message names the variable that is wrong
            assert message.startswith(f"{next(iter(change))}: "), (change, message)


def shaw_rewrite_mib(batch, heads, n, head_dim, k) -> list[float]:
    """6.4 from the shapes of the two steps, counted here with torch tensors of those shapes (meta device)."""
    def mib(*shape):
        return torch.empty(*shape, device="meta").numel() * 4 / 2**20

    q, rel_k_table = torch.empty(batch, heads, n, head_dim, device="meta"), torch.empty(2 * k + 1, head_dim, device="meta")
    relative = q @ rel_k_table.T  # (batch, heads, n, 2k + 1)
    index = torch.empty(n, n, dtype=torch.long, device="meta")
    placed = relative.gather(-1, index.expand(batch, heads, n, n))
    first, second = mib(*relative.shape), mib(*placed.shape)
    return [first, second, mib(batch, heads, n, n, head_dim) / (first + second)]


def test_6_4_the_two_steps_take_6_19_and_192_mib_a_62nd_of_the_plain_product(monkeypatch):
    right = shaw_rewrite_mib(4, 12, 1024, 64, 16)
    assert hidden_constants("06_comparison", "shaw_memory_test")["EXPECTED"] == pytest.approx(right, abs=1e-9)
    assert right[:2] == [6.1875, 192.0] and round(right[2], 2) == 62.0
    solution = check_item(
        "06_comparison", "shaw_memory_answer", "shaw_memory_test", "shaw_rewrite",
        [[6.19, 192, 62.0], (6.1875, 192.0, 62.002)],
        [
            ([6.0, 192.0, 62.06], "not 2k"),
            ([3.1875, 192.0, 62.95], "keys lie on both sides"),
            ([192.0, 192.0, 32.0], "not one per key"),
            ([49.5, 1536.0, 62.0], "these are bits"),
            ([6.488, 201.327, 62.0], "not 10**6"),
            ([1.546875, 48.0, 62.0], "a row for every batch element"),
            ([6.1875, 192.0, 1985.94], "not with the relative scores alone"),
            ([6.1875, 192.0, 0.0161], "not the other way round"),
            ([6.1875, 192.0, 60.0], "got 60, expected 62.0019"),
        ],
        monkeypatch,
    )
    assert solution == pytest.approx(right)


def test_6_4_every_allowed_size_is_derived_again_from_the_shapes():
    from autograder.variants.comparison import VARIANTS

    (variant,) = [variant for variant in VARIANTS if variant.item == "6.4"]
    for values in itertools.product(*variant.choices.values()):
        parameters = dict(zip(variant.choices, values, strict=True))
        assert variant.constants(parameters)["EXPECTED"] == pytest.approx(shaw_rewrite_mib(*values), rel=1e-12)


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

    def shared(bucket, distance: int) -> list[int]:
        same = [a for a in range(1, 4000) if bucket(-a) == bucket(-distance)]
        return [same[0], same[-1]]

    def reached(bucket_of, length: int) -> list[int]:
        encoder = {bucket_of(r, True) for r in range(-(length - 1), length)}
        decoder = {bucket_of(r, False) for r in range(-(length - 1), 1)}
        return [len(encoder), len(decoder)]

    def ours(r, bidirectional=False):
        return int(relative_position_bucket(torch.tensor([r]), bidirectional=bidirectional, num_buckets=64,
                                            max_distance=1000)[0])

    assert expected("04_relative", "t5_shared_test") == shared(ours, 150)
    assert expected("04_relative", "bucket_reach_test") == reached(ours, 100)
    try:
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:
        pass
    else:
        def hugging_face(r, bidirectional=False):
            return int(T5Attention._relative_position_bucket(torch.tensor([r]), bidirectional, 64, 1000)[0])

        assert expected("04_relative", "t5_shared_test") == shared(hugging_face, 150)
        assert expected("04_relative", "bucket_reach_test") == reached(hugging_face, 100)

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
    assert hidden_constants("06_comparison", "seeds_test")["EXPECTED_ORDER"] == [comparison.finding for comparison in findings]


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
        ("quiz_alibi_reach", "B", {"A": "24 is not a power of two", "C": "head 17 keeps its attention closest",
                                   "D": "a gentler slope reaches further back"}),
        ("quiz_past_buckets", "D", {"A": "only the keys at or before the query get it", "B": "the nearest ones too",
                                    "C": "normalised again"}),
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
        ("quiz_fifth_kind", "B", {"A": "multiplies the smallest of m", "C": "now ten", "D": "adjusts every p-value"}),
        ("quiz_order_blind", "C", {"A": "the layout only orders", "B": "1 radian a token", "D": "a scaled table"}),
    ],
}
VARIABLE: dict[str, str] = {}


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
    # Quiz 1: 24 heads = the 16 slopes of 16 heads, then the odd-numbered slopes of 32 heads (h = 1, 3, ..., 15)
    slopes = [2.0 ** (-8 * h / 16) for h in range(1, 17)] + [2.0 ** (-8 * h / 32) for h in range(1, 16, 2)]
    # with equal content scores, the weight of a key 50 back against the key 1 back is exp(-m * 49)
    reach = [math.exp(-slope * 49) for slope in slopes]
    furthest, closest = (1 + max(range(24), key=reach.__getitem__), 1 + min(range(24), key=reach.__getitem__))
    assert (furthest, closest) == (16, 17)  # B
    naive = [2.0 ** (-8 * h / 24) for h in range(1, 25)]
    assert (1 + naive.index(min(naive)), 1 + naive.index(max(naive))) == (24, 1)  # A, the single sequence
    # Quiz 2: +1 on buckets 0 to 15 (offsets r <= 0) of an encoder, any content scores and biases
    torch.manual_seed(0)
    offsets = torch.arange(-40, 41)  # (81,): keys around a query
    table = torch.randn(32, dtype=torch.float64)  # one head's learned biases
    buckets = torch.tensor([(16 if r > 0 else 0) + t5_bucket_back(abs(r), 32, 128) for r in offsets.tolist()])
    assert set(buckets[offsets <= 0].tolist()) <= set(range(16)) and set(buckets[offsets > 0].tolist()) <= set(range(16, 32))
    content = torch.randn(81, dtype=torch.float64)
    before = torch.softmax(content + table[buckets], 0)
    after = torch.softmax(content + (table + (torch.arange(32) < 16)).take(buckets), 0)
    ratio = after / before  # one factor for the keys at or before the query, another for those after it
    torch.testing.assert_close(ratio[offsets <= 0] / ratio[offsets > 0].mean(), torch.full((41,), math.e, dtype=torch.float64))
    assert not torch.allclose(ratio, torch.ones(81, dtype=torch.float64))  # A: the row changes
    assert not torch.allclose(ratio[offsets > 0], torch.ones(40, dtype=torch.float64))  # C: every weight changes


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
    # quiz 1: Holm over 6 pairs keeps both orderings, over 10 loses both (B)
    for family, kept in ((6, [True, True]), (10, [False, False])):
        p_values = [0.006, 0.008] + [0.4] * (family - 2)
        adjusted = [min(1.0, (family - rank) * p) for rank, p in enumerate(sorted(p_values))]
        adjusted = [max(adjusted[: rank + 1]) for rank in range(family)]
        assert [p < 0.05 for p in adjusted[:2]] == kept, family
        if family == 10:
            assert adjusted[:2] == pytest.approx([0.06, 0.072])
    # quiz 2: an encoder that adds one row to every token is blind to order; the other bugs are not
    generator = torch.Generator().manual_seed(6)
    tokens, permutation = torch.randn(6, 8, dtype=torch.float64, generator=generator), torch.tensor([3, 0, 5, 1, 4, 2])
    pe = torch.randn(6, 8, dtype=torch.float64, generator=generator)

    def pooled(x):
        weights = torch.softmax(x @ x.T, dim=-1)
        return (weights @ x).mean(0)

    torch.testing.assert_close(pooled(tokens[permutation] + pe[0]), pooled(tokens + pe[0]))
    assert (pooled(tokens[permutation] + 0.1 * pe) - pooled(tokens + 0.1 * pe)).abs().max() > 1e-6


def three_seeds_tables() -> tuple[dict, ...]:
    """The allowed tables of 6.5 (the student's side of the item), the one answer key's first."""
    from autograder.student.parameters import varied_item

    return varied_item("06_comparison", "6.5").choices["table"]


def separated(first, second, strict: bool = True) -> int:
    """The range rule on three seeds, written here with numpy: 1, -1 or 0."""
    low_a, high_a, low_b, high_b = np.min(first), np.max(first), np.min(second), np.max(second)
    above = low_a > high_b if strict else low_a >= high_b
    below = low_b > high_a if strict else low_b >= high_a
    return 1 if above else -1 if below else 0


def three_seeds_derivation(scores) -> dict:
    """6.5's right answer and each named mistake (by a fragment of its message) for a table."""
    kinds = list(scores["far"])
    pairs = [(kinds[i], kinds[j]) for i in range(4) for j in range(i + 1, 4)]
    far, beyond = scores["far"], scores["beyond"]
    right = [separated(far[a], far[b]) for a, b in pairs]
    means = [int(np.sign(round(float(np.mean(far[a])), 2) - round(float(np.mean(far[b])), 2))) for a, b in pairs]
    return {"right": right, "mistakes": [
        ("a higher mean is not enough", means),
        ("the ranges touch", [separated(far[a], far[b], strict=False) for a, b in pairs]),
        ("sizes 9 to 16", [separated(beyond[a], beyond[b]) for a, b in pairs]),
        ("the wrong way round", [-value for value in right]),
    ]}


@pytest.mark.parametrize("index", range(7))
def test_6_5_every_allowed_table_gets_the_range_rule_and_its_named_mistakes(index):
    from autograder.variants.comparison import VARIANTS

    table = three_seeds_tables()[index]
    (variant,) = [variant for variant in VARIANTS if variant.item == "6.5"]
    constants = variant.constants({"table": table})
    derived = three_seeds_derivation(table["scores"])
    assert constants["EXPECTED"] == derived["right"] and 0 < derived["right"].count(0) < 6
    kept, seen = [], [derived["right"]]
    for fragment, answer in derived["mistakes"]:
        if answer not in seen:
            kept.append((fragment, answer))
            seen.append(answer)
    assert len(constants["MISTAKES"]) == len(kept) >= 2
    for (fragment, answer), (why, listed) in zip(kept, constants["MISTAKES"], strict=True):
        assert listed == answer and fragment in why, (fragment, why)
    assert kept[0][0] == "a higher mean is not enough"  # the means always order a pair the rule leaves


def test_6_5_the_tables_are_the_committed_studys_seed_scores_and_their_answers_differ():
    import csv
    import statistics

    from autograder import REPOSITORY

    names = {"who-bites-whom": "bites", "associative recall": "recall"}
    exact: dict = {}
    with open(Path(REPOSITORY) / "book" / "data" / "length-generalization" / "results.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            exact.setdefault((row["task"], row["position"], int(row["seed"])), {})[int(row["length"])] = float(row["accuracy"])
    for table in three_seeds_tables():
        assert len(table["seeds"]) == 3 and list(table["scores"]["far"]) == list(table["scores"]["beyond"])
        for which, (low, high) in (("beyond", (9, 16)), ("far", (17, 24))):
            for kind, scores in table["scores"][which].items():
                study = [statistics.fmean(exact[names[table["task"]], kind, seed][n] for n in range(low, high + 1))
                         for seed in table["seeds"]]
                assert list(scores) == [round(score, 2) for score in study], (table["task"], kind, which)
    answers = [tuple(three_seeds_derivation(table["scores"])["right"]) for table in three_seeds_tables()]
    assert len(set(answers)) == len(answers)


def test_6_5_the_solution_and_right_forms_pass_and_each_mistake_gets_its_message(monkeypatch):
    derived = three_seeds_derivation(three_seeds_tables()[0]["scores"])
    assert derived["right"] == [0, 1, 1, 0, 0, 0]
    solution = check_item(
        "06_comparison", "claims_answer", "claims_test", "far_pairs",
        [(0, 1, 1, 0, 0, 0), [0.0, 1.0, 1.0, 0.0, 0.0, 0.0], [np.int64(value) for value in derived["right"]]],
        [(answer, fragment) for fragment, answer in derived["mistakes"]] + [([0, 1, 0, 0, 0, 0], "got 0, expected 1")],
        monkeypatch,
    )
    assert solution == derived["right"]
    passed, message = grade_item(monkeypatch, "06_comparison", "claims_test", values={"far_pairs": [0, 1, 1, 0, 0, 2]})
    assert not passed and message.startswith(VISIBLE_FAILURE)


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
