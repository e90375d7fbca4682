"""The varied items of chapters 4 and 5: 4.3 (the T5 buckets a short training run reaches), 4.7 (which keys share a
decoder's bucket), 4.8 (when ALiBi hides the better token), 5.6 (RoPE pairs that NTK-aware scaling pushes past
twice their trained angles) and 5.7 (the bug of the student's mystery_rope and the angle that shows it).

The answer key reproduces the literals of each hidden test; the expected values and the named mistakes agree, for
every allowed combination, with derivations written here from the chapters' formulas (a loop over distances, a
search over offsets with a softmax, a loop over positions), not with autograder/ or posenc_ref; no mistake is
graded as right and no answer hangs on a last decimal. A class graded end to end, across all six chapters, is
in tests/test_grader_variants.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from item_grading import VISIBLE_FAILURE, grade_item, hidden_constants, source_cells

from autograder.variants import draw, variants_of

RELATIVE, ROPE = "04_relative", "05_rope"
VARIED = {variant.item: variant for assignment in (RELATIVE, ROPE) for variant in variants_of(assignment)}
ITEMS = ("4.3", "4.7", "4.8", "5.6")
FAR = 10**7  # tokens back: in the last bucket for every max_distance here


def combinations(item: str) -> list[dict]:
    choices = VARIED[item].choices
    return [dict(zip(choices, values, strict=True)) for values in itertools.product(*choices.values())]


def combination_id(parameters: dict) -> str:
    return "-".join(f"{name}={value}" for name, value in parameters.items())


# ---------------------------------------------------------------------------------------------------------
# Derivations written here, from the formulas of the chapters
# ---------------------------------------------------------------------------------------------------------


def t5_bucket(r: int, num_buckets: int, max_distance: int, *, bidirectional: bool = True) -> int:
    """T5's bucket of the offset r = j - i, as in the T5 paper's code (float64 logarithms)."""
    if bidirectional:
        n = num_buckets // 2
        bucket, a = (n if r > 0 else 0), abs(r)
    else:
        n = num_buckets
        bucket, a = 0, max(-r, 0)
    exact = n // 2
    if a < exact:
        return bucket + a
    return bucket + min(n - 1, exact + int(math.log(a / exact) / math.log(max_distance / exact) * (n - exact)))


def last_bucket_start(num_buckets: int, max_distance: int, *, bidirectional: bool = True) -> int:
    """The first distance a >= 1 whose key, a tokens before the query, shares the bucket of a key FAR back."""
    last = t5_bucket(-FAR, num_buckets, max_distance, bidirectional=bidirectional)
    a = 1
    while t5_bucket(-a, num_buckets, max_distance, bidirectional=bidirectional) != last:
        a += 1
    return a


def trained_buckets(num_buckets: int, max_distance: int, length: int) -> list[int]:
    """[encoder, decoder]: the distinct buckets of every (query, key) pair of a sequence of ``length`` tokens, keys
    after the query left out for the decoder (the causal mask hides them)."""
    pairs = [(i, j) for i in range(length) for j in range(length)]
    encoder = {t5_bucket(j - i, num_buckets, max_distance) for i, j in pairs}
    decoder = {t5_bucket(j - i, num_buckets, max_distance, bidirectional=False) for i, j in pairs if j <= i}
    return [len(encoder), len(decoder)]


def shared_distances(num_buckets: int, max_distance: int, distance: int, *, bidirectional: bool = False) -> list[int]:
    """[first, last]: walking down and up from ``distance`` while the key stays in its bucket."""
    mine = t5_bucket(-distance, num_buckets, max_distance, bidirectional=bidirectional)
    first = last = distance
    while first > 1 and t5_bucket(-(first - 1), num_buckets, max_distance, bidirectional=bidirectional) == mine:
        first -= 1
    while t5_bucket(-(last + 1), num_buckets, max_distance, bidirectional=bidirectional) == mine:
        last += 1
    return [first, last]


def alibi_slope(head: int, heads: int) -> float:
    """ALiBi's slope of head ``head`` (1-based) among ``heads`` (a power of two): 2**(-8 head / heads)."""
    return 2.0 ** (-8 * head / heads)


def hiding_by_search(lead: float, slope: float) -> int:
    """The first D >= 2 at which a softmax over the two keys (the far one D back with ``lead`` more content
    score, the near one 1 back) gives the far key the smaller weight."""
    for distance in range(2, 100_000):
        far, near = lead - slope * distance, -slope * 1
        weights = torch.softmax(torch.tensor([far, near], dtype=torch.float64), dim=0)
        if weights[0] < weights[1]:
            return distance
    raise AssertionError("no distance found")


def never_turning_pairs(base: float, head_dim: int, length: int, *, full_turn: float = 2 * math.pi) -> int:
    """Pairs i whose angle p * base**(-2i/d) stays below ``full_turn`` at every position p of 0..L-1, checked at
    every position."""
    positions = torch.arange(length, dtype=torch.float64)  # (L,)
    return sum(bool((positions * base ** (-2 * i / head_dim) < full_turn).all()) for i in range(head_dim // 2))


def past_twice(base: float, head_dim: int, length: int, factor: int, *, scaled_base: float | None = None,
               divide: float = 1.0, only_slow: bool = True) -> int:
    """Pairs (that never turned within L positions, when ``only_slow``) of which some position of 0..sL-1, with
    the frequencies scaled_base**(-2i/d) / divide, gives an angle above twice the largest angle of positions
    0..L-1 with base**(-2i/d); checked at every position. ``scaled_base`` defaults to NTK-aware's."""
    if scaled_base is None:
        scaled_base = base * factor ** (head_dim / (head_dim - 2))
    trained_positions = torch.arange(length, dtype=torch.float64)
    read_positions = torch.arange(factor * length, dtype=torch.float64)
    count = 0
    for i in range(head_dim // 2):
        trained = trained_positions * base ** (-2 * i / head_dim)
        if only_slow and not bool((trained < 2 * math.pi).all()):
            continue
        read = read_positions * scaled_base ** (-2 * i / head_dim) / divide
        count += bool((read > 2 * trained.max()).any())
    return count


def rope_56(parameters: dict, base: float | None = None) -> list[int]:
    base = parameters["base"] if base is None else base
    head_dim, length, factor = parameters["head_dim"], parameters["context"], parameters["factor"]
    return [never_turning_pairs(base, head_dim, length), past_twice(base, head_dim, length, factor)]


def expected_by_derivation(item: str, parameters: dict) -> list[int]:
    if item == "4.3":
        return trained_buckets(parameters["num_buckets"], parameters["max_distance"], parameters["length"])
    if item == "4.7":
        return shared_distances(parameters["num_buckets"], parameters["max_distance"], parameters["distance"])
    if item == "4.8":
        heads = parameters["heads"]
        return [hiding_by_search(parameters["lead"], alibi_slope(h, heads)) for h in (1, heads)]
    return rope_56(parameters)


def mistakes_by_derivation(item: str, parameters: dict) -> list[list[int]]:
    """The answers of the named mistakes, in the order the hidden test lists them, before the ones equal to
    the right answer (or to an earlier mistake) are left out."""
    if item == "4.3":
        buckets, distance, length = parameters["num_buckets"], parameters["max_distance"], parameters["length"]
        encoder, decoder = trained_buckets(buckets, distance, length)
        past = t5_bucket(-(length - 1), buckets, distance) + 1  # the buckets of the keys at or before the query
        return [trained_buckets(buckets, distance, length + 1), [encoder + 1, decoder], [past, decoder],
                [encoder, past], [decoder, encoder], [buckets, buckets], trained_buckets(32, 128, length)]
    if item == "4.7":
        buckets, distance, a = parameters["num_buckets"], parameters["max_distance"], parameters["distance"]
        first, last = shared_distances(buckets, distance, a)
        return [shared_distances(buckets, distance, a, bidirectional=True), [first, last + 1], [first - 1, last],
                [first - 1, last + 1]]
    if item == "4.8":
        lead, heads = parameters["lead"], parameters["heads"]
        first, last = (hiding_by_search(lead, alibi_slope(h, heads)) for h in (1, heads))
        eight = [hiding_by_search(lead, alibi_slope(h, 8)) for h in (1, 8)]
        return [[first - 1, last - 1], [last, first], [last - 1, first - 1], eight]
    base, head_dim, length, factor = parameters["base"], parameters["head_dim"], parameters["context"], parameters["factor"]
    slow, beyond = rope_56(parameters)
    return [
        [head_dim // 2 - slow, beyond],
        [slow, past_twice(base, head_dim, length, factor, only_slow=False)],
        [slow, past_twice(base, head_dim, length, factor, scaled_base=base)],
        [slow, past_twice(base, head_dim, length, factor, scaled_base=base * factor)],
        [slow, past_twice(base, head_dim, length, factor, scaled_base=base, divide=factor)],
        rope_56(parameters, base=10_000),
    ]


def distinct(right: list[int], wrong: list[list[int]]) -> list[list[int]]:
    kept: list[list[int]] = []
    for answer in wrong:
        if answer != right and answer not in kept:
            kept.append(answer)
    return kept


# ---------------------------------------------------------------------------------------------------------
# The one answer key
# ---------------------------------------------------------------------------------------------------------


def test_the_items_vary_with_todays_values_first():
    assert {item: VARIED[item].answer_key for item in ITEMS} == {
        "4.3": {"num_buckets": 64, "max_distance": 1000, "length": 100},
        "4.7": {"num_buckets": 64, "max_distance": 1000, "distance": 150},
        "4.8": {"lead": 1.3, "heads": 8},
        "5.6": {"base": 500_000, "head_dim": 96, "context": 8192, "factor": 8},
    }
    assert [VARIED[item].test_cell for item in ITEMS] == ["bucket_reach_test", "t5_shared_test", "alibi_hiding_test",
                                                           "slow_pairs_test"]


@pytest.mark.parametrize("item", ITEMS)
def test_the_answer_key_gives_exactly_the_literal_constants_of_the_hidden_test(item):
    variant = VARIED[item]
    literal = hidden_constants(variant.assignment, variant.test_cell)
    computed = variant.constants(variant.answer_key)
    assert set(computed) == {"EXPECTED", "MISTAKES"} <= set(literal)
    assert computed["EXPECTED"] == literal["EXPECTED"]
    assert [wrong for _, wrong in computed["MISTAKES"]] == [wrong for _, wrong in literal["MISTAKES"]]
    assert all(isinstance(why, str) and why for why, _ in computed["MISTAKES"])


@pytest.mark.parametrize("item", ITEMS)
def test_the_literals_of_the_hidden_test_follow_from_the_derivations(item):
    """The one answer key's literals, derived here (so a wrong literal cannot pass by agreeing with the code)."""
    variant = VARIED[item]
    literal = hidden_constants(variant.assignment, variant.test_cell)
    right = expected_by_derivation(item, variant.answer_key)
    assert literal["EXPECTED"] == right
    assert [wrong for _, wrong in literal["MISTAKES"]] == distinct(right, mistakes_by_derivation(item, variant.answer_key))


# ---------------------------------------------------------------------------------------------------------
# Every allowed combination, against the derivations
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("item", "parameters"), [(item, parameters) for item in ITEMS for parameters in combinations(item)],
                         ids=lambda value: value if isinstance(value, str) else combination_id(value))
def test_expected_values_and_mistakes_are_what_the_derivations_find(item, parameters):
    """4.3: every pair of a sequence; 4.7: a walk over distances; 4.8: a search over offsets; 5.6: a loop over
    positions."""
    constants = VARIED[item].constants(parameters)
    right = expected_by_derivation(item, parameters)
    assert constants["EXPECTED"] == right
    assert [wrong for _, wrong in constants["MISTAKES"]] == distinct(right, mistakes_by_derivation(item, parameters))


def test_the_derivations_can_tell_the_known_cases():
    """The derivations themselves, on values stated in the chapters and in posenc_ref's docstring."""
    assert last_bucket_start(32, 128) == 91  # T5's defaults: 8 * 2**3.5 = 90.51
    assert t5_bucket(-90, 32, 128) == 14 and t5_bucket(-91, 32, 128) == 15
    # the decoder's bucket of 150 (64 buckets, max_distance 1000) is 32 + 14: edges 32 * 31.25**(14/32) = 144.26
    # and 32 * 31.25**(15/32) = 160.64
    assert shared_distances(64, 1000, 150) == [145, 160]
    assert [hiding_by_search(1.3, alibi_slope(h, 8)) for h in (1, 8)] == [4, 334]  # 1 + 2.6, 1 + 332.8
    assert never_turning_pairs(500_000, 128, 8192) == 29  # pairs 35 to 63 of Llama 3 (the book's example)
    assert never_turning_pairs(500_000, 96, 8192) == 21  # pairs 27 to 47: 2 pi 500000**(54/96) = 10,089 > 8,191
    # pair i reaches 65,535 / 8,191 * 8**(-2i/94) times its trained angle: 2.19 for pair 31, 1.91 for pair 32
    assert past_twice(500_000, 96, 8192, 8) == 5


@pytest.mark.parametrize("item", ITEMS)
def test_for_every_allowed_combination_no_mistake_is_the_right_answer(item):
    """The hidden tests compare whole numbers exactly (atol=0): each mistake must differ by at least 1 in some
    entry, and no two mistakes share an answer (each message is the one its answer earns)."""
    variant = VARIED[item]
    assert "TOLERANCE" not in hidden_constants(variant.assignment, variant.test_cell)
    answers = set()
    for parameters in combinations(item):
        constants = variant.constants(parameters)
        right = constants["EXPECTED"]
        answers.add(tuple(right))
        wrongs = [wrong for _, wrong in constants["MISTAKES"]]
        assert wrongs, parameters
        assert len({tuple(wrong) for wrong in wrongs}) == len(wrongs), parameters
        for wrong in wrongs:
            assert len(wrong) == len(right)
            assert max(abs(a - b) for a, b in zip(wrong, right, strict=True)) >= 1, (parameters, wrong)
    assert len(answers) >= 0.6 * len(combinations(item)), f"{len(answers)} answers"


def scaled(a: int, n: int, max_distance: int) -> float:
    """The logarithmic bucket's value before the floor, for n buckets a direction: e + (n - e) ln(a/e) / ln(D/e)."""
    exact = n // 2
    return exact + math.log(a / exact) / math.log(max_distance / exact) * (n - exact)


def float32_buckets(distances: torch.Tensor, n: int, max_distance: int) -> torch.Tensor:
    """The buckets of ``distances`` (past keys) for n buckets a direction, in float32 as T5 and posenc_ref compute."""
    exact = n // 2
    log = exact + (torch.log(distances.float() / exact) / math.log(max_distance / exact) * (n - exact)).long()
    return torch.where(distances < exact, distances, log.clamp(max=n - 1))


@pytest.mark.parametrize("parameters", combinations("4.3"), ids=combination_id)
def test_no_count_of_trained_buckets_hangs_on_a_last_decimal(parameters):
    """L is shorter than max_distance; the logarithmic value of distance L - 1 is at least 5e-4 from a whole number in
    both layouts, no bucket below it is skipped, and float32 gives the same counts."""
    buckets, distance, length = parameters["num_buckets"], parameters["max_distance"], parameters["length"]
    assert length < distance
    for n in (buckets // 2, buckets):
        if length - 1 >= n // 2:
            value = scaled(length - 1, n, distance)
            assert abs(value - round(value)) >= 5e-4, (n, value)
        reached = float32_buckets(torch.arange(length), n, distance)
        assert reached.unique().tolist() == list(range(int(reached.max()) + 1))  # no bucket skipped
    encoder, decoder = trained_buckets(buckets, distance, length)
    assert [2 * int(float32_buckets(torch.tensor([length - 1]), buckets // 2, distance)) + 1,
            int(float32_buckets(torch.tensor([length - 1]), buckets, distance)) + 1] == [encoder, decoder]


@pytest.mark.parametrize("parameters", combinations("4.7"), ids=combination_id)
def test_no_shared_bucket_hangs_on_a_last_decimal(parameters):
    """The distance lies in the decoder's logarithmic range below its last bucket; at both edges of its bucket (and one
    token outside them) the logarithmic value is at least 1e-4 from a whole number, and float32 finds the same edges."""
    buckets, distance, a = parameters["num_buckets"], parameters["max_distance"], parameters["distance"]
    first, last = shared_distances(buckets, distance, a)
    assert buckets // 2 <= first and t5_bucket(-a, buckets, distance, bidirectional=False) < buckets - 1
    for edge in (first - 1, first, last, last + 1):
        value = scaled(edge, buckets, distance)
        assert abs(value - round(value)) >= 1e-4, (edge, value)
    distances = torch.arange(1, 4 * distance)
    in_float32 = float32_buckets(distances, buckets, distance)
    same = distances[in_float32 == in_float32[a - 1]]
    assert [int(same[0]), int(same[-1])] == [first, last]


@pytest.mark.parametrize("parameters", combinations("4.8"), ids=combination_id)
def test_no_alibi_distance_is_a_tie(parameters):
    """lead / slope is at least 0.1 from a whole number: no distance where the two weights are (nearly) equal."""
    heads = parameters["heads"]
    for head in (1, heads):
        ratio = parameters["lead"] / alibi_slope(head, heads)
        assert abs(ratio - round(ratio)) >= 0.1, (head, ratio)
        slope32 = float(torch.tensor(alibi_slope(head, heads), dtype=torch.float32))
        assert hiding_by_search(parameters["lead"], slope32) == hiding_by_search(parameters["lead"],
                                                                                 alibi_slope(head, heads))


@pytest.mark.parametrize("parameters", combinations("5.6"), ids=combination_id)
def test_no_count_of_5_6_hangs_on_the_last_position_or_on_a_last_decimal(parameters):
    """No wavelength 2 pi base**(2i/d) lies within 10 tokens of L - 1 or L, and no pair's ratio of its largest
    angle at sL to its largest trained angle lies within 0.5% of 2: L - 1 or L as the last position, and float32
    frequencies, give the same counts."""
    base, head_dim, length, factor = parameters["base"], parameters["head_dim"], parameters["context"], parameters["factor"]
    wavelengths = [2 * math.pi * base ** (2 * i / head_dim) for i in range(head_dim // 2)]
    assert min(abs(wavelength - last) for wavelength in wavelengths for last in (length - 1, length)) >= 10
    scaled_base = base * factor ** (head_dim / (head_dim - 2))
    ratios = [(factor * length - 1) * scaled_base ** (-2 * i / head_dim) / ((length - 1) * base ** (-2 * i / head_dim))
              for i in range(head_dim // 2)]
    assert min(abs(ratio - 2) for ratio in ratios) >= 0.01
    pairs = torch.arange(head_dim // 2, dtype=torch.float64)
    thetas32 = (base ** (-2 * pairs / head_dim)).float()
    scaled32 = (scaled_base ** (-2 * pairs / head_dim)).float()
    slow32 = (length - 1) * thetas32 < 2 * math.pi
    beyond32 = (factor * length - 1) * scaled32 > 2 * (length - 1) * thetas32
    assert [int(slow32.sum()), int((slow32 & beyond32).sum())] == rope_56(parameters)
    assert never_turning_pairs(base, head_dim, length + 1) == never_turning_pairs(base, head_dim, length)


@pytest.mark.parametrize(("student", "pairs"), [("", 48), ("ada", 32), ("ida", 128)])
def test_the_visible_test_of_5_6_bounds_the_counts_by_the_students_pairs(monkeypatch, student, pairs):
    """The notebook's parameters (here from $JUPYTERHUB_USER, as on a hub) set the bound d/2 of the visible test."""
    monkeypatch.delenv("AUTOGRADER_GRADING", raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", student)
    assert draw(VARIED["5.6"], student)["head_dim"] // 2 == pairs or not student
    passed, message = grade_item(monkeypatch, ROPE, "slow_pairs_test", values={"ntk_slow_pairs": [pairs + 1, 0]})
    assert not passed and message == f"{VISIBLE_FAILURE}two counts of pairs, each between 0 and d/2", message
    _, message = grade_item(monkeypatch, ROPE, "slow_pairs_test", values={"ntk_slow_pairs": [pairs, pairs]})
    assert not message.startswith(VISIBLE_FAILURE), message


def test_no_student_draws_the_parameters_whose_answers_the_book_prints():
    """The book draws T5's 32 buckets (max_distance 32 to 256) and counts the slow pairs of heads of 128 features
    (bases 10000 and 500000, lengths 2048 and 8192) and the NTK-aware overshoot of d = 128: no student's 4.3, 4.7
    or 5.6 uses them."""
    assert 32 not in VARIED["4.3"].choices["num_buckets"] and 32 not in VARIED["4.7"].choices["num_buckets"]
    assert 128 not in VARIED["5.6"].choices["head_dim"]


@pytest.mark.parametrize("item", ITEMS)
def test_the_parameters_line_names_every_value(item):
    for parameters in combinations(item):
        line = VARIED[item].describe(parameters)
        assert all(str(value) in line for value in parameters.values()), line


# ---------------------------------------------------------------------------------------------------------
# 5.7: the student's mystery_rope and the angle that shows its bug
# ---------------------------------------------------------------------------------------------------------

BUGS = ("doubled_exponent", "half_layout", "degrees", "squared_positions", "wrong_direction", "none")


def rotate_e(x: torch.Tensor, position: int, bug: str) -> torch.Tensor:
    """``x`` of d = 8 rotated to ``position`` (base 10) with ``bug``: each pair turned here by its 2 x 2 rotation,
    the pairs (2i, 2i + 1), or (i, i + 4) for the half layout."""
    y = x.clone()
    for i in range(4):
        angle = position * 10.0 ** (-(4 if bug == "doubled_exponent" else 2) * i / 8)
        angle = {"wrong_direction": -angle, "degrees": angle * math.pi / 180,
                 "squared_positions": angle * position}.get(bug, angle)
        first, second = (i, i + 4) if bug == "half_layout" else (2 * i, 2 * i + 1)
        y[first] = x[first] * math.cos(angle) - x[second] * math.sin(angle)
        y[second] = x[first] * math.sin(angle) + x[second] * math.cos(angle)
    return y


def measured_by_rotation(bug: str, position: int) -> float:
    """atan2(y[7], y[6]) for y = e_6 of d = 8 rotated to ``position`` (base 10) with ``bug``."""
    y = rotate_e(torch.eye(8, dtype=torch.float64)[6], position, bug)
    return math.atan2(float(y[7]), float(y[6]))


def the_mysteries() -> dict[int, str]:
    """Which bug each mystery_rope_<n> of the notebook has, found here by comparing it, on a random vector at
    three positions, with each bug written pair by pair (not read from the grader's map)."""
    cells = source_cells(ROPE)
    namespace: dict = {}
    exec(cells["imports"], namespace)  # noqa: S102 (source/ is trusted)
    exec(cells["planted_bug_code"].split("\n\n\nmystery_rope = ")[0], namespace)  # noqa: S102
    x = torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    found = {}
    for number in range(1, 7):
        mystery = namespace[f"mystery_rope_{number}"]
        matches = [bug for bug in BUGS
                   if all(torch.allclose(mystery(x[None], torch.tensor([m]), base=10.0)[0], rotate_e(x, m, bug))
                          for m in (1, 3, 9))]
        assert len(matches) == 1, (number, matches)
        found[number] = matches[0]
    return found


POSITIONS_57 = (9, 7, 8, 10, 11, 13, 14)


def test_5_7_varies_with_the_answer_keys_values_first():
    variant = next(variant for variant in variants_of(ROPE) if variant.item == "5.7")
    assert variant.answer_key == {"mystery": 3, "position": 9} and variant.test_cell == "planted_bug_test"
    literal = hidden_constants(ROPE, "planted_bug_test")
    computed = variant.constants(variant.answer_key)
    assert set(computed) == {"EXPECTED_BUG", "EXPECTED", "MISTAKES"} <= set(literal)
    assert computed == {name: literal[name] for name in computed}
    assert literal["EXPECTED_BUG"] == "wrong_direction"
    assert literal["EXPECTED"] == pytest.approx([measured_by_rotation("wrong_direction", 9)], abs=1e-12)


def test_5_7_each_number_is_one_of_the_six_bugs_and_the_grader_knows_which():
    found = the_mysteries()
    assert sorted(found.values()) == sorted(BUGS)
    variant = next(variant for variant in variants_of(ROPE) if variant.item == "5.7")
    assert sorted(variant.choices["mystery"]) == [1, 2, 3, 4, 5, 6]
    for number, bug in found.items():
        assert variant.constants({"mystery": number, "position": 9})["EXPECTED_BUG"] == bug


@pytest.mark.parametrize("position", POSITIONS_57)
def test_5_7_every_bug_shows_its_own_angle_at_every_allowed_position(position):
    """For every mystery and position: the expected angle is the one measured here, every bug gives an angle at
    least 0.05 from every other's (modulo 2 pi), the half layout's is 0 or pi far from a tie, and each named
    mistake is at least 0.05 from the right angle; the mistakes are those the hidden test names."""
    variant = next(variant for variant in variants_of(ROPE) if variant.item == "5.7")
    assert variant.choices["position"] == POSITIONS_57
    found = the_mysteries()
    angles = {bug: measured_by_rotation(bug, position) for bug in BUGS}

    def gap(a: float, b: float) -> float:
        return abs(math.remainder(a - b, 2 * math.pi))

    assert min(gap(angles[a], angles[b]) for a, b in itertools.combinations(BUGS, 2)) > 0.15
    assert abs(math.cos(position * 10.0 ** (-2 * 2 / 8))) > 0.1  # half layout: e_6 is cos(m theta_2) e_6
    for number, bug in found.items():
        constants = variant.constants({"mystery": number, "position": position})
        assert constants["EXPECTED_BUG"] == bug
        assert gap(constants["EXPECTED"][0], angles[bug]) < 1e-12
        rope, in_degrees = angles["none"], math.degrees(angles[bug])
        expected_mistakes = distinct([angles[bug]], [[rope], [in_degrees]]) if bug != "none" else [[in_degrees]]
        named = [wrong for _, wrong in constants["MISTAKES"]]
        assert len(named) == len({gap(wrong[0], angles[bug]) for wrong in named})
        for wrong in named:
            assert gap(wrong[0], angles[bug]) > 0.05
        assert len(named) <= len(expected_mistakes)
        for wrong in named:
            assert any(gap(wrong[0], other[0]) < 1e-9 for other in expected_mistakes)
