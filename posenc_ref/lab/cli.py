r"""``python -m posenc_ref.lab``: chapter 6's studies as commands that write their results as data.

``length-generalization`` trains short and tests long
(:func:`~posenc_ref.lab.length_generalization.run_length_generalization`, whose module describes the study
and its options); ``context-extension`` reads the rotary decoders of such a sweep at longer sizes with each
scaling rule (:func:`~posenc_ref.lab.extension.run_context_extension`); ``fit-tuning`` trains unfitted cells of
the study again under one change of budget at a time (:func:`~posenc_ref.lab.fit_tuning.run_fit_tuning`);
``recipe-search`` chooses each kind's training recipe inside the training range, on seeds the study does not
use (:func:`~posenc_ref.lab.recipe_search.run_recipe_search`); ``recipe-study`` runs the study again with each
kind under its chosen recipe (:func:`~posenc_ref.lab.recipe_study.run_recipe_study`); ``recall-collisions``
scores the study's recall decoders apart on the examples whose asked key is also a value
(:func:`~posenc_ref.lab.recall_collisions.run_recall_collisions`).
``python -m posenc_ref.lab <command> --help`` lists the options of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from posenc_ref._checks import check_positive_int
from posenc_ref.lab.extension import ExtensionSettings, run_context_extension
from posenc_ref.lab.fit_tuning import run_fit_tuning
from posenc_ref.lab.length_generalization import run_length_generalization
from posenc_ref.lab.recall_collisions import run_recall_collisions
from posenc_ref.lab.recipe_search import RECIPES, SEARCH_SEEDS, choice_lines, run_recipe_search, write_choices
from posenc_ref.lab.recipe_study import MARGIN_STOP_ACCURACY, load_choices, run_recipe_study
from posenc_ref.lab.results import format_table
from posenc_ref.lab.settings import (
    FULL_SETTINGS,
    QUICK_SETTINGS,
    RANDOMIZED_SETTINGS,
    LengthGeneralizationSettings,
    saved_settings,
)
from posenc_ref.lab.tasks import TASKS
from posenc_ref.lab.train import resolve_device


def _command(argv: Sequence[str] | None) -> list[str]:
    """The command line recorded in a study's provenance: ``python -m posenc_ref.lab`` and its arguments."""
    return ["python", "-m", "posenc_ref.lab", *(sys.argv[1:] if argv is None else argv)]


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m posenc_ref.lab",
                                     description=__doc__.splitlines()[0].split(": ", 1)[-1])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("length-generalization",
                                  help="train short, test long (see posenc_ref.lab.length_generalization)")
    command.add_argument("--out", required=True, metavar="DIR", help="where results.csv and the plots go")
    setting = command.add_mutually_exclusive_group()
    setting.add_argument("--quick", action="store_true", help="the small setting of the book build")
    setting.add_argument("--randomized-study", action="store_true",
                         help="the randomized-positions remedy (RANDOMIZED_SETTINGS) instead of the full study")
    command.add_argument("--device", default="auto", help="cpu, cuda or auto (default: cuda when available)")
    command.add_argument("--seeds", type=int, metavar="N", help="use seeds 0..N-1")
    command.add_argument("--max-steps", type=int, metavar="N", help="training steps per run, at most")
    command.add_argument("--positions", type=_names, metavar="A,B", help="position kinds (default: all)")
    command.add_argument("--models", type=_names, metavar="A,B", help="encoder and/or decoder")
    command.add_argument("--tasks", type=_names, metavar="A,B", help=f"tasks among {', '.join(TASKS)}")
    command.add_argument("--eval-examples", type=int, metavar="N", help="examples scored per length")
    command.add_argument("--threads", type=int, metavar="N",
                         help="torch CPU threads (default 1 on the CPU: the models are too small to gain from "
                              "more, and one thread gives the book's numbers)")
    command.add_argument("--randomized", type=_names, metavar="A,B",
                         help="kinds also trained with randomized positions (default: the setting's)")
    command.add_argument("--jobs", type=int, metavar="N",
                         help="runs in parallel, one process each (default: one per core on the CPU, 1 on CUDA)")
    command.add_argument("--restart", action="store_true",
                         help="discard the runs saved in --out instead of continuing them")
    command.add_argument("--save-models", action="store_true",
                         help="keep each trained model in DIR/runs/ (context-extension reads them)")
    command.add_argument("--no-progress", action="store_true", help="no progress bars")
    extension = commands.add_parser(
        "context-extension", help="read the rotary decoders of a sweep (--save-models) at 2L and 3L with each "
                                  "scaling rule, before and after a short fine-tune")
    extension.add_argument("--models", required=True, metavar="DIR",
                           help="the --out of a length-generalization sweep run with --save-models")
    extension.add_argument("--out", required=True, metavar="DIR", help="where extension.csv goes")
    extension.add_argument("--factors", type=_names, metavar="2,3", help="sizes read, as multiples of L")
    extension.add_argument("--finetune-steps", type=int, metavar="N", help="steps of each fine-tune")
    extension.add_argument("--device", default="auto", help="cpu, cuda or auto (default: cuda when available)")
    extension.add_argument("--jobs", type=int, metavar="N",
                           help="runs in parallel (default: one per core on the CPU, 1 on CUDA)")
    extension.add_argument("--no-progress", action="store_true", help="no progress bar")
    tuning = commands.add_parser("fit-tuning", help="train the study's cells again under one change of budget at "
                                                    "a time (see posenc_ref.lab.fit_tuning)")
    tuning.add_argument("--out", required=True, metavar="DIR", help="one folder per variant goes here")
    tuning.add_argument("--tasks", type=_names, default=("copy", "recall"), metavar="A,B",
                        help="tasks (default: copy,recall)")
    tuning.add_argument("--positions", type=_names, default=("t5", "rope"), metavar="A,B",
                        help="position kinds (default: t5,rope)")
    tuning.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds 0..N-1 (default 3)")
    tuning.add_argument("--jobs", type=int, default=2, metavar="N", help="runs in parallel (default 2)")
    tuning.add_argument("--no-progress", action="store_true", help="no progress bar")
    search = commands.add_parser("recipe-search", help="choose each kind's training recipe inside the training "
                                                       "range, on seeds of its own (see posenc_ref.lab.recipe_search)")
    search.add_argument("--out", required=True, metavar="DIR", help="one folder per recipe and seed goes here")
    search.add_argument("--tasks", type=_names, default=FULL_SETTINGS.tasks, metavar="A,B",
                        help="tasks (default: the study's)")
    search.add_argument("--positions", type=_names, default=FULL_SETTINGS.positions, metavar="A,B",
                        help="position kinds (default: the study's)")
    search.add_argument("--recipes", type=_names, default=tuple(RECIPES), metavar="A,B",
                        help=f"recipes among {', '.join(RECIPES)} (default: all)")
    search.add_argument("--seeds", type=_seeds, default=SEARCH_SEEDS, metavar="A,B",
                        help=f"seeds, none of the study's (default: {','.join(map(str, SEARCH_SEEDS))})")
    search.add_argument("--finalists", action="store_true",
                        help="run each recipe only for the kinds of which the first seed made it a finalist")
    search.add_argument("--jobs", type=int, default=2, metavar="N", help="runs in parallel (default 2)")
    search.add_argument("--no-progress", action="store_true", help="no progress bar")
    study = commands.add_parser("recipe-study", help="the study again, each kind under the recipe the search chose "
                                                     "(see posenc_ref.lab.recipe_study)")
    study.add_argument("--out", required=True, metavar="DIR", help="one folder per kind and seed goes here")
    study.add_argument("--choices", required=True, metavar="FILE",
                       help="the search's chosen.json (book/data/recipe-search/chosen.json)")
    study.add_argument("--positions", type=_names, metavar="A,B", help="position kinds (default: every chosen one)")
    study.add_argument("--seeds", type=int, default=len(FULL_SETTINGS.seeds), metavar="N",
                       help=f"seeds 0..N-1 (default {len(FULL_SETTINGS.seeds)}, the study's)")
    study.add_argument("--stop-accuracy", type=float, default=FULL_SETTINGS.target_accuracy, metavar="P",
                       help=f"stop a run once its checks reach P at every training size (default "
                            f"{FULL_SETTINGS.target_accuracy}, the fit threshold; the second pass uses "
                            f"{MARGIN_STOP_ACCURACY})")
    study.add_argument("--jobs", type=int, default=2, metavar="N",
                       help="(kind, seed) sweeps in parallel, one process each (default 2)")
    study.add_argument("--no-progress", action="store_true", help="no progress bar")
    collisions = commands.add_parser("recall-collisions",
                                     help="the study's recall decoders scored apart on the examples whose asked key "
                                          "is also a value (see posenc_ref.lab.recall_collisions)")
    collisions.add_argument("--out", required=True, metavar="DIR", help="collisions.csv and runs/ go here")
    collisions.add_argument("--positions", type=_names, default=FULL_SETTINGS.positions, metavar="A,B",
                            help="position kinds (default: the study's)")
    collisions.add_argument("--seeds", type=int, default=len(FULL_SETTINGS.seeds), metavar="N",
                            help=f"seeds 0..N-1 (default {len(FULL_SETTINGS.seeds)}, the study's)")
    collisions.add_argument("--jobs", type=int, default=2, metavar="N", help="runs in parallel (default 2)")
    collisions.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(seed) for seed in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be whole numbers separated by commas, got {text!r}") from None


def settings_from_arguments(arguments: argparse.Namespace) -> LengthGeneralizationSettings:
    """The settings named by the command line: ``--quick`` or the full ones, with the overrides applied."""
    settings = (QUICK_SETTINGS if arguments.quick else RANDOMIZED_SETTINGS if arguments.randomized_study
                else FULL_SETTINGS)
    overrides: dict[str, Any] = {}
    if arguments.seeds is not None:
        overrides["seeds"] = tuple(range(check_positive_int("--seeds", arguments.seeds)))
    for option, field in (("max_steps", "max_steps"), ("eval_examples", "eval_examples"),
                          ("positions", "positions"), ("models", "models"), ("tasks", "tasks"),
                          ("randomized", "randomized")):
        value = getattr(arguments, option)
        if value is not None:
            overrides[field] = value
    return dataclasses.replace(settings, **overrides)


def _extension_main(parser: argparse.ArgumentParser, arguments: argparse.Namespace,
                    argv: Sequence[str] | None) -> list[dict[str, Any]]:
    try:
        settings = saved_settings(arguments.models)
        overrides: dict[str, Any] = {}
        if arguments.factors is not None:
            overrides["factors"] = tuple(int(factor) for factor in arguments.factors)
        if arguments.finetune_steps is not None:
            overrides["finetune_steps"] = arguments.finetune_steps
        extension = dataclasses.replace(ExtensionSettings(), **overrides)
        device = resolve_device(arguments.device)
        jobs = arguments.jobs if arguments.jobs is not None else (
            (os.cpu_count() or 1) if device.type == "cpu" else 1)
        check_positive_int("--jobs", jobs)
        if device.type == "cpu":
            torch.set_num_threads(1)
        begin = time.perf_counter()
        rows = run_context_extension(settings, models_dir=arguments.models, out_dir=arguments.out,
                                     extension=extension, device=device, jobs=jobs,
                                     progress=not arguments.no_progress,
                                     command=_command(argv))
    except (TypeError, ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    print(f"wrote {Path(arguments.out) / 'extension.csv'} ({len(rows)} rows) in {time.perf_counter() - begin:.0f} s")
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The command line; returns the rows it wrote."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "context-extension":
        return _extension_main(parser, arguments, argv)
    if arguments.command == "recipe-search":
        try:
            torch.set_num_threads(1)
            results = run_recipe_search(arguments.out, tasks=arguments.tasks, positions=arguments.positions,
                                        recipes=arguments.recipes, seeds=arguments.seeds,
                                        finalists_only=arguments.finalists, jobs=arguments.jobs,
                                        progress=not arguments.no_progress,
                                        command=_command(argv))
        except (TypeError, ValueError) as error:
            parser.error(str(error))
        print("\n".join(choice_lines(write_choices(arguments.out))))
        return [row for rows in results.values() for row in rows]
    if arguments.command == "recipe-study":
        try:
            torch.set_num_threads(1)
            results = run_recipe_study(arguments.out, load_choices(arguments.choices), positions=arguments.positions,
                                       seeds=tuple(range(check_positive_int("--seeds", arguments.seeds))),
                                       stop_accuracy=arguments.stop_accuracy, jobs=arguments.jobs,
                                       progress=not arguments.no_progress, command=_command(argv))
        except (TypeError, ValueError, FileNotFoundError) as error:
            parser.error(str(error))
        return [row for rows in results.values() for row in rows]
    if arguments.command == "recall-collisions":
        try:
            torch.set_num_threads(1)
            return run_recall_collisions(arguments.out, positions=arguments.positions,
                                         seeds=tuple(range(check_positive_int("--seeds", arguments.seeds))),
                                         jobs=arguments.jobs, progress=not arguments.no_progress,
                                         command=_command(argv))
        except (TypeError, ValueError) as error:
            parser.error(str(error))
    if arguments.command == "fit-tuning":
        try:
            torch.set_num_threads(1)
            results = run_fit_tuning(arguments.out, tasks=arguments.tasks, positions=arguments.positions,
                                     seeds=tuple(range(check_positive_int("--seeds", arguments.seeds))),
                                     jobs=arguments.jobs, progress=not arguments.no_progress,
                                     command=_command(argv))
        except (TypeError, ValueError) as error:
            parser.error(str(error))
        return [row for rows in results.values() for row in rows]
    try:
        settings = settings_from_arguments(arguments)
        device = resolve_device(arguments.device)
        threads = 1 if arguments.threads is None and device.type == "cpu" else arguments.threads
        if threads is not None:
            torch.set_num_threads(check_positive_int("--threads", threads))
        jobs = arguments.jobs if arguments.jobs is not None else (
            (os.cpu_count() or 1) if device.type == "cpu" else 1)
        check_positive_int("--jobs", jobs)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    print(f"length generalization ({'quick' if arguments.quick else 'full'}): {len(settings.runs())} runs, "
          f"device {device}, torch {torch.__version__}, {jobs} job(s) of {torch.get_num_threads()} thread(s)",
          flush=True)
    begin = time.perf_counter()
    try:
        rows = run_length_generalization(settings, out_dir=arguments.out, device=device,
                                         progress=not arguments.no_progress, jobs=jobs,
                                         threads=torch.get_num_threads(), resume=not arguments.restart,
                                         save_models=arguments.save_models,
                                         command=_command(argv))
    except ValueError as error:
        parser.error(str(error))
    print()
    print(format_table(rows))
    print(f"\nwrote {Path(arguments.out) / 'results.csv'} ({len(rows)} rows) and the plots "
          f"in {time.perf_counter() - begin:.0f} s")
    return rows
