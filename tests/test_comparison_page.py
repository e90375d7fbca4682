"""Chapter 6's orderings, recomputed from the committed study and read back from the built page.

The chapter states which position kind lies above which (``posenc_ref.lab.comparisons``). This test decides
the same comparisons again from ``book/data/length-generalization/results.csv`` with its own code (the csv
module, numpy, Student's t distribution in closed form, Holm's method written out) and checks that the built
page (``make book`` writes ``_build/html/book/06_comparison.html``) states exactly those orderings, each with
its count of seeds on the stated side, compares only kinds that fitted on every seed, gives each kind's count
of fitted seeds, and counts its comparisons, findings and pairs left out right; and the same for the second pass
of the recipe study (``book/data/recipe-study-margin/*/seed-*/results.csv``), on the seeds every cell holds. The
page is read as a reader gets it: its HTML, tags stripped.
"""

import csv
import html
import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "book" / "data" / "length-generalization" / "results.csv"
RECIPE_STUDY = ROOT / "book" / "data" / "recipe-study-margin"
PAGE = ROOT / "_build" / "html" / "book" / "06_comparison.html"
TASK_NAMES = {"copy": "copy", "bites": "who-bites-whom", "recall": "associative recall"}
RECIPE_TASK_NAMES = {"copy": "copy", "bites": "who-bites-whom", "lookup": "lookup"}
RANGES = {"n = 9..16": (9, 16), "n = 17..24": (17, 24)}
INSIDE = (3, 8)
ALPHA = MARGIN = FLOOR = 0.05
TARGET = 0.99


def t_two_sided_p(t, df):
    """P(|T| >= |t|) for Student's t with df degrees of freedom, in closed form (Abramowitz and Stegun 26.7.3),
    theta = atan(t / sqrt(df)):
    odd df:  P(|T| < t) = (2 / pi) (theta + sin theta (cos theta + 2/3 cos^3 theta + ... )), the series running to
             cos^(df - 2) with coefficients (2 * 4 * ... (2k)) / (3 * 5 * ... (2k + 1));
    even df: P(|T| < t) = sin theta (1 + 1/2 cos^2 theta + (1 * 3) / (2 * 4) cos^4 theta + ... ), the series
             running to cos^(df - 2) with coefficients (1 * 3 * ... (2k - 1)) / (2 * 4 * ... (2k))."""
    theta = math.atan(abs(t) / math.sqrt(df))
    series = 0.0
    if df % 2 == 1:
        term = math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            series += term
            term *= math.cos(theta) ** 2 * (2 * k) / (2 * k + 1)
        inside = 2 / math.pi * (theta + math.sin(theta) * series)
    else:
        term = 1.0
        for k in range(1, df // 2 + 1):
            series += term
            term *= math.cos(theta) ** 2 * (2 * k - 1) / (2 * k)
        inside = math.sin(theta) * series
    return max(0.0, 1 - inside)


def test_the_closed_form_gives_the_tabulated_critical_values():
    # Two-sided 5% and 1% points of Student's t with 9 degrees of freedom, and the Cauchy case (df = 1).
    assert t_two_sided_p(2.262157, 9) == pytest.approx(0.05, abs=1e-6)
    assert t_two_sided_p(3.249836, 9) == pytest.approx(0.01, abs=1e-6)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5)
    # ... and with 6 degrees of freedom (seven seeds), and the case df = 2, P(|T| < t) = t / sqrt(t^2 + 2).
    assert t_two_sided_p(2.446912, 6) == pytest.approx(0.05, abs=1e-6)
    assert t_two_sided_p(3.707428, 6) == pytest.approx(0.01, abs=1e-6)
    assert t_two_sided_p(4.302653, 2) == pytest.approx(0.05, abs=1e-6)
    assert t_two_sided_p(1.5, 2) == pytest.approx(1 - 1.5 / math.sqrt(1.5**2 + 2))


def read_study(paths=(STUDY,)):
    """{(task, kind): {seed: {size: exact match}}} of the decoders in the results files ``paths``."""
    runs = {}
    for path in paths:
        with open(path, newline="") as file:
            for row in csv.DictReader(file):
                assert row["model"] == "decoder" and row["randomized"] == "False"
                scores = runs.setdefault((row["task"], row["position"]), {}).setdefault(int(row["seed"]), {})
                assert int(row["length"]) not in scores, (path, row["task"], row["length"])
                scores[int(row["length"])] = float(row["accuracy"])
    return runs


def read_recipe_study():
    """The second pass of the recipe study, on the seeds that every (task, kind) holds: the page compares those."""
    runs = read_study(sorted(RECIPE_STUDY.glob("*/seed-*/results.csv")))
    common = set.intersection(*(set(by_seed) for by_seed in runs.values()))
    return {key: {seed: by_seed[seed] for seed in sorted(common)} for key, by_seed in runs.items()}


def expected_findings(runs):
    """The orderings, decided independently of posenc_ref among the kinds fitted on every seed, as
    {(task, range, higher, lower): seeds on the higher side}; the count of comparisons (the family: pairs of
    fitted kinds); the count of pairs left out."""
    tests, left_out = {}, 0
    tasks = list(dict.fromkeys(task for task, _ in runs))
    for task, (range_name, (low, high)) in itertools.product(tasks, RANGES.items()):
        every_kind = [kind for run_task, kind in runs if run_task == task]
        kinds = [kind for kind in every_kind if (task, kind) not in unfitted(runs)]
        left_out += math.comb(len(every_kind), 2) - math.comb(len(kinds), 2)
        seeds = sorted(runs[task, kinds[0]])
        scores = {kind: np.array([np.mean([v for n, v in runs[task, kind][seed].items() if low <= n <= high])
                                  for seed in seeds]) for kind in kinds}
        for one, other in itertools.combinations(kinds, 2):
            higher, lower = (one, other) if scores[one].mean() >= scores[other].mean() else (other, one)
            differences = scores[higher] - scores[lower]
            spread = differences.std(ddof=1)
            if spread <= 1e-12 * max(1.0, abs(differences.mean())):
                p = 0.0 if differences.mean() != 0 else 1.0
            else:
                p = t_two_sided_p(differences.mean() / (spread / math.sqrt(len(seeds))), len(seeds) - 1)
            tests[task, range_name, higher, lower] = (p, differences.mean(), scores[higher].mean(),
                                                      scores[lower].mean(), int((differences > 0).sum()))
    # Holm: the k-th smallest p-value (from 0) is multiplied by (m - k); adjusted values never decrease.
    ordered = sorted(tests, key=lambda key: tests[key][0])
    adjusted, running = {}, 0.0
    for index, key in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - index) * tests[key][0]))
        adjusted[key] = running
    findings = {key: on_side for key, (p, difference, high_mean, low_mean, on_side) in tests.items()
                if adjusted[key] < ALPHA and difference >= MARGIN and not (high_mean < FLOOR and low_mean < FLOOR)}
    return findings, len(tests), left_out


def unfitted(runs):
    return {(task, kind) for (task, kind), by_seed in runs.items()
            if any(min(curve[n] for n in range(INSIDE[0], INSIDE[1] + 1)) < TARGET for curve in by_seed.values())}


def page_text(section_id, next_id):
    source = PAGE.read_text()
    start = source.index(f'id="{section_id}"')
    end = source.index(f'id="{next_id}"', start)
    cells = re.sub(r"</?(?:td|th|tr|li|p)\b[^>]*>", " ", source[start:end])  # cell and item boundaries: a space
    text = re.sub(r"<[^>]+>", "", cells)  # inline tags (code, strong, em, span): nothing
    return re.sub(r"\s+", " ", html.unescape(text))


def stated_findings(text, task_names=TASK_NAMES, seed_count=10, after=r"The page makes"):
    """The orderings the page states, {(task, range, higher, lower): seeds on the stated side}; ``after``: the
    words that follow the list."""
    stated = {}
    names = "|".join(re.escape(name) for name in task_names.values())
    items = rf"({names})\. (n = 9\.\.16: .*?) (n = 17\.\.24: .*?)(?= (?:{names})\. n = 9| {after}|$)"
    for match in re.finditer(items, text):
        task = {name: key for key, name in task_names.items()}[match.group(1)]
        for part in match.group(2, 3):
            range_name, sentence = part.split(": ", 1)
            for higher, lowers in re.findall(r"(\w+) lies above ([^;.]+)", sentence):
                for lower in re.split(r", | and ", lowers):
                    kind, on_side, seeds = re.fullmatch(r"(\w+) \((\d+) of (\d+) seeds\)", lower.strip()).groups()
                    assert seeds == str(seed_count)
                    stated[task, range_name, higher, kind] = int(on_side)
    return stated


needs_page = pytest.mark.skipif(not PAGE.exists(), reason="the book is not built (make book writes _build/html)")


@needs_page
def test_the_page_states_exactly_the_orderings_the_committed_data_support():
    runs = read_study()
    expected, comparisons, left_out = expected_findings(runs)
    text = page_text("what-ten-seeds-separate", "does-it-hold-on-this-machine")
    assert stated_findings(text) == expected
    assert f"makes {comparisons} comparisons on the study and states {len(expected)} orderings" in text
    assert f"{left_out} of the {comparisons + left_out} pairs are not compared" in text


@needs_page
def test_the_recipe_study_section_states_exactly_the_orderings_its_data_support():
    runs = read_recipe_study()
    seed_count = len(next(iter(runs.values())))
    expected, comparisons, left_out = expected_findings(runs)
    text = page_text("what-the-recipes-separate", "why-associative-recall-resists-a-key-that-is-also-a-value")
    after = r"\d+ of the \d+ cells fitted on every one"
    assert stated_findings(text, RECIPE_TASK_NAMES, seed_count, after) == expected
    fitted_cells = len(runs) - len(unfitted(runs))
    assert f"{fitted_cells} of the {len(runs)} cells fitted on every one of these seeds" in text
    assert f"makes {comparisons} comparisons and states {len(expected)} orderings" in text
    assert f"in {len(expected)} of them both kinds fitted on every seed compared" in text
    assert f"{left_out} of the {comparisons + left_out} pairs are not compared" in text
    assert f"on the {seed_count} seeds that every cell holds" in text


def test_the_recipe_study_fits_at_least_18_of_its_21_cells_on_every_seed():
    # The bar chapter 6 sets itself for comparing models that learned their task, on the seeds the page compares.
    runs = read_recipe_study()
    assert len(runs) == 21 and len(next(iter(runs.values()))) >= 7
    assert len(runs) - len(unfitted(runs)) >= 18, sorted(unfitted(runs))


@needs_page
def test_the_page_gives_every_kinds_fitted_seeds_in_the_study_score_table():
    runs = read_study()
    text = page_text("the-committed-study-three-tasks-every-kind-ten-seeds", "what-ten-seeds-separate")
    for (task, kind), by_seed in runs.items():
        fitted = sum(min(curve[n] for n in range(INSIDE[0], INSIDE[1] + 1)) >= TARGET for curve in by_seed.values())
        assert f"{TASK_NAMES[task]} {kind} {fitted}/10 fitted " in text, (task, kind)


def read_runs(path):
    """{(task, kind, seed): ({size: exact match}, training steps)} of a results.csv."""
    runs = {}
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            key = (row["task"], row["position"], int(row["seed"]))
            scores, steps = runs.get(key, ({}, int(row["train_steps"])))
            scores[int(row["length"])] = float(row["accuracy"])
            runs[key] = (scores, steps)
    return runs


@needs_page
def test_the_page_reports_the_rerun_under_another_instruction_set_as_the_data_say():
    study, rerun = read_runs(STUDY), read_runs(ROOT / "book" / "data" / "live-avx2" / "results.csv")
    assert set(rerun) <= set(study)
    identical = sum(rerun[key] == study[key] for key in rerun)  # every size's exact match, and the steps
    moved = sum(rerun[key][1] != study[key][1] for key in rerun)
    largest = max(abs(rerun[key][0][size] - study[key][0][size]) for key in rerun for size in rerun[key][0])
    text = page_text("across-instruction-sets", "one-remedy-randomized-positions")
    assert f"{identical} of the {len(rerun)} runs are identical to the study" in text, text[-1500:]
    assert f"the largest difference of exact match at any size is {largest:.3f}" in text
    assert f"{moved} runs stopped after another number of steps" in text
