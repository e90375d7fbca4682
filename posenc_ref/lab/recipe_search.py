r"""Each position kind's training recipe, chosen on held-out data inside the training range only.

Command line::

    python -m posenc_ref.lab recipe-search --out DIR [--positions A,B] [--tasks A,B] [--recipes A,B]
        [--seeds 100,101,102] [--finalists] [--jobs N] [--no-progress]

The recipes are chosen on :data:`CHOICE_TASKS`: the study's copy and who-bites-whom, and associative recall as
the literature defines it (``lookup``: keys and values from disjoint symbols, :mod:`posenc_ref.lab.tasks`). The
study's ``recall`` lets a value repeat the asked key, which only the parity of a position resolves; it was
searched first, and its runs stay in the search's folders, read but not chosen on.

The study trains every kind with one recipe (:data:`posenc_ref.lab.settings.FULL_SETTINGS`). A kind that does
not fit its tasks under that recipe says nothing about lengths beyond the training range, so before kinds are
compared each gets the recipe, among :data:`RECIPES`, under which it fits best. The search must not look at
what the comparison will read, so:

- it scores the training sizes only (``eval_lengths`` = ``min_train_length`` .. L): no run of the search is
  ever evaluated beyond L;
- it trains on seeds of its own (:data:`SEARCH_SEEDS`, disjoint from the study's 0..9): its models, training
  examples and scoring examples are not the study's.

Each recipe runs one seed at a time into ``DIR/<recipe>/seed-<seed>/`` (``seed-<seed>-<tasks>/``, the tasks
joined by ``+``, for tasks other than the study's three), a resumable sweep of its own with its
``settings.json``, ``provenance.json`` and ``results.csv``: a search stopped at any point continues where it
stopped, and the seeds finished so far are a usable first stage (every recipe's first seed comes before any
recipe's second).

:func:`choose_recipes` reads the finished runs and chooses, per kind, in two stages, each of which ranks
recipes by how many of the kind's (task, seed) runs fitted (:func:`posenc_ref.lab.results.fitted`), a tie going
to the higher mean over those runs of the lowest exact match inside the training range, then to the cheaper
recipe (the earlier in :data:`RECIPES`):

1. every recipe with a run of the kind on its first seed for every task that any recipe ran there (which every
   recipe runs first) is ranked on those runs, and the best :data:`FINALISTS` go on;
2. the finalists are ranked again on every run that they all finished (the later seeds, which
   ``--finalists`` runs for them only), and the first is chosen.

Recipes are thus always compared on the same runs; with the first seed alone, the choice is stage 1's best.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc_ref._checks import check_positive_int
from posenc_ref.lab import sweep
from posenc_ref.lab.length_generalization import run_length_generalization
from posenc_ref.lab.results import fitted, kind_label
from posenc_ref.lab.settings import FULL_SETTINGS, LengthGeneralizationSettings, saved_settings

RECIPES: dict[str, dict[str, Any]] = {
    "study": {},
    "slow-long": {"learning_rate": 1e-3, "max_steps": 8000, "warmup_steps": 500},
    "wide-slow-long": {"d_model": 64, "learning_rate": 1e-3, "max_steps": 8000, "warmup_steps": 500},
    "wide-deep-slow-long": {"d_model": 64, "num_layers": 3, "learning_rate": 1e-3, "max_steps": 8000,
                            "warmup_steps": 500},
    "wide-deep-large-batch-longer": {"d_model": 64, "num_layers": 3, "learning_rate": 1e-3, "max_steps": 16000,
                                     "warmup_steps": 1000, "batch_size": 128},
}
"""The candidate recipes, cheapest first, as changes of the study's settings: the study's own (d = 32, two
layers, peak learning rate 3e-3 after 50 warm-up steps, up to 4000 steps); a third of its learning rate after a
longer warm-up, with twice the steps; the same at twice the width (d = 64, heads of 16 dimensions); and the
same with a third layer; and that deeper, wider model on batches twice as large, for twice the steps after a
twice longer warm-up (added after the first seed, where associative recall stayed below the target for ALiBi,
RoPE, T5 and the position-free decoder under every other recipe, each ending its cosine schedule on a plateau).
Every recipe keeps the study's stopping rule, schedule and model kind."""

CHOICE_TASKS: tuple[str, ...] = ("copy", "bites", "lookup")
"""The tasks each kind's recipe is chosen on, and that the recipe study (:mod:`posenc_ref.lab.recipe_study`)
runs."""

SEARCH_SEEDS: tuple[int, ...] = (100, 101, 102)
"""The search's seeds: none of them is a seed of the study (0..9)."""

FINALISTS = 2
"""How many recipes of a kind go on from the first stage (the first seed) to the later seeds."""


def search_settings(recipe: str, *, tasks: Sequence[str], positions: Sequence[str],
                    seed: int) -> LengthGeneralizationSettings:
    """The study's settings under ``recipe``, on the chosen cells and one seed, scored inside the training
    range only.

    Raises:
        ValueError: an unknown recipe, a seed of the study, or cells the study's settings do not allow.
    """
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {list(RECIPES)}, got {recipe!r}")
    if seed in FULL_SETTINGS.seeds:
        raise ValueError(f"seed must not be one of the study's seeds {list(FULL_SETTINGS.seeds)}, got {seed}: "
                         f"a recipe chosen on the study's own runs would be tested on the data it was chosen on")
    inside = tuple(range(FULL_SETTINGS.min_train_length, FULL_SETTINGS.train_length + 1))
    return dataclasses.replace(FULL_SETTINGS, tasks=tuple(tasks), positions=tuple(positions), seeds=(seed,),
                               eval_lengths=inside, **RECIPES[recipe])


def recipe_folder(out_dir: str | Path, recipe: str, seed: int,
                  tasks: Sequence[str] = FULL_SETTINGS.tasks) -> Path:
    """``DIR/<recipe>/seed-<seed>`` for the study's tasks, ``DIR/<recipe>/seed-<seed>-<task>+<task>`` for others."""
    suffix = "" if tuple(tasks) == FULL_SETTINGS.tasks else "-" + "+".join(tasks)
    return Path(out_dir) / recipe / f"seed-{seed}{suffix}"


def _begun_with(folder: Path, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds to run in ``folder``: ``kinds``, or the kinds it was begun with when they include them all (a
    seed begun for every kind, before the search ran later seeds for finalists only, is resumed as it was
    begun: a sweep resumes with the settings it started with)."""
    try:
        begun = saved_settings(folder).positions
    except FileNotFoundError:
        return kinds
    return tuple(begun) if set(kinds) <= set(begun) else kinds


def run_recipe_search(out_dir: str | Path, *, tasks: Sequence[str], positions: Sequence[str],
                      recipes: Sequence[str] = tuple(RECIPES), seeds: Sequence[int] = SEARCH_SEEDS,
                      finalists_only: bool = False, jobs: int = 2, progress: bool = True,
                      command: Sequence[str]) -> dict[str, list[dict]]:
    """Run every recipe on every seed, seed by seed, each into :func:`recipe_folder` on the CPU with one thread
    per job; returns ``{"<recipe>/seed-<seed>": rows}``. ``command`` is recorded in each folder's provenance.
    With ``finalists_only``, a recipe runs only the kinds of which it is a finalist (:func:`choose_recipes`'s
    first stage, on what ``out_dir`` holds), and not at all when it is no kind's.

    Raises:
        ValueError: an unknown recipe, a seed of the study, cells the study's settings do not allow,
            ``jobs`` < 1, or ``finalists_only`` with a kind that ``out_dir`` holds no first stage of.
    """
    check_positive_int("jobs", jobs)
    if not recipes or isinstance(recipes, str):
        raise ValueError(f"recipes must be a non-empty sequence of names from {list(RECIPES)}, got {recipes!r}")
    kinds_of = {recipe: tuple(positions) for recipe in recipes}
    if finalists_only:
        choices = choose_recipes(read_search(out_dir), target_accuracy=FULL_SETTINGS.target_accuracy,
                                 train_length=FULL_SETTINGS.train_length, tasks=CHOICE_TASKS)
        missing = [kind for kind in positions if kind not in choices]
        if missing:
            raise ValueError(f"finalists_only needs a first stage of every kind in {out_dir}; it holds none of "
                             f"{missing}: run the first seed of every recipe first")
        kinds_of = {recipe: tuple(kind for kind in positions if recipe in choices[kind].finalists)
                    for recipe in recipes}
    chosen = [(recipe, seed, search_settings(recipe, tasks=tasks, positions=_begun_with(
                  recipe_folder(out_dir, recipe, seed, tasks), kinds_of[recipe]) if finalists_only
                  else kinds_of[recipe], seed=seed))
              for seed in seeds for recipe in recipes if kinds_of[recipe]]  # every setting checked first
    results = {}
    for recipe, seed, settings in chosen:
        begin = time.perf_counter()
        results[f"{recipe}/seed-{seed}"] = run_length_generalization(
            settings, out_dir=recipe_folder(out_dir, recipe, seed, tasks), device="cpu", jobs=jobs, threads=1,
            progress=progress, verbose=False, plots=False, command=list(command))
        print(f"{recipe}, seed {seed}: {len(settings.runs())} runs in {time.perf_counter() - begin:.0f} s",
              flush=True)
    return results


@dataclass(frozen=True)
class RecipeChoice:
    """The recipe chosen for one kind, with what it was chosen on."""

    kind: str
    recipe: str
    tasks: tuple[str, ...]  # the tasks it was chosen on
    seeds: tuple[int, ...]  # the seeds every finalist finished
    fitted: dict[str, int]  # finalist -> runs fitted, over the tasks and those seeds
    runs: int  # (task, seed) runs per finalist
    lowest_inside: dict[str, float]  # finalist -> mean lowest exact match inside the training range
    finalists: tuple[str, ...]  # the first stage's best, best first
    first_stage_seeds: tuple[int, ...]  # the seeds every recipe finished
    first_stage_fitted: dict[str, int]  # recipe -> runs fitted on those seeds


def choose_recipes(rows_by_recipe: Mapping[str, Sequence[dict[str, Any]]], *, target_accuracy: float,
                   train_length: int, tasks: Sequence[str] = CHOICE_TASKS) -> dict[str, RecipeChoice]:
    """Each kind's recipe from the search's rows, ``{recipe: rows}`` (rows of :data:`CSV_COLUMNS`), on the runs of
    ``tasks`` only, as the module's docstring says. Recipes are ranked in the order of ``rows_by_recipe`` for the
    last tie.

    Raises:
        ValueError: a row beyond ``train_length`` (a recipe must not be chosen on lengths beyond L), or a kind
            that some recipe has no finished run of on a seed the others share.
    """
    beyond = [row for rows in rows_by_recipe.values() for row in rows if int(row["length"]) > train_length]
    if beyond:
        raise ValueError(f"the search's rows must lie inside the training range (length <= {train_length}); "
                         f"{len(beyond)} rows lie beyond it, e.g. length {beyond[0]['length']}")
    runs: dict[tuple[str, str], dict[tuple[str, int], list[dict]]] = {}
    for recipe, rows in rows_by_recipe.items():
        for row in (row for row in rows if row["task"] in tasks):
            runs.setdefault((kind_label(row), recipe), {}).setdefault((row["task"], int(row["seed"])), []).append(row)
    order = list(rows_by_recipe)
    choices = {}
    for kind in dict.fromkeys(kind for kind, _ in runs):
        candidates = [recipe for recipe in order if (kind, recipe) in runs]
        # The first stage: the recipes with a run of every task the kind has on its first seed (a recipe run on
        # later seeds only, for other kinds' finalists, or on some tasks only, never entered it).
        first_seed = min(seed for recipe in candidates for _, seed in runs[kind, recipe])
        first_runs = {key for recipe in candidates for key in runs[kind, recipe] if key[1] == first_seed}
        entered = [recipe for recipe in candidates if first_runs <= set(runs[kind, recipe])]
        first_keys, first_fitted, _, ranked = _ranked(runs, kind, entered, target_accuracy, first_seed_only=True)
        finalists = ranked[:FINALISTS]
        keys, fitted_runs, lowest, final = _ranked(runs, kind, finalists, target_accuracy)
        choices[kind] = RecipeChoice(kind, final[0], tuple(tasks), _seeds(keys), fitted_runs, len(keys), lowest,
                                     tuple(finalists), _seeds(first_keys), first_fitted)
    return choices


def _seeds(keys) -> tuple[int, ...]:
    return tuple(sorted({seed for _, seed in keys}))


def _ranked(runs, kind: str, candidates: list[str], target_accuracy: float, first_seed_only: bool = False):
    """The (task, seed) runs that ``candidates`` all finished (of the lowest such seed only, with
    ``first_seed_only``), each one's runs fitted and mean lowest exact match on them, and the candidates best
    first (more fitted, then higher lowest, then earlier)."""
    shared = set.intersection(*(set(runs[kind, recipe]) for recipe in candidates))
    if not shared:
        raise ValueError(f"kind {kind!r}: the recipes {candidates} share no finished (task, seed) run")
    if first_seed_only:
        first = min(seed for _, seed in shared)
        shared = {key for key in shared if key[1] == first}
    keys = sorted(shared)
    fitted_runs, lowest = {}, {}
    for recipe in candidates:
        chosen_runs = [runs[kind, recipe][key] for key in keys]
        fitted_runs[recipe] = sum(fitted(run_rows, target_accuracy) for run_rows in chosen_runs)
        lowest[recipe] = statistics.fmean(min(float(row["accuracy"]) for row in run_rows) for run_rows in chosen_runs)
    ranked = sorted(candidates, key=lambda recipe: (-fitted_runs[recipe], -lowest[recipe], candidates.index(recipe)))
    return keys, fitted_runs, lowest, ranked


def read_search(out_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The rows of every finished run of a search folder, ``{recipe: rows}`` in the order of :data:`RECIPES`,
    read from each run's saved result (``<recipe>/seed-<seed>*/runs/<run>.json``), so that a seed whose sweep
    was interrupted contributes the runs it finished; a run saved in two folders of one recipe (the same
    training: a run depends on its recipe, kind, task and seed only) is read once."""
    found: dict[str, list[dict[str, Any]]] = {}
    for recipe in RECIPES:
        seen = set()
        for path in sorted((Path(out_dir) / recipe).glob(f"seed-*/{sweep.RUNS_FOLDER}/*.json")):
            if path.name not in seen:
                seen.add(path.name)
                found.setdefault(recipe, []).extend(json.loads(path.read_text()))
    return found


def write_choices(out_dir: str | Path) -> dict[str, RecipeChoice]:
    """Choose from what ``out_dir`` holds (:func:`read_search`, :func:`choose_recipes` at the study's target and
    L, on :data:`CHOICE_TASKS`) and write the choices to ``out_dir/chosen.json``; returns them."""
    choices = choose_recipes(read_search(out_dir), target_accuracy=FULL_SETTINGS.target_accuracy,
                             train_length=FULL_SETTINGS.train_length, tasks=CHOICE_TASKS)
    record = {kind: dataclasses.asdict(choice) for kind, choice in choices.items()}
    (Path(out_dir) / "chosen.json").write_text(json.dumps(record, indent=1) + "\n")
    return choices


def choice_lines(choices: Mapping[str, RecipeChoice]) -> list[str]:
    """One line per kind: the recipe chosen, how many runs each finalist fitted, and the first stage."""
    return [f"{kind}: {choice.recipe} (runs fitted of {choice.runs}, seeds {list(choice.seeds)}: "
            + ", ".join(f"{recipe} {count}" for recipe, count in choice.fitted.items())
            + f"; first stage, seeds {list(choice.first_stage_seeds)}: "
            + ", ".join(f"{recipe} {count}" for recipe, count in choice.first_stage_fitted.items()) + ")"
            for kind, choice in choices.items()]
