"""The committed recipe study (book/data/recipe-study/): each kind trained under the recipe the search chose.

Data produced by ``python -m posenc_ref.lab recipe-study``, committed as it finishes (the whole study takes
hours on two cores). Every (kind, seed) folder committed is a finished sweep: its settings are the study's for
that kind under its recorded recipe, its grid complete at every size, its provenance whole; the recipes are
the search's choices; and the kinds hold the same seeds, or one fewer (every kind's seed before any kind's
next).
"""

import json

import pytest
from study_data import DATA, check_grid, check_provenance, saved

from posenc_ref.lab.recipe_search import RECIPES
from posenc_ref.lab.recipe_study import CHOICES_FILE, kind_settings

STUDY = DATA / "recipe-study"
SEARCH_CHOICES = DATA / "recipe-search" / "chosen.json"

pytestmark = pytest.mark.skipif(not STUDY.is_dir(), reason="no recipe study is committed yet")


def _seed_folders():
    return sorted(path for path in STUDY.glob("*/seed-*") if path.is_dir())


def test_the_recipes_are_the_searchs_choices():
    recorded = json.loads((STUDY / CHOICES_FILE).read_text())
    chosen = json.loads(SEARCH_CHOICES.read_text())
    assert recorded and all(record["recipe"] in RECIPES for record in recorded.values())
    assert {kind: record["recipe"] for kind, record in recorded.items()} == {
        kind: chosen[kind]["recipe"] for kind in recorded}


@pytest.mark.parametrize("folder", _seed_folders() if STUDY.is_dir() else [], ids=lambda path: str(path.relative_to(STUDY)))
def test_each_committed_seed_is_a_finished_sweep_of_its_kinds_recipe(folder):
    kind, seed = folder.parent.name, int(folder.name.removeprefix("seed-"))
    recipe = json.loads((STUDY / CHOICES_FILE).read_text())[kind]["recipe"]
    settings, provenance, rows = saved(folder)
    assert settings == kind_settings(kind, recipe, seed)
    assert " recipe-study " in provenance["command"]
    check_provenance(provenance)
    check_grid(settings, rows)


def test_every_kind_holds_the_same_seeds_or_one_fewer():
    seeds = {}
    for folder in _seed_folders():
        seeds.setdefault(folder.parent.name, set()).add(int(folder.name.removeprefix("seed-")))
    assert seeds
    kinds = json.loads((STUDY / CHOICES_FILE).read_text())
    assert set(seeds) <= set(kinds)
    counts = {kind: len(seeds.get(kind, ())) for kind in kinds}
    assert all(held == set(range(len(held))) for held in seeds.values()), seeds  # seeds 0, 1, ... in order
    assert max(counts.values()) - min(counts.values()) <= 1, counts
