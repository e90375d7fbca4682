r"""``python -m posenc_ref.fit_tuning``: what would make the study's unfitted models fit.

Usage::

    python -m posenc_ref.fit_tuning --out DIR [--tasks copy,recall] [--positions t5,rope] [--seeds N]
        [--jobs N] [--no-progress]

A run *fitted* when its exact match reaches the target at every training size
(:func:`posenc_ref.experiments.fitted`). Where the committed study's runs do not fit, the first question is
whether another budget would have fitted them. This command trains the same cells (tasks, kinds, seeds) of the
study (:data:`posenc_ref.experiments.FULL_SETTINGS`) again under each change of :data:`VARIANTS`, one change at
a time, everything else equal, and writes each variant as a sweep of its own, ``DIR/<variant>/`` (resumable,
with its ``settings.json``, ``provenance.json`` and ``results.csv``). The study itself is the reference: its
runs of the same cells are not trained again.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from posenc_ref._checks import check_positive_int
from posenc_ref.experiments import (
    FULL_SETTINGS,
    LengthGeneralizationSettings,
    _names,
    run_length_generalization,
)

VARIANTS: dict[str, dict[str, Any]] = {
    "steps-8000": {"max_steps": 8000},
    "width-64": {"d_model": 64},
    "learning-rate-0.001": {"learning_rate": 1e-3},
}
"""One change of the study's settings per variant: twice the step budget, twice the model width (d = 64, so
heads of 16 dimensions), a third of the peak learning rate."""


def variant_settings(variant: str, *, tasks: Sequence[str], positions: Sequence[str],
                     seeds: Sequence[int]) -> LengthGeneralizationSettings:
    """The study's settings on the chosen cells, with the change of ``variant``.

    Raises:
        ValueError: an unknown variant, or cells the study's settings do not allow.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    return dataclasses.replace(FULL_SETTINGS, tasks=tuple(tasks), positions=tuple(positions), seeds=tuple(seeds),
                               **VARIANTS[variant])


def main(argv: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The command line; returns the rows of every variant."""
    parser = argparse.ArgumentParser(prog="python -m posenc_ref.fit_tuning",
                                     description=__doc__.splitlines()[0].split(": ", 1)[-1])
    parser.add_argument("--out", required=True, metavar="DIR", help="one folder per variant goes here")
    parser.add_argument("--tasks", type=_names, default=("copy", "recall"), metavar="A,B")
    parser.add_argument("--positions", type=_names, default=("t5", "rope"), metavar="A,B")
    parser.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds 0..N-1 (default 3)")
    parser.add_argument("--jobs", type=int, default=2, metavar="N", help="runs in parallel (default 2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    arguments = parser.parse_args(argv)
    try:
        seeds = tuple(range(check_positive_int("--seeds", arguments.seeds)))
        check_positive_int("--jobs", arguments.jobs)
        chosen = {variant: variant_settings(variant, tasks=arguments.tasks, positions=arguments.positions,
                                            seeds=seeds) for variant in VARIANTS}
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    torch.set_num_threads(1)
    command = ["python", "-m", "posenc_ref.fit_tuning", *(sys.argv[1:] if argv is None else argv)]
    results = {}
    for variant, settings in chosen.items():
        begin = time.perf_counter()
        results[variant] = run_length_generalization(
            settings, out_dir=Path(arguments.out) / variant, device="cpu", jobs=arguments.jobs, threads=1,
            progress=not arguments.no_progress, verbose=False, plots=False, command=command)
        print(f"{variant}: {len(settings.runs())} runs in {time.perf_counter() - begin:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
