r"""The study again, each kind trained under the recipe the search chose for it.

Command line::

    python -m posenc_ref.lab recipe-study --out DIR --choices book/data/recipe-search/chosen.json
        [--positions A,B] [--seeds N] [--stop-accuracy P] [--jobs N] [--no-progress]

The study (:data:`posenc_ref.lab.settings.FULL_SETTINGS`) trains every kind under one recipe; the search
(:mod:`posenc_ref.lab.recipe_search`) chose, for each kind, the recipe under which it fits best inside the
training range, on seeds of its own. This command runs the study's grid for each kind under its chosen recipe:
the tasks the recipes were chosen on (:data:`~posenc_ref.lab.recipe_search.CHOICE_TASKS`: the study's copy and
who-bites-whom, and associative recall with keys and values apart, ``lookup``), the study's decoders, seeds
(0..9), training sizes and evaluation up to 3L, and the recipe's changes of width, depth, learning rate,
warm-up, steps and batch size (:func:`kind_settings`).

A run stops once its held-out checks reach ``--stop-accuracy`` at every training size on three checks in a row
(:func:`posenc_ref.lab.train.train_model`); it *fitted* when its scoring examples reach the study's fit
threshold (:data:`~posenc_ref.lab.settings.FULL_SETTINGS`' ``target_accuracy``, 0.99) at every training size.
The first pass (``book/data/recipe-study/``) stopped at the fit threshold itself: a run stopped on the threshold and was
scored on it, and on fresh examples its lowest training size fell below 0.99 in about one run in six, mostly by
a few examples in 512. The second pass (``book/data/recipe-study-margin/``) stops with room, at :data:`MARGIN_STOP_ACCURACY`.
The stopping rule reads only the training sizes, so it is chosen, like the recipes, without looking beyond L.

Each (kind, seed) runs into ``DIR/<kind>/seed-<seed>/``, a resumable sweep of its own with its
``settings.json``, ``provenance.json`` and ``results.csv``, seed by seed: every kind's seed 0 is started before
any kind's seed 1, so that a study stopped at any point holds the same seeds for every kind, give or take the
sweeps in flight. ``--jobs N`` runs N (kind, seed) sweeps at once, each in a worker process of its own with one
torch thread, its three runs one after another: a kind's runs differ in length by a factor of four or more
(copy takes longest), so parallel runs within one sweep left a core idle while its longest run finished.
``DIR/choices.json`` keeps the recipe of each kind and the search record it came from; a kind's recipe cannot
change under its runs (:func:`run_recipe_study` refuses). :func:`read_recipe_study` reads every finished run,
in the columns of :data:`posenc_ref.lab.results.CSV_COLUMNS`, so the chapter's analysis reads it like the study.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from posenc_ref._checks import check_positive_int
from posenc_ref.lab import sweep
from posenc_ref.lab.length_generalization import run_length_generalization
from posenc_ref.lab.recipe_search import CHOICE_TASKS, RECIPES
from posenc_ref.lab.settings import FULL_SETTINGS, LengthGeneralizationSettings

CHOICES_FILE = "choices.json"

MARGIN_STOP_ACCURACY = 0.999
"""The second pass's stopping rule: above 255 / 256 = 0.9961, so only a check without a mistake at every training
size reaches it, on three checks in a row (3 x 6 x 256 = 4608 held-out examples). A model that passes it errs
on well under one example in a thousand, so the fit threshold's five mistakes in 512 lie far from it; a run that
never passes it trains to its step budget, its learning rate decayed. Allowing one mistake in 256 (0.996) was
tried first: ALiBi's first lookup run passed it and scored 5 mistakes in 512 at size 8, on the threshold."""


def load_choices(path: str | Path) -> dict[str, dict[str, Any]]:
    """The search's record of each kind's choice (``chosen.json``), ``{kind: record}``, each with its
    ``recipe``.

    Raises:
        ValueError: a record without a recipe, or a recipe not in :data:`RECIPES`.
    """
    record = json.loads(Path(path).read_text())
    for kind, choice in record.items():
        recipe = choice.get("recipe") if isinstance(choice, dict) else None
        if recipe not in RECIPES:
            raise ValueError(f"{path}: the choice of kind {kind!r} must name a recipe from {list(RECIPES)}, "
                             f"got {recipe!r}")
    return record


def kind_settings(kind: str, recipe: str, seed: int, *,
                  stop_accuracy: float = FULL_SETTINGS.target_accuracy) -> LengthGeneralizationSettings:
    """The study's settings for one kind and one seed, on :data:`CHOICE_TASKS`, under ``recipe``, its runs
    stopping once their checks reach ``stop_accuracy`` (at least the fit threshold, below 1).

    Raises:
        ValueError: an unknown recipe, a kind the study does not hold, a seed outside the study's, or a stopping
            accuracy below the fit threshold or not below 1.
    """
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {list(RECIPES)}, got {recipe!r}")
    if kind not in FULL_SETTINGS.positions:
        raise ValueError(f"kind must be one of the study's {list(FULL_SETTINGS.positions)}, got {kind!r}")
    if seed not in FULL_SETTINGS.seeds:
        raise ValueError(f"seed must be one of the study's {list(FULL_SETTINGS.seeds)}, got {seed}")
    fit_threshold = FULL_SETTINGS.target_accuracy
    if isinstance(stop_accuracy, bool) or not isinstance(stop_accuracy, (int, float)) \
            or not fit_threshold <= stop_accuracy < 1:
        raise ValueError(f"stop_accuracy must be a number from the fit threshold {fit_threshold} up to, not "
                         f"including, 1, got {stop_accuracy!r}")
    return dataclasses.replace(FULL_SETTINGS, positions=(kind,), tasks=CHOICE_TASKS, seeds=(seed,),
                               **RECIPES[recipe], target_accuracy=float(stop_accuracy))


def study_folder(out_dir: str | Path, kind: str, seed: int) -> Path:
    return Path(out_dir) / kind / f"seed-{seed}"


def _record_choices(out_dir: Path, choices: Mapping[str, Mapping[str, Any]], kinds: Sequence[str]) -> None:
    """Write ``out_dir/choices.json``, keeping the kinds it holds; refuse a kind whose recipe changed."""
    path = out_dir / CHOICES_FILE
    saved = json.loads(path.read_text()) if path.exists() else {}
    changed = [kind for kind in kinds if kind in saved and saved[kind]["recipe"] != choices[kind]["recipe"]]
    if changed:
        differences = "; ".join(f"{kind}: {saved[kind]['recipe']} there, {choices[kind]['recipe']} now"
                                for kind in changed)
        raise ValueError(f"{out_dir} holds runs under other recipes ({differences}); use another --out")
    saved.update({kind: dict(choices[kind]) for kind in kinds})
    path.write_text(json.dumps(dict(sorted(saved.items())), indent=1) + "\n")


def run_recipe_study(out_dir: str | Path, choices: Mapping[str, Mapping[str, Any]], *,
                     positions: Sequence[str] | None = None, seeds: Sequence[int] = FULL_SETTINGS.seeds,
                     stop_accuracy: float = FULL_SETTINGS.target_accuracy, jobs: int = 2, progress: bool = True,
                     command: Sequence[str]) -> dict[str, list[dict]]:
    """Run each kind of ``positions`` (default: every kind of ``choices``) under its chosen recipe, seed by
    seed, stopping at ``stop_accuracy`` (:func:`kind_settings`), on the CPU, ``jobs`` (kind, seed) sweeps at a
    time with one thread each; returns ``{"<kind>/seed-<seed>": rows}`` in the planned order.

    Raises:
        ValueError: a kind without a choice, a seed outside the study's, a bad ``stop_accuracy``, ``jobs`` < 1,
            or ``out_dir`` holding a kind's runs under another recipe or stopping rule.
    """
    check_positive_int("jobs", jobs)
    kinds = tuple(choices) if positions is None else tuple(positions)
    missing = [kind for kind in kinds if kind not in choices]
    if missing:
        raise ValueError(f"positions must be kinds the choices name ({sorted(choices)}); no choice for {missing}")
    planned = [(kind, seed, kind_settings(kind, choices[kind]["recipe"], seed, stop_accuracy=stop_accuracy))
               for seed in seeds for kind in kinds]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _record_choices(out_dir, choices, kinds)
    results = {}

    def done(kind: str, seed: int, settings: LengthGeneralizationSettings, rows: list[dict], seconds: float) -> None:
        results[f"{kind}/seed-{seed}"] = rows
        print(f"{kind} ({choices[kind]['recipe']}), seed {seed}: {len(settings.runs())} runs in {seconds:.0f} s",
              flush=True)

    if jobs == 1:
        for kind, seed, settings in planned:
            done(kind, seed, settings, *_run_sweep(settings, study_folder(out_dir, kind, seed), progress, command))
    else:
        with _executor(jobs) as pool:  # the sweeps start in the planned order, at most `jobs` at a time
            futures = {pool.submit(_run_sweep, settings, study_folder(out_dir, kind, seed), False, command):
                       (kind, seed, settings) for kind, seed, settings in planned}
            try:
                for future in concurrent.futures.as_completed(futures):
                    done(*futures[future], *future.result())
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    return {name: results[name] for name in (f"{kind}/seed-{seed}" for kind, seed, _ in planned)}


def _run_sweep(settings: LengthGeneralizationSettings, folder: Path, progress: bool,
               command: Sequence[str]) -> tuple[list[dict], float]:
    """One (kind, seed) sweep in this process, its runs one after another; its rows and wall time."""
    begin = time.perf_counter()
    rows = run_length_generalization(settings, out_dir=folder, device="cpu", jobs=1, threads=1, progress=progress,
                                     verbose=False, plots=False, command=list(command))
    return rows, time.perf_counter() - begin


def _executor(jobs: int) -> concurrent.futures.Executor:
    """``jobs`` worker processes, spawned (a fresh interpreter each), each with one torch thread."""
    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=sweep._initialise_worker, initargs=(1,))


def read_recipe_study(out_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of every finished run of a recipe study (``<kind>/seed-<seed>/runs/<run>.json``), so that a
    seed whose sweep was interrupted contributes the runs it finished; kinds in alphabetical order, then seeds
    and runs in order."""
    rows: list[dict[str, Any]] = []
    for kind_folder in sorted(path for path in Path(out_dir).iterdir() if path.is_dir()):
        seed_folders = sorted(kind_folder.glob("seed-*"), key=lambda path: int(path.name.split("-", 1)[1]))
        for seed_folder in seed_folders:
            for path in sorted((seed_folder / sweep.RUNS_FOLDER).glob("*.json")):
                rows.extend(json.loads(path.read_text()))
    return rows
