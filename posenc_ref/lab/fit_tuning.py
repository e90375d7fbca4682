r"""What would make the study's unfitted models fit: the same cells trained again under one change at a time.

Command line::

    python -m posenc_ref.lab fit-tuning --out DIR [--tasks copy,recall] [--positions t5,rope] [--seeds N]
        [--jobs N] [--no-progress]

A run *fitted* when its exact match reaches the target at every training size
(:func:`posenc_ref.lab.results.fitted`). Where the committed study's runs do not fit, the first question is
whether another budget would have fitted them. :func:`run_fit_tuning` trains the same cells (tasks, kinds,
seeds) of the study (:data:`posenc_ref.lab.settings.FULL_SETTINGS`) again under each change of
:data:`VARIANTS`, one change at a time, everything else equal, and writes each variant as a sweep of its own,
``DIR/<variant>/`` (resumable, with its ``settings.json``, ``provenance.json`` and ``results.csv``). The study
itself is the reference: its runs of the same cells are not trained again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posenc_ref._checks import check_positive_int
from posenc_ref.lab.length_generalization import run_length_generalization
from posenc_ref.lab.settings import FULL_SETTINGS, LengthGeneralizationSettings

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


def run_fit_tuning(out_dir: str | Path, *, tasks: Sequence[str], positions: Sequence[str], seeds: Sequence[int],
                   jobs: int = 2, progress: bool = True, command: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Run every variant of :data:`VARIANTS` on the chosen cells, each into ``out_dir/<variant>/`` on the CPU with
    one thread per job; returns ``{variant: rows}``. ``command`` is recorded in each variant's provenance.

    Raises:
        ValueError: cells the study's settings do not allow, or ``jobs`` < 1.
    """
    check_positive_int("jobs", jobs)
    chosen = {variant: variant_settings(variant, tasks=tasks, positions=positions, seeds=seeds)
              for variant in VARIANTS}
    results = {}
    for variant, settings in chosen.items():
        begin = time.perf_counter()
        results[variant] = run_length_generalization(
            settings, out_dir=Path(out_dir) / variant, device="cpu", jobs=jobs, threads=1, progress=progress,
            verbose=False, plots=False, command=list(command))
        print(f"{variant}: {len(settings.runs())} runs in {time.perf_counter() - begin:.0f} s", flush=True)
    return results
