r"""``python -m posenc_ref.lab length-generalization``: train short, test long, for every position kind.

Usage::

    python -m posenc_ref.lab length-generalization [--quick] [--device cpu|cuda|auto] --out DIR
        [--seeds N] [--max-steps N] [--positions none,rope,...] [--models encoder,decoder]
        [--tasks bites,...] [--eval-examples N] [--threads N] [--no-progress]

On the CPU the command uses one thread unless ``--threads`` says otherwise: the models are too small to gain
from more, and floating-point sums, hence the trained models, depend on the number of threads; one thread
reproduces the numbers of the book, which runs the same code.

For every position kind, model kind (encoder, decoder), task and seed, a
:class:`~posenc_ref.lab.models.TinyTransformer` is trained on inputs of size ``min_length .. L`` (``L`` the
training length) until its held-out exact match reaches the target at every training length or the step
budget runs out (:func:`posenc_ref.lab.train.train_model`), then scored by exact match and per-token accuracy at
every evaluation length up to ``3L`` on the same examples for every model (:func:`posenc_ref.lab.train.score`).

Writes ``DIR/results.csv``, one row per (position, model, task, seed, length) with the columns of
:data:`~posenc_ref.lab.results.CSV_COLUMNS`, and ``DIR/<task>_<model>.png``, accuracy against length per
position kind (mean over seeds).

The learned table is given ``max_len`` = the longest sequence evaluated, so that it is defined at every
evaluation length; rows beyond the longest training sequence are never trained (chapter 3), and that is
exactly what the experiment shows for them. Shaw's clipping distance and T5's bucket range are scaled to the
training length L, so that every one of their rows is trained, as in the papers, whose ranges lie inside
their training inputs (:meth:`~posenc_ref.lab.settings.LengthGeneralizationSettings.position_options`).
RoPE keeps base 10000.

``--quick`` (:data:`~posenc_ref.lab.settings.QUICK_SETTINGS`) is the live run of the book build: the study's
decoders on two tasks (``bites`` and ``recall``) with its first three seeds. The default
(:data:`~posenc_ref.lab.settings.FULL_SETTINGS`) is the study committed with the book: every position kind's
decoder on copy, who-bites-whom and associative recall, ten seeds, trained on sizes 3..L (L = 8), scored up
to 3L, d = 32, up to 4000 steps with a cosine schedule; about an hour on 2 CPU cores with ``--jobs 2``.
``--randomized-study`` (:data:`~posenc_ref.lab.settings.RANDOMIZED_SETTINGS`) runs the remedy: the absolute
and rotary decoders with and without randomized positions on two tasks.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from posenc_ref.lab import sweep
from posenc_ref.lab.models import TinyTransformer, build_model
from posenc_ref.lab.results import write_plots, write_results
from posenc_ref.lab.settings import (
    POSITION_FREE_ENCODER_STEPS,
    QUICK_SETTINGS,
    LengthGeneralizationSettings,
    Run,
    _settings_record,
    saved_settings,
)
from posenc_ref.lab.tasks import vocabulary_size
from posenc_ref.lab.train import resolve_device, score, train_model


@dataclass(frozen=True)
class _Job:
    """What a worker process needs for one run."""

    settings: LengthGeneralizationSettings
    run: Run
    device: str
    progress: bool
    model_folder: str | None = None


def build_run_model(settings: LengthGeneralizationSettings, run: Run) -> TinyTransformer:
    """The untrained model of ``run``, its weights drawn from ``torch.manual_seed(run.seed)``."""
    torch.manual_seed(run.seed)
    return build_model(run.model, vocabulary_size(settings.num_symbols), run.position,
                       d_model=settings.d_model, num_heads=settings.num_heads, num_layers=settings.num_layers,
                       backend=settings.backend,
                       random_positions=settings.random_positions if run.randomized else None,
                       **settings.position_options(run.position, run.model, run.task, randomized=run.randomized))


def model_path(out_dir: str | Path, run: Run) -> Path:
    """Where a sweep run with ``save_models=True`` keeps the trained weights of ``run``."""
    return Path(out_dir) / sweep.RUNS_FOLDER / f"{run.key}.pt"


def load_trained_model(out_dir: str | Path, settings: LengthGeneralizationSettings, run: Run, *,
                       retrain: bool = False) -> TinyTransformer:
    """The trained model of ``run`` saved by :func:`run_length_generalization` with ``save_models=True``.

    With ``retrain``, a run whose weights are not saved (a sweep run without ``save_models``, or results kept
    without their weights) is trained again, as the sweep trained it: from its seed, on one thread, which
    gives the same weights (check: the retrained model's exact match at L equals the saved result's).

    Raises:
        FileNotFoundError: the weights are not in ``out_dir`` and ``retrain`` is False.
    """
    path = model_path(out_dir, run)
    if not path.exists():
        if not retrain:
            raise FileNotFoundError(f"no trained weights for {run.key} in {Path(out_dir) / sweep.RUNS_FOLDER}: "
                                    f"run the sweep with save_models=True (--save-models) first")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _train_and_score(_Job(settings, run, "cpu", False, str(out_dir)))
        finally:
            torch.set_num_threads(threads)
    model = build_run_model(settings, run)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def _train_and_score(job: _Job) -> list[dict[str, Any]]:
    """Train one model and score it at every evaluation length; one row per length."""
    settings, run = job.settings, job.run
    device = torch.device(job.device)
    model = build_run_model(settings, run)
    budget = settings.train_settings(run.task)
    if run.position == "none" and run.model == "encoder":
        budget = dataclasses.replace(budget, max_steps=min(budget.max_steps, POSITION_FREE_ENCODER_STEPS))
    result = train_model(model, run.task, budget, seed=run.seed, device=device,
                         progress=job.progress, description=run.key)
    common = {
        "position": run.position, "randomized": run.randomized, "model": run.model, "task": run.task,
        "seed": run.seed, "train_length": settings.train_length, "train_steps": result.steps,
        "train_accuracy": round(result.accuracy, 4), "reached_target": result.reached_target,
        "train_seconds": round(result.seconds, 2), "position_parameters": model.position_parameter_count(),
        "parameters": sum(parameter.numel() for parameter in model.parameters()),
        "examples": settings.eval_examples,
    }
    rows = []
    for length in settings.eval_lengths:
        scores = score(model, run.task, length, num_examples=settings.eval_examples, seed=run.seed,
                       num_symbols=settings.num_symbols, device=device)
        rows.append({**common, "length": length, "accuracy": scores.exact_match,
                     "token_accuracy": round(scores.token_accuracy, 6),
                     "in_training_range": settings.min_train_length <= length <= settings.train_length})
    if job.model_folder is not None:  # saved before the result, which marks the run as done
        torch.save(model.state_dict(), model_path(job.model_folder, run))
    return rows


def _check_resumable(out_dir: Path, settings: LengthGeneralizationSettings, resume: bool) -> None:
    """Keep ``out_dir``'s saved runs only if they were made with these settings (and ``resume`` is set)."""
    path = out_dir / "settings.json"
    record = _settings_record(settings)
    if resume and path.exists():
        saved = _settings_record(saved_settings(out_dir))  # a field added since takes its default
        changed = sorted(name for name in set(saved) | set(record) if saved.get(name) != record.get(name))
        if changed:
            raise ValueError(f"{out_dir} holds runs made with other settings (they differ in {changed}); "
                             f"use another --out, or --restart to discard them")
    elif not resume:
        shutil.rmtree(out_dir / sweep.RUNS_FOLDER, ignore_errors=True)
        (out_dir / "provenance.json").unlink(missing_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")


def run_length_generalization(
    settings: LengthGeneralizationSettings = QUICK_SETTINGS,
    *,
    out_dir: str | Path,
    device: torch.device | str = "cpu",
    progress: bool = True,
    verbose: bool = True,
    plots: bool = True,
    jobs: int = 1,
    threads: int = 1,
    resume: bool = True,
    save_models: bool = False,
    command: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Run the grid of ``settings``; write ``out_dir/results.csv`` (and the plots); return the rows.

    Each run is saved in ``out_dir/runs/`` as it finishes (:mod:`posenc_ref.lab.sweep`): called again with the
    same settings after an interruption, the grid continues where it stopped. ``out_dir/settings.json`` holds
    the settings and ``out_dir/provenance.json`` the command, versions, commit, machine and wall time.

    Args:
        settings: the grid and budget (:data:`~posenc_ref.lab.settings.QUICK_SETTINGS`,
            :data:`~posenc_ref.lab.settings.FULL_SETTINGS` or your own).
        out_dir: created if missing.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``.
        progress: a progress bar of runs done and left, with the estimated time to go (on stderr); with
            ``jobs == 1`` also one bar per training run.
        verbose: one line per training run on stdout.
        plots: also write ``out_dir/<task>_<model>.png``.
        jobs: worker processes (each run depends on its seed only, so the results do not depend on ``jobs``).
        threads: torch threads of each worker process.
        resume: keep the runs saved in ``out_dir`` (made with the same settings); False starts afresh.
        save_models: also keep each trained model's weights, ``out_dir/runs/<key>.pt``
            (:func:`load_trained_model`).
        command: the command line recorded in the provenance (default: this process's).

    Returns:
        One dict per (position, randomized, model, task, seed, length) with the keys of
        :data:`~posenc_ref.lab.results.CSV_COLUMNS`, in the order of
        :meth:`~posenc_ref.lab.settings.LengthGeneralizationSettings.runs`.

    Raises:
        TypeError, ValueError: bad settings type or device; ``out_dir`` holds runs of other settings.
    """
    if not isinstance(settings, LengthGeneralizationSettings):
        raise TypeError(f"settings must be a LengthGeneralizationSettings, got {type(settings).__name__}")
    device = resolve_device(device)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_resumable(out_dir, settings, resume)
    started = time.time()
    runs = settings.runs()
    version = sweep.code_version()
    computed = 0

    def record() -> None:
        sweep.provenance(out_dir, command=list(sys.argv if command is None else command),
                         settings=_settings_record(settings), device=str(device), jobs=jobs, threads=threads,
                         started=started, runs=len(runs), runs_this_invocation=computed, version=version)

    def report(job: _Job, run_rows: list[dict[str, Any]]) -> None:
        nonlocal computed
        computed += 1
        record()
        if verbose:
            first = run_rows[0]
            tqdm.write(f"{job.run.key}: {first['train_steps']:>5} steps, train exact match "
                       f"{first['train_accuracy']:.3f} ({first['train_seconds']:.1f} s)", file=sys.stdout)

    jobs_list = [_Job(settings, run, str(device), progress and jobs == 1, str(out_dir) if save_models else None)
                 for run in runs]
    results = sweep.run_sweep(jobs_list, _train_and_score, folder=out_dir, key=lambda job: job.run.key,
                              jobs=jobs, threads=threads, progress=progress, on_result=report)
    rows = [row for run_rows in results for row in run_rows]
    write_results(rows, out_dir / "results.csv")
    record()
    if plots:
        write_plots(rows, out_dir)
    return rows
