r"""Rankings that the seeds support: intervals over runs, and sentences generated from them.

One training run is one draw. With scores :math:`x_1, \dots, x_n` of one position kind over :math:`n` seeds,
its **interval** is either the range :math:`[\min_s x_s, \max_s x_s]` (``method="range"``, the default: with
3 to 5 seeds it is what a reader can check by eye) or a percentile bootstrap interval of the mean
(``method="bootstrap"``: resample the seeds with replacement ``resamples`` times, take the ``(1 - level) / 2``
and ``(1 + level) / 2`` quantiles of the resampled means; the resampling generator is seeded, so the
interval is a function of the scores).

Kind A is **above** kind B only where A's interval lies entirely above B's:
:math:`\text{low}_A > \text{high}_B`. Otherwise the two are **not separated**, whatever their means say.
"Above" is a strict partial order: A above B and B above C imply A above C, but two kinds can both be
separated from a third and not from each other.

:func:`ranking_sentence` turns a set of kinds' scores into the sentence the book prints, so that no ranking is
written by hand: it names, kind by kind in the order of the means, the kinds it lies above and those it is
not separated from.

:func:`paired_comparisons` decides pairs of kinds run on the same seeds by a paired test instead, corrected for
every comparison a page makes (Holm), with an effect-size floor; see the comment above it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posenc_ref._checks import check_choice, check_positive_int

INTERVAL_METHODS: tuple[str, ...] = ("range", "bootstrap")


@dataclass(frozen=True)
class Interval:
    """The scores of one kind over its runs: their mean and an interval ``[low, high]``."""

    mean: float
    low: float
    high: float
    runs: int

    def is_above(self, other: Interval) -> bool:
        """True only where this interval lies entirely above ``other``'s: ``low > other.high``."""
        return self.low > other.high

    def text(self, digits: int = 2) -> str:
        """``"0.91 (0.85–0.97)"``: the mean, then the interval."""
        return f"{self.mean:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f})"


def _check_scores(name: str, scores: Sequence[float]) -> list[float]:
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence) or not scores:
        raise ValueError(f"{name} must be a non-empty sequence of numbers (one per run), got {scores!r}")
    values = []
    for score in scores:
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise ValueError(f"{name} must hold finite numbers, got {score!r} in {list(scores)!r}")
        values.append(float(score))
    return values


def interval(scores: Sequence[float], *, method: str = "range", level: float = 0.95, resamples: int = 2000,
             seed: int = 0) -> Interval:
    """The :class:`Interval` of one kind's scores over its runs (see the module docstring).

    Args:
        scores: one score per run (seed), at least one.
        method: ``"range"`` (min to max) or ``"bootstrap"`` (percentile interval of the mean).
        level: coverage of the bootstrap interval, in (0, 1).
        resamples: bootstrap resamples, >= 1.
        seed: seed of the resampling generator.

    Raises:
        ValueError: empty or non-finite scores, an unknown method, a level outside (0, 1).
    """
    values = _check_scores("scores", scores)
    check_choice("method", method, INTERVAL_METHODS)
    mean = statistics.fmean(values)
    if method == "range":
        return Interval(mean=mean, low=min(values), high=max(values), runs=len(values))
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    check_positive_int("resamples", resamples)
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(resamples))
    lower_index = math.floor((1.0 - level) / 2.0 * (resamples - 1))
    upper_index = math.ceil((1.0 + level) / 2.0 * (resamples - 1))
    return Interval(mean=mean, low=means[lower_index], high=means[upper_index], runs=len(values))


def intervals(scores_by_kind: Mapping[str, Sequence[float]], **options) -> dict[str, Interval]:
    """``{kind: interval(scores)}`` for every kind, in the order of the mapping; ``options`` as :func:`interval`.

    Raises:
        ValueError: an empty mapping; what :func:`interval` raises (the message names the kind).
    """
    if not scores_by_kind:
        raise ValueError("scores_by_kind must name at least one kind")
    result = {}
    for kind, scores in scores_by_kind.items():
        try:
            result[kind] = interval(scores, **options)
        except ValueError as error:
            raise ValueError(f"kind {kind!r}: {error}") from None
    return result


@dataclass(frozen=True)
class Ranking:
    """Every pair of kinds decided: ``above[a]`` the kinds that ``a`` lies above, ``tied[a]`` those it is
    not separated from; ``order`` the kinds by decreasing mean (ties by name)."""

    order: tuple[str, ...]
    intervals: dict[str, Interval]
    above: dict[str, tuple[str, ...]]
    tied: dict[str, tuple[str, ...]]

    def separated(self, first: str, second: str) -> bool:
        """True where one of the two kinds lies above the other."""
        return second in self.above[first] or first in self.above[second]


def rank(scores_by_kind: Mapping[str, Sequence[float]], **options) -> Ranking:
    """Decide every pair of kinds by their intervals (``options`` as :func:`interval`)."""
    spans = intervals(scores_by_kind, **options)
    order = tuple(sorted(spans, key=lambda kind: (-spans[kind].mean, kind)))
    above = {kind: tuple(other for other in order if spans[kind].is_above(spans[other])) for kind in order}
    tied = {kind: tuple(other for other in order if other != kind
                        and not spans[kind].is_above(spans[other]) and not spans[other].is_above(spans[kind]))
            for kind in order}
    return Ranking(order=order, intervals=spans, above=above, tied=tied)


def _join(names: Sequence[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def ranking_sentence(scores_by_kind: Mapping[str, Sequence[float]], *, label: Callable[[str], str] = str,
                     digits: int = 2, **options) -> str:
    """The ranking the runs support, as one paragraph generated from the numbers.

    Kinds come in the order of their means, each with its mean and interval; for each, the sentence names the
    kinds it lies above (its interval entirely above theirs) and the kinds it is not separated from. When no
    pair is separated it says so in one sentence. ``label`` turns a kind's name into the text printed;
    ``options`` as :func:`interval`.

    >>> ranking_sentence({"alibi": [0.9, 0.95], "t5": [0.2, 0.4], "shaw": [0.3, 0.6]})
    'alibi 0.93 (0.90–0.95) lies above shaw and t5. shaw 0.45 (0.30–0.60) and t5 0.30 (0.20–0.40) are not separated.'
    """
    ranking = rank(scores_by_kind, **options)
    spans = ranking.intervals

    def named(kind: str) -> str:
        return f"{label(kind)} {spans[kind].text(digits)}"

    if len(ranking.order) == 1:
        (kind,) = ranking.order
        return f"Only {named(kind)} was measured."
    if not any(ranking.above.values()):
        return f"{_join([named(kind) for kind in ranking.order])} are not separated: every two intervals overlap."
    sentences = []
    described: set[str] = set()
    for kind in ranking.order:
        if kind in described:
            continue
        # Kinds not separated from this one and above exactly the same kinds share its sentence.
        group = [kind] + [other for other in ranking.tied[kind]
                          if other not in described and ranking.above[other] == ranking.above[kind]
                          and set(ranking.tied[other]) - {kind} == set(ranking.tied[kind]) - {other}]
        described.update(group)
        tied_elsewhere = [other for other in ranking.tied[kind] if other not in group]
        subject = _join([named(member) for member in group])
        parts = []
        if len(group) > 1:
            parts.append("are not separated")
        if ranking.above[kind]:
            parts.append(f"{'lie' if len(group) > 1 else 'lies'} above {_join([label(k) for k in ranking.above[kind]])}")
        if tied_elsewhere:
            verb = "are" if len(group) > 1 else "is"
            parts.append(f"{verb} not separated from {_join([label(k) for k in tied_elsewhere])}")
        if not parts:  # below other kinds and tied with none
            below = [other for other in ranking.order if kind in ranking.above[other]]
            parts.append(f"lies below {_join([label(k) for k in below])}")
        sentences.append(f"{subject} {_join(parts)}.")
    return " ".join(sentences)


# ------------------------------------------------------------------------------------ paired comparisons
#
# With every seed run on the same data by every kind, the scores of two kinds A and B pair up by seed, and the
# question "is A above B?" is a test on the per-seed differences d_s = a_s - b_s, s = 1..n:
#
#     t = mean(d) / (sd(d) / sqrt(n)),  two-sided p = P(|T_{n-1}| >= |t|) = I_{(n-1)/(n-1+t^2)}((n-1)/2, 1/2)
#
# (Student's paired t-test; I_x(a, b) the regularized incomplete beta function). A page that makes m such
# comparisons corrects them together (Holm's step-down method): sort the p-values p_(1) <= ... <= p_(m), multiply
# the k-th by (m - k + 1), and make the products non-decreasing; a comparison whose adjusted p-value is below
# alpha is a finding, and the chance of one or more false findings on the page is at most alpha. A finding
# also needs an effect: a mean difference of at least ``margin``, and not two kinds both scoring below
# ``floor`` (an ordering of "0.00 above 0.01" says nothing).


def _incomplete_beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz's method), for x < (a + 1) / (a + b + 2)."""
    tiny, epsilon = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < epsilon:
            break
    return fraction


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) = B(x; a, b) / B(a, b) for 0 <= x <= 1 and a, b > 0."""
    if not 0.0 <= x <= 1.0 or a <= 0.0 or b <= 0.0:
        raise ValueError(f"regularized_incomplete_beta needs 0 <= x <= 1 and a, b > 0, got x={x!r}, a={a!r}, b={b!r}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _incomplete_beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _incomplete_beta_fraction(1.0 - x, b, a) / b


def t_two_sided_p(t: float, degrees_of_freedom: int) -> float:
    """P(|T| >= |t|) for Student's t with ``degrees_of_freedom`` >= 1."""
    check_positive_int("degrees_of_freedom", degrees_of_freedom)
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(degrees_of_freedom / (degrees_of_freedom + t * t), degrees_of_freedom / 2, 0.5)


@dataclass(frozen=True)
class PairedTest:
    """A paired t-test of two kinds over the same seeds: their mean difference ``first - second`` and its p-value."""

    mean_difference: float
    p_value: float
    seeds: int


def paired_t_test(first: Sequence[float], second: Sequence[float]) -> PairedTest:
    """Student's paired t-test of ``first`` against ``second``, entry s of each from seed s.

    Differences that are all equal give p = 0 when they are not zero (no seed disagrees, and nothing varies) and
    p = 1 when they are.

    Raises:
        ValueError: non-finite scores, fewer than two seeds, or two sequences of different lengths.
    """
    a, b = _check_scores("first", first), _check_scores("second", second)
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a paired test needs two equally long sequences of at least two seeds, got {len(a)} "
                         f"and {len(b)} scores")
    differences = [x - y for x, y in zip(a, b, strict=True)]
    mean = statistics.fmean(differences)
    spread = statistics.stdev(differences)
    if spread <= 1e-12 * max(1.0, abs(mean)):  # equal differences, up to the rounding of the subtraction
        return PairedTest(mean_difference=mean, p_value=0.0 if mean != 0.0 else 1.0, seeds=len(a))
    t = mean / (spread / math.sqrt(len(a)))
    return PairedTest(mean_difference=mean, p_value=t_two_sided_p(t, len(a) - 1), seeds=len(a))


MAX_SIGN_FLIP_SEEDS = 20
"""The most seeds :func:`sign_flip_p` enumerates (2^20 sign assignments)."""


def sign_flip_p(differences: Sequence[float]) -> float:
    """The exact two-sided p-value of the paired sign-flip test of a mean difference of 0.

    Under no difference between the two kinds, each seed's difference is as likely to have either sign (the
    pairs are exchangeable): the p-value is the share of the :math:`2^n` assignments of signs to the ``n``
    differences whose mean lies at least as far from 0 as the observed mean. It rests on that symmetry only,
    not on normal tails, and with ``n`` seeds it is never below :math:`2 / 2^n` (0.00195 for ten seeds).

    Raises:
        ValueError: non-finite differences, none, or more than :data:`MAX_SIGN_FLIP_SEEDS`.
    """
    values = _check_scores("differences", differences)
    if not 1 <= len(values) <= MAX_SIGN_FLIP_SEEDS:
        raise ValueError(f"differences must hold 1 to {MAX_SIGN_FLIP_SEEDS} seeds, got {len(values)}")
    observed = abs(sum(values))
    tolerance = 1e-12 * max(1.0, sum(abs(value) for value in values))
    as_far = 0
    for signs in range(2 ** len(values)):
        total = sum(-value if signs >> index & 1 else value for index, value in enumerate(values))
        as_far += abs(total) >= observed - tolerance
    return as_far / 2 ** len(values)


def holm(p_values: Mapping[Any, float]) -> dict[Any, float]:
    """Holm's adjusted p-values of a family of comparisons, by the same keys (see the comment above)."""
    for key, p in p_values.items():
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must lie in [0, 1], got {p!r} for {key!r}")
    ordered = sorted(p_values, key=lambda key: p_values[key])
    count, running, adjusted = len(ordered), 0.0, {}
    for index, key in enumerate(ordered):
        running = max(running, min(1.0, (count - index) * p_values[key]))
        adjusted[key] = running
    return {key: adjusted[key] for key in p_values}


@dataclass(frozen=True)
class Comparison:
    """One pair of kinds of one table, decided: ``higher`` lies above ``lower`` when ``finding`` is true."""

    table: str
    higher: str
    lower: str
    mean_difference: float
    p_value: float
    adjusted_p: float
    finding: bool
    reason: str
    seeds_on_side: int = 0  # seeds whose score is higher for ``higher`` than for ``lower``
    seeds: int = 0


PAIRED_TESTS = ("t", "sign-flip")
"""The paired tests :func:`paired_comparisons` offers: Student's t (normal tails assumed) and the exact
sign-flip test (:func:`sign_flip_p`, symmetry assumed)."""


def paired_comparisons(tables: Mapping[str, Mapping[str, Sequence[float]]], *, alpha: float = 0.05,
                       margin: float = 0.05, floor: float = 0.05, test: str = "t") -> list[Comparison]:
    """Every pair of kinds in every table, tested paired over seeds and corrected together (Holm).

    Args:
        tables: table name -> kind -> one score per seed, the seeds in the same order for every kind.
        alpha: the chance of one or more false findings among all the comparisons, in (0, 1).
        margin: the smallest mean difference called a finding.
        floor: two kinds whose means both lie below it are never ordered.
        test: the paired test, one of :data:`PAIRED_TESTS`.

    Returns:
        One :class:`Comparison` per pair, ``higher`` the kind of the larger mean; ``reason`` says why a pair is
        not a finding ("adjusted p = 0.21 >= 0.05", "difference 0.02 < margin 0.05", "both below 0.05").
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    check_choice("test", test, PAIRED_TESTS)
    tests, means, sides = {}, {}, {}
    for table, scores_by_kind in tables.items():
        kinds = list(scores_by_kind)
        for kind in kinds:
            means[table, kind] = statistics.fmean(_check_scores(f"{table}/{kind}", scores_by_kind[kind]))
        for index, one in enumerate(kinds):
            for other in kinds[index + 1:]:
                higher, lower = (other, one) if means[table, other] > means[table, one] else (one, other)
                tested = paired_t_test(scores_by_kind[higher], scores_by_kind[lower])
                differences = [high - low for high, low in zip(scores_by_kind[higher], scores_by_kind[lower],
                                                                strict=True)]
                if test == "sign-flip":
                    tested = PairedTest(tested.mean_difference, sign_flip_p(differences), tested.seeds)
                tests[table, higher, lower] = tested
                sides[table, higher, lower] = sum(difference > 0 for difference in differences)
    adjusted = holm({key: paired.p_value for key, paired in tests.items()})
    comparisons = []
    for (table, higher, lower), paired in tests.items():
        if means[table, higher] < floor and means[table, lower] < floor:
            reason = f"both below {floor:g}"
        elif paired.mean_difference < margin:
            reason = f"difference {paired.mean_difference:.2f} < margin {margin:g}"
        elif adjusted[table, higher, lower] >= alpha:
            reason = f"adjusted p = {adjusted[table, higher, lower]:.2g} >= {alpha:g}"
        else:
            reason = ""
        comparisons.append(Comparison(table=table, higher=higher, lower=lower, mean_difference=paired.mean_difference,
                                      p_value=paired.p_value, adjusted_p=adjusted[table, higher, lower],
                                      finding=not reason, reason=reason,
                                      seeds_on_side=sides[table, higher, lower], seeds=paired.seeds))
    return comparisons
