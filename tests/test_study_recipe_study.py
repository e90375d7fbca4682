"""The committed recipe studies (book/data/recipe-study*/): each kind trained under the recipe the search chose.

Data produced by ``python -m posenc_ref.lab recipe-study``, committed as it finishes (a study takes hours on two
cores): the first pass (``recipe-study/``), whose runs stop at the fit threshold, and the second
(``recipe-study-margin/``), whose runs stop at :data:`~posenc_ref.lab.recipe_study.MARGIN_STOP_ACCURACY`. Every
(kind, seed) folder committed is a finished sweep: its settings are the study's for that kind under its recorded
recipe and its pass's stopping rule, its grid complete at every size, its provenance whole; the recipes are the
search's choices; and the kinds hold the same seeds, or one fewer (every kind's seed before any kind's next).
"""

import json

import pytest
from study_data import DATA, check_grid, check_provenance, saved

from posenc_ref.lab.recipe_search import RECIPES
from posenc_ref.lab.recipe_study import CHOICES_FILE, MARGIN_STOP_ACCURACY, kind_settings

STOP_ACCURACY = {"recipe-study": 0.99, "recipe-study-margin": MARGIN_STOP_ACCURACY}
"""Each pass's folder and the stopping accuracy its command was given."""
STUDIES = [DATA / name for name in STOP_ACCURACY if (DATA / name).is_dir()]
SEARCH_CHOICES = DATA / "recipe-search" / "chosen.json"

pytestmark = pytest.mark.skipif(not STUDIES, reason="no recipe study is committed yet")


def _seed_folders(study):
    return sorted(path for path in study.glob("*/seed-*") if path.is_dir())


@pytest.mark.parametrize("study", STUDIES, ids=lambda path: path.name)
def test_the_recipes_are_the_searchs_choices(study):
    recorded = json.loads((study / CHOICES_FILE).read_text())
    chosen = json.loads(SEARCH_CHOICES.read_text())
    assert recorded and all(record["recipe"] in RECIPES for record in recorded.values())
    assert {kind: record["recipe"] for kind, record in recorded.items()} == {
        kind: chosen[kind]["recipe"] for kind in recorded}


@pytest.mark.parametrize("folder", [folder for study in STUDIES for folder in _seed_folders(study)],
                         ids=lambda path: str(path.relative_to(DATA)))
def test_each_committed_seed_is_a_finished_sweep_of_its_kinds_recipe(folder):
    study = folder.parent.parent
    kind, seed = folder.parent.name, int(folder.name.removeprefix("seed-"))
    recipe = json.loads((study / CHOICES_FILE).read_text())[kind]["recipe"]
    settings, provenance, rows = saved(folder)
    assert settings == kind_settings(kind, recipe, seed, stop_accuracy=STOP_ACCURACY[study.name])
    assert " recipe-study " in provenance["command"]
    check_provenance(provenance)
    check_grid(settings, rows)


@pytest.mark.parametrize("study", STUDIES, ids=lambda path: path.name)
def test_every_kind_holds_the_same_seeds_or_one_fewer(study):
    seeds = {}
    for folder in _seed_folders(study):
        seeds.setdefault(folder.parent.name, set()).add(int(folder.name.removeprefix("seed-")))
    assert seeds
    kinds = json.loads((study / CHOICES_FILE).read_text())
    assert set(seeds) <= set(kinds)
    counts = {kind: len(seeds.get(kind, ())) for kind in kinds}
    assert all(held == set(range(len(held))) for held in seeds.values()), seeds  # seeds 0, 1, ... in order
    assert max(counts.values()) - min(counts.values()) <= 1, counts
