r"""Reading a length-generalization study: which runs fitted, their scores over ranges of sizes, which orderings
of position kinds the seeds support, and where two runs of the study (committed, live) agree.

A **run** is one model of one kind trained on one task with one seed (:class:`RunScores`). It **fitted** when
its exact match on the scoring examples reaches the target at every training size, ``min_train_length .. L``;
a run that did not fit is still read, and marked.

Its score over a **range** of sizes :math:`a..b` is the mean of its scores at those sizes. The ranges of a study
with training sizes up to :math:`L` are :data:`RANGE_NAMES`: inside (``min_train_length .. L``), beyond
(:math:`L + 1 .. 2L`) and far (:math:`2L + 1 .. 3L`).

Two kinds are **compared** beyond the training range only when both fitted on every seed compared
(:func:`may_be_ordered`): a model that has not learned its task inside the training range says nothing about
longer inputs. A pair with a kind that did not fit is not tested and not counted in the family; it is kept,
marked "not compared" (:data:`NOT_COMPARED`).

A **finding** orders two compared kinds on one task and range (:func:`findings`): a paired test over the seeds
(each seed trains both kinds on the same examples), Holm-corrected over every comparison of the family, so that
the chance of one or more false orderings among them all is at most ``alpha`` when the test's assumptions hold
(Student's t: the per-seed differences are independent and their mean close to normal; the sign-flip test: each
difference is as likely to take either sign under no difference); and an effect-size floor: no ordering when
the mean difference is below ``margin``, nor between two kinds whose means both lie below ``floor``
(:func:`posenc_ref.lab.evidence.paired_comparisons`).

A finding of one study **holds** in another run of the same grid when that run's paired mean difference over
its own seeds points the same way and reaches the margin (:func:`agreement`); the live run of the book is too
small (three seeds) to make findings of its own after correction, but large enough to contradict one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posenc_ref.lab.evidence import Comparison, paired_comparisons
from posenc_ref.lab.results import kind_label

RANGE_NAMES: tuple[str, ...] = ("inside", "beyond", "far")
"""The ranges of sizes a run is read on: the training sizes, up to 2L, up to 3L."""

MEASURES: tuple[str, ...] = ("exact", "tokens")
"""Exact match (every answer token right) and per-token accuracy (the share of right answer tokens)."""


@dataclass(frozen=True)
class RunScores:
    """One run's scores by size and its training record.

    Attributes:
        task, model, kind, seed: what was trained (``kind`` with ``+random`` for randomized positions).
        exact, tokens: ``{size: exact match}`` and ``{size: per-token accuracy}`` on the scoring examples.
        training_sizes: the sizes trained on (those of rows ``in_training_range``), ascending.
        train_steps, train_seconds: the optimiser steps taken and their wall time.
        reached_target: whether the stopping rule was met (held-out checks while training).
    """

    task: str
    model: str
    kind: str
    seed: int
    exact: Mapping[int, float]
    tokens: Mapping[int, float]
    training_sizes: tuple[int, ...]
    train_steps: int
    train_seconds: float
    reached_target: bool

    def fitted(self, target: float) -> bool:
        """Exact match of at least ``target`` at every training size."""
        return self.lowest_inside() >= target

    def lowest_inside(self) -> float:
        """The lowest exact match over the training sizes."""
        return min(self.exact[size] for size in self.training_sizes)

    def mean(self, sizes: tuple[int, int], measure: str = "exact") -> float:
        """The mean score over sizes ``low..high`` (both included) of ``measure`` (:data:`MEASURES`)."""
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {list(MEASURES)}, got {measure!r}")
        scores = self.exact if measure == "exact" else self.tokens
        low, high = sizes
        values = [value for size, value in scores.items() if low <= size <= high]
        if not values:
            raise ValueError(f"run {self.task}/{self.model}/{self.kind}/seed {self.seed} has no score at sizes "
                             f"{low}..{high}")
        return statistics.fmean(values)


Key = tuple[str, str, str]
"""(task, model, kind)."""


def group_runs(rows: Iterable[Mapping[str, Any]]) -> dict[Key, dict[int, RunScores]]:
    """The rows of a ``results.csv`` (:func:`posenc_ref.lab.results.read_results`) as runs:
    ``{(task, model, kind): {seed: RunScores}}``, in the order the rows first name them.

    Raises:
        ValueError: two rows give one run's score at one size, or one run's rows disagree on its training.
    """
    collected: dict[Key, dict[int, dict[str, Any]]] = {}
    for row in rows:
        key = (row["task"], row["model"], kind_label(row))
        run = collected.setdefault(key, {}).setdefault(row["seed"], {
            "exact": {}, "tokens": {}, "inside": [], "record": (row["train_steps"], row["reached_target"])})
        if row["length"] in run["exact"]:
            raise ValueError(f"two rows score {key} seed {row['seed']} at size {row['length']}")
        if run["record"] != (row["train_steps"], row["reached_target"]):
            raise ValueError(f"the rows of {key} seed {row['seed']} disagree on its training")
        run["exact"][row["length"]] = row["accuracy"]
        run["tokens"][row["length"]] = row["token_accuracy"]
        run["seconds"] = row["train_seconds"]
        if row["in_training_range"]:
            run["inside"].append(row["length"])
    return {key: {seed: RunScores(*key, seed, run["exact"], run["tokens"], tuple(sorted(run["inside"])),
                                  run["record"][0], run["seconds"], run["record"][1])
                  for seed, run in by_seed.items()}
            for key, by_seed in collected.items()}


def size_ranges(training_sizes: Sequence[int]) -> dict[str, tuple[int, int]]:
    """``{range name: (low, high)}`` for a study trained on ``training_sizes`` (:data:`RANGE_NAMES`)."""
    low, train_length = min(training_sizes), max(training_sizes)
    return {"inside": (low, train_length), "beyond": (train_length + 1, 2 * train_length),
            "far": (2 * train_length + 1, 3 * train_length)}


def scores_by_kind(runs: Mapping[Key, Mapping[int, RunScores]], task: str, model: str, sizes: tuple[int, int],
                   measure: str = "exact", *, kinds: Sequence[str] | None = None) -> dict[str, list[float]]:
    """``{kind: [score of seed s over sizes, for s in the seeds in ascending order]}`` for one task and model.

    Raises:
        ValueError: the kinds were not run on the same seeds (the scores could not be paired).
    """
    chosen = {kind: by_seed for (run_task, run_model, kind), by_seed in runs.items()
              if (run_task, run_model) == (task, model) and (kinds is None or kind in kinds)}
    if not chosen:
        raise ValueError(f"no runs of task={task!r}, model={model!r}")
    seeds = {kind: sorted(by_seed) for kind, by_seed in chosen.items()}
    if len({tuple(value) for value in seeds.values()}) != 1:
        raise ValueError(f"the kinds of {task}/{model} were run on different seeds: {seeds}")
    return {kind: [by_seed[seed].mean(sizes, measure) for seed in sorted(by_seed)]
            for kind, by_seed in chosen.items()}


NOT_COMPARED = "not compared"
"""How the ``reason`` of a pair that :func:`findings` did not test begins: a kind did not fit on every seed."""


def seeds_fitted(by_seed: Mapping[int, RunScores], target: float) -> int:
    """How many of one kind's runs fitted (exact match of at least ``target`` at every training size)."""
    return sum(run.fitted(target) for run in by_seed.values())


def may_be_ordered(first: Mapping[int, RunScores], second: Mapping[int, RunScores], target: float) -> bool:
    """Whether two kinds of one task may be ordered beyond the training range: both fitted on every seed
    compared, i.e. for every seed :math:`s` that both ran, each run's exact match reaches ``target`` at every
    training size (:meth:`RunScores.fitted`, the rule of :func:`posenc_ref.lab.results.fitted`).

    A kind that did not learn its task inside the training range says nothing about longer inputs, so no
    ordering of it is stated, however its scores beyond compare.

    Raises:
        ValueError: the two kinds share no seed.
    """
    seeds = sorted(set(first) & set(second))
    if not seeds:
        raise ValueError("the two kinds share no seed")
    return all(first[seed].fitted(target) and second[seed].fitted(target) for seed in seeds)


def table_name(task: str, model: str, range_name: str) -> str:
    """The name of one table of comparisons: ``"recall/decoder/beyond"``."""
    return f"{task}/{model}/{range_name}"


def findings(runs: Mapping[Key, Mapping[int, RunScores]], ranges: Mapping[str, tuple[int, int]], *,
             measure: str = "exact", alpha: float = 0.05, margin: float = 0.05,
             floor: float = 0.05, test: str = "t", target: float | None = None) -> list[Comparison]:
    """Every pair of kinds, on every task and model of ``runs`` and every range of ``ranges``, decided as one
    family (see the module docstring) with the paired ``test`` (:data:`~posenc_ref.lab.evidence.PAIRED_TESTS`);
    each :class:`~posenc_ref.evidence.Comparison`'s ``table`` is :func:`table_name`, and it counts the seeds on
    its side.

    With a ``target``, only the pairs that :func:`may_be_ordered` allows are tested and make up the family; the
    others come back untested, ``finding`` false, ``p_value`` and ``adjusted_p`` NaN and a ``reason`` beginning
    with :data:`NOT_COMPARED` that names the kind(s) that did not fit and on how many seeds they did."""
    pairs = dict.fromkeys((task, model) for task, model, _ in runs)
    scores = {(task, model, name): scores_by_kind(runs, task, model, sizes, measure)
              for task, model in pairs for name, sizes in ranges.items()}
    untested: list[Comparison] = []
    tables: dict[str, dict[str, list[float]]] = {}
    for (task, model, name), by_kind in scores.items():
        kinds = list(by_kind)
        allowed = set(kinds)
        if target is not None:
            # Fitting on every seed is a property of each kind, so the pairs that may be ordered are exactly the
            # pairs of kinds that may be ordered with themselves.
            allowed = {kind for kind in kinds if may_be_ordered(runs[task, model, kind], runs[task, model, kind],
                                                                target)}
            for index, one in enumerate(kinds):
                for other in kinds[index + 1:]:
                    if one in allowed and other in allowed:
                        continue
                    untested.append(_not_compared(runs, (task, model, name), by_kind, one, other, target))
        tables[table_name(task, model, name)] = {kind: values for kind, values in by_kind.items() if kind in allowed}
    tested = paired_comparisons({table: by_kind for table, by_kind in tables.items() if len(by_kind) > 1},
                                alpha=alpha, margin=margin, floor=floor, test=test)
    return tested + untested


def _not_compared(runs: Mapping[Key, Mapping[int, RunScores]], where: tuple[str, str, str],
                  by_kind: Mapping[str, Sequence[float]], one: str, other: str, target: float) -> Comparison:
    task, model, name = where
    means = {kind: statistics.fmean(by_kind[kind]) for kind in (one, other)}
    higher, lower = (other, one) if means[other] > means[one] else (one, other)
    differences = [high - low for high, low in zip(by_kind[higher], by_kind[lower], strict=True)]
    unfitted = [f"{kind} fitted {seeds_fitted(runs[task, model, kind], target)} of {len(runs[task, model, kind])}"
                for kind in (one, other) if seeds_fitted(runs[task, model, kind], target) < len(runs[task, model, kind])]
    return Comparison(table=table_name(task, model, name), higher=higher, lower=lower,
                      mean_difference=statistics.fmean(differences), p_value=math.nan, adjusted_p=math.nan,
                      finding=False, reason=f"{NOT_COMPARED}: {', '.join(unfitted)}",
                      seeds_on_side=sum(difference > 0 for difference in differences), seeds=len(differences))


def threshold_sensitivity(runs: Mapping[Key, Mapping[int, RunScores]], ranges: Mapping[str, tuple[int, int]],
                          targets: Sequence[float], **options: Any) -> dict[float, dict[str, int]]:
    """How the orderings depend on the fit threshold: for each ``target``, :func:`findings` decided again with
    it (``options`` as :func:`findings`), ``{target: {"compared": pairs tested, "orderings": findings,
    "not compared": pairs left out}}``. Each threshold is a family of its own."""
    result = {}
    for target in targets:
        decided = findings(runs, ranges, target=target, **options)
        compared = compared_only(decided)
        result[target] = {"compared": len(compared), "orderings": sum(c.finding for c in compared),
                          "not compared": len(decided) - len(compared)}
    return result


def compared_only(comparisons: Iterable[Comparison]) -> list[Comparison]:
    """The comparisons of a family: those :func:`findings` tested (not :data:`NOT_COMPARED`)."""
    return [c for c in comparisons if not c.reason.startswith(NOT_COMPARED)]


def order_sentence(comparisons: Sequence[Comparison], means: Mapping[str, float], *,
                   label: Callable[[str], str] = str, signs: bool = False) -> str:
    """The orderings of one table in words, kinds in the order of their means: ``"A lies above B and C; B
    above C. The other 18 pairs are not ordered: 12 by the test, 4 closer than the margin, 2 both near 0, 5 not
    compared (a kind did not fit on every seed)."``; with ``signs``, each ordered kind is followed by the seeds on
    the stated side, ``"A lies above B (10 of 10 seeds)"``."""
    order = sorted(means, key=lambda kind: -means[kind])
    above = {kind: [c for c in comparisons if c.finding and c.higher == kind] for kind in order}
    parts = []
    for kind in order:
        lower = sorted(above[kind], key=lambda c: order.index(c.lower))
        if lower:
            names = [label(c.lower) + (f" ({c.seeds_on_side} of {c.seeds} seeds)" if signs else "") for c in lower]
            joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            parts.append(f"{label(kind)} lies above {joined}")
    not_ordered = [c for c in comparisons if not c.finding]
    text = ("; ".join(parts) + ".") if parts else "No pair is ordered."
    if not_ordered and parts:
        reasons = {"by the test": sum(c.reason.startswith("adjusted p") for c in not_ordered),
                   "closer than the margin": sum(c.reason.startswith("difference") for c in not_ordered),
                   "both near 0": sum(c.reason.startswith("both below") for c in not_ordered),
                   "not compared (a kind did not fit on every seed)":
                       sum(c.reason.startswith(NOT_COMPARED) for c in not_ordered)}
        counted = ", ".join(f"{count} {why}" for why, count in reasons.items() if count)
        text += f" The other {len(not_ordered)} pairs are not ordered: {counted}."
    elif not_ordered:
        skipped = sum(c.reason.startswith(NOT_COMPARED) for c in not_ordered)
        text = text[:-1] + f" ({len(not_ordered)} pairs" + (
            f", {skipped} of them not compared: a kind did not fit on every seed)." if skipped else ").")
    return text[0].upper() + text[1:] if text[0].islower() else text


@dataclass(frozen=True)
class Agreement:
    """A finding of one study read in another run of the same grid: the other run's paired mean difference
    (``higher`` minus ``lower``) over its seeds, and whether the finding ``holds`` there."""

    finding: Comparison
    other_difference: float
    other_seeds: int
    holds: bool


def agreement(study_findings: Iterable[Comparison], other_runs: Mapping[Key, Mapping[int, RunScores]],
              ranges: Mapping[str, tuple[int, int]], *, measure: str = "exact",
              margin: float = 0.05) -> list[Agreement]:
    """For each finding of the study on a task and model that ``other_runs`` also ran: does it hold there
    (the other run's mean difference over its seeds points the same way and reaches ``margin``)?"""
    results = []
    for finding in study_findings:
        if not finding.finding:
            continue
        task, model, range_name = finding.table.split("/")
        if (task, model, finding.higher) not in other_runs or (task, model, finding.lower) not in other_runs:
            continue
        scores = scores_by_kind(other_runs, task, model, ranges[range_name], measure,
                                kinds=(finding.higher, finding.lower))
        differences = [high - low for high, low in zip(scores[finding.higher], scores[finding.lower], strict=True)]
        difference = statistics.fmean(differences)
        results.append(Agreement(finding, difference, len(differences), difference >= margin))
    return results


@dataclass(frozen=True)
class Reproduction:
    """How a run computed again compares with the same run of a study: the largest absolute difference of
    exact match over every size, and its training steps in each."""

    key: Key
    seed: int
    largest_difference: float
    steps: tuple[int, int]

    @property
    def identical(self) -> bool:
        return self.largest_difference == 0.0 and self.steps[0] == self.steps[1]


def reproductions(study_runs: Mapping[Key, Mapping[int, RunScores]],
                  other_runs: Mapping[Key, Mapping[int, RunScores]]) -> list[Reproduction]:
    """Every run of ``other_runs`` that the study also holds (same task, model, kind and seed), compared."""
    results = []
    for key, by_seed in other_runs.items():
        for seed, run in by_seed.items():
            original = study_runs.get(key, {}).get(seed)
            if original is None:
                continue
            sizes = sorted(set(run.exact) & set(original.exact))
            largest = max(abs(run.exact[size] - original.exact[size]) for size in sizes)
            results.append(Reproduction(key, seed, largest, (original.train_steps, run.train_steps)))
    return results


@dataclass(frozen=True)
class LiteratureClaim:
    """An ordering a published study reports: ``higher`` extrapolates better than ``lower``."""

    source: str
    higher: str
    lower: str


def literature_verdicts(claims: Sequence[LiteratureClaim], comparisons: Sequence[Comparison],
                        ranges: Sequence[str] = ("beyond", "far")) -> dict[LiteratureClaim, dict[str, list[str]]]:
    """For each claim, the tables (task/model/range, ranges among ``ranges``) where the study agrees (a finding in
    the claim's direction), disagrees (a finding in the other), does not decide, or did not compare the pair
    because a kind did not fit on every seed (:data:`NOT_COMPARED`):
    ``{claim: {"agrees": [...], "disagrees": [...], "undecided": [...], "not compared": [...]}}``."""
    verdicts = {}
    for claim in claims:
        verdict: dict[str, list[str]] = {"agrees": [], "disagrees": [], "undecided": [], NOT_COMPARED: []}
        for comparison in comparisons:
            if {comparison.higher, comparison.lower} != {claim.higher, claim.lower}:
                continue
            if comparison.table.split("/")[2] not in ranges:
                continue
            if comparison.reason.startswith(NOT_COMPARED):
                verdict[NOT_COMPARED].append(comparison.table)
            elif not comparison.finding:
                verdict["undecided"].append(comparison.table)
            elif comparison.higher == claim.higher:
                verdict["agrees"].append(comparison.table)
            else:
                verdict["disagrees"].append(comparison.table)
        verdicts[claim] = verdict
    return verdicts
