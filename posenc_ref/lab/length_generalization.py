r"""``python -m posenc_ref.lab.length_generalization length-generalization``: train short, test long, for every position kind.

Usage::

    python -m posenc_ref.lab.length_generalization length-generalization [--quick] [--device cpu|cuda|auto] --out DIR
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
:data:`CSV_COLUMNS`, and ``DIR/<task>_<model>.png``, accuracy against length per position kind (mean over
seeds).

The learned table is given ``max_len`` = the longest sequence evaluated, so that it is defined at every
evaluation length; rows beyond the longest training sequence are never trained (chapter 3), and that is
exactly what the experiment shows for them. Shaw's clipping distance and T5's bucket range are scaled to the
training length L, so that every one of their rows is trained, as in the papers, whose ranges lie inside
their training inputs (:meth:`LengthGeneralizationSettings.position_options`). RoPE keeps base 10000.

``--quick`` (:data:`QUICK_SETTINGS`) is the live run of the book build: the study's decoders on two tasks
(``bites`` and ``recall``) with its first three seeds. The default (:data:`FULL_SETTINGS`) is the study
committed with the book: every position kind's decoder on copy, who-bites-whom and associative recall, ten
seeds, trained on sizes 3..L (L = 8), scored up to 3L, d = 32, up to 4000 steps with a cosine schedule; about
an hour on 2 CPU cores with ``--jobs 2``. ``--randomized-study`` (:data:`RANDOMIZED_SETTINGS`) runs the remedy:
the absolute and rotary decoders with and without randomized positions on two tasks.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from posenc_ref._checks import check_choice, check_int, check_positive_int
from posenc_ref.attention import BACKENDS, POSITION_KINDS
from posenc_ref.lab import sweep
from posenc_ref.lab.models import MODEL_KINDS, TinyTransformer, build_model
from posenc_ref.lab.tasks import TASKS, vocabulary_size
from posenc_ref.lab.train import TrainSettings, resolve_device, score, train_model

CSV_COLUMNS: tuple[str, ...] = (
    "position", "randomized", "model", "task", "length", "accuracy", "token_accuracy", "seed", "train_length",
    "in_training_range", "train_steps", "train_accuracy", "reached_target", "train_seconds",
    "position_parameters", "parameters", "examples",
)
"""The columns of ``results.csv``: the first eight name the measurement (``accuracy`` is the exact match,
``token_accuracy`` the share of right answer tokens, :func:`posenc_ref.lab.train.score`); the rest describe its
training run. ``randomized`` is True for a run with randomized positions
(:attr:`LengthGeneralizationSettings.randomized`). ``train_accuracy`` is the lowest held-out exact match over
the training lengths at the last check, and ``reached_target`` whether the stopping rule was met; whether a run
*fitted* is read from its scoring rows inside the training range (:func:`fitted`)."""


def kind_label(row: dict[str, Any]) -> str:
    """The name of a row's position kind in tables and plots: ``"rope"``, or ``"rope+random"`` when randomized."""
    return f"{row['position']}+random" if _as_bool(row.get("randomized", False)) else row["position"]


def fitted(run_rows: Sequence[dict[str, Any]], target_accuracy: float) -> bool:
    """Whether one run fitted its training range: an exact match of at least ``target_accuracy`` on the
    scoring examples at *every* training length (its rows with ``in_training_range``).

    Raises:
        ValueError: ``run_rows`` hold no row inside the training range, or rows of more than one run.
    """
    runs = {(row["task"], row["model"], kind_label(row), row["seed"]) for row in run_rows}
    if len(runs) != 1:
        raise ValueError(f"run_rows must hold the rows of one run, got {len(runs)} runs")
    inside = [row["accuracy"] for row in run_rows if _as_bool(row["in_training_range"])]
    if not inside:
        raise ValueError("run_rows hold no row inside the training range")
    return min(inside) >= target_accuracy


def _as_bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value) == "True"


def _check_names(name: str, values: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str) or not values:
        raise ValueError(f"{name} must be a non-empty sequence of names from {list(allowed)}, got {values!r}")
    for value in values:
        check_choice(name, value, allowed)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat a name, got {list(values)}")
    return tuple(values)


@dataclass(frozen=True)
class Run:
    """One training run of the grid: a model of one kind on one task, with one seed."""

    task: str
    model: str
    position: str
    randomized: bool
    seed: int

    @property
    def key(self) -> str:
        """The run's file name in ``runs/``: ``bites-decoder-rope+random-seed2``."""
        kind = f"{self.position}+random" if self.randomized else self.position
        return f"{self.task}-{self.model}-{kind}-seed{self.seed}"


@dataclass(frozen=True)
class LengthGeneralizationSettings:
    """The grid and the training budget of one length-generalization experiment.

    Attributes:
        positions: position kinds, names from :data:`posenc_ref.attention.POSITION_KINDS`.
        models: ``"encoder"`` and/or ``"decoder"``.
        tasks: names from :data:`posenc_ref.lab.tasks.TASKS`.
        train_length: L, the largest input size seen in training.
        min_train_length: the smallest input size seen in training; every size from it to L is trained on,
            checked while training and scored, and a run *fitted* when it scores the target at all of them.
        eval_lengths: input sizes scored (ascending), from ``min_train_length``; usually up to 3L.
        seeds: one run per seed (model initialisation and training data).
        d_model, num_heads, num_layers: the size of every model.
        max_steps, batch_size, learning_rate, target_accuracy: the training budget and stopping rule.
        eval_examples: examples scored per length.
        num_symbols: content symbols (``recall`` needs at least the largest evaluation length).
        backend: attention backend of every layer, ``"reference"`` or ``"fast"`` (same results).
        randomized: position kinds that are also trained with randomized positions (Ruoss et al., 2023):
            kinds that take explicit positions (absolute and rotary), each also in ``positions``.
        random_range: the range M of those positions as a multiple (>= 1) of the longest sequence evaluated.
    """

    positions: tuple[str, ...] = tuple(POSITION_KINDS)
    models: tuple[str, ...] = tuple(MODEL_KINDS)
    tasks: tuple[str, ...] = ("bites",)
    train_length: int = 8
    min_train_length: int = 3
    eval_lengths: tuple[int, ...] = tuple(range(3, 25))
    seeds: tuple[int, ...] = (0,)
    d_model: int = 32
    num_heads: int = 4
    num_layers: int = 2
    max_steps: int = 800
    batch_size: int = 64
    learning_rate: float = 3e-3
    schedule: str = "constant"
    target_accuracy: float = 0.99
    eval_examples: int = 512
    num_symbols: int = 16
    backend: str = "fast"
    randomized: tuple[str, ...] = ()
    random_range: float = 1.0

    def __post_init__(self) -> None:
        _check_names("positions", self.positions, tuple(POSITION_KINDS))
        _check_names("models", self.models, tuple(MODEL_KINDS))
        _check_names("tasks", self.tasks, tuple(TASKS))
        check_positive_int("train_length", self.train_length)
        if not self.eval_lengths or list(self.eval_lengths) != sorted(set(self.eval_lengths)):
            raise ValueError(f"eval_lengths must be a non-empty ascending sequence without repeats, "
                             f"got {self.eval_lengths!r}")
        check_int("min_train_length", self.min_train_length, minimum=1)
        if self.min_train_length > self.train_length:
            raise ValueError(f"min_train_length must be at most train_length={self.train_length}, "
                             f"got {self.min_train_length}")
        missing = [length for length in range(self.min_train_length, self.train_length + 1)
                   if length not in self.eval_lengths]
        if missing:
            raise ValueError(f"eval_lengths must include every training length "
                             f"{self.min_train_length}..{self.train_length}; {missing} are missing")
        for task in self.tasks:
            for length in (self.min_train_length, self.train_length, *self.eval_lengths):
                TASKS[task].check_length(length, self.num_symbols)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be a non-empty sequence of distinct ints, got {self.seeds!r}")
        for seed in self.seeds:
            check_int("seeds", seed, minimum=0)
        check_choice("backend", self.backend, BACKENDS)
        if isinstance(self.random_range, bool) or not isinstance(self.random_range, (int, float)) \
                or not self.random_range >= 1:
            raise ValueError(f"random_range must be a real number >= 1, got {self.random_range!r}")
        if self.randomized:
            takes = tuple(name for name, kind in POSITION_KINDS.items() if kind.takes_positions and name != "none")
            _check_names("randomized", self.randomized, takes)
            missing = [name for name in self.randomized if name not in self.positions]
            if missing:
                raise ValueError(f"randomized kinds must also be in positions; {missing} are not in "
                                 f"{list(self.positions)}")
        self.train_settings(self.tasks[0])  # checks the training budget now, not after the first run

    def train_settings(self, task: str) -> TrainSettings:
        """The :class:`~posenc_ref.lab.train.TrainSettings` of every run on ``task``."""
        return TrainSettings(
            min_length=self.min_train_length, max_length=self.train_length, max_steps=self.max_steps,
            batch_size=self.batch_size, learning_rate=self.learning_rate, schedule=self.schedule,
            target_accuracy=self.target_accuracy, num_symbols=self.num_symbols,
        )

    @property
    def random_positions(self) -> int:
        """M, the range of randomized positions: ``random_range`` times the longest sequence evaluated on any
        task (rounded up), so that every evaluated input fits in it."""
        longest = max(TASKS[task].sequence_length(max(self.eval_lengths)) for task in self.tasks)
        return math.ceil(self.random_range * longest)

    def runs(self) -> list[Run]:
        """Every run of the grid, in grid order: task, model, position kind (each randomized variant right
        after its kind), seed."""
        return [Run(task, model, position, randomized, seed)
                for task in self.tasks for model in self.models for position in self.positions
                for randomized in ((False, True) if position in self.randomized else (False,))
                for seed in self.seeds]

    def position_options(self, position: str, model: str, task: str, *, randomized: bool = False) -> dict[str, Any]:
        """Options of the position kind, chosen so that every table row is defined where it is used.

        - ``"learned"``: ``max_len`` = the longest sequence evaluated (rows past the training length exist
          but are never trained), or :attr:`random_positions` rows for a randomized run;
        - ``"shaw"``: clipping distance ``k = L``: every offset row is reached in training;
        - ``"t5"``: 8 buckets per direction (4 exact, 4 logarithmic) and ``max_distance = L``: every bucket
          is reached in training, as in T5, whose ``max_distance`` of 128 lies inside its training inputs;
        - the other kinds: the registry's defaults.
        """
        if position == "learned":
            return {"max_len": self.random_positions if randomized
                    else TASKS[task].sequence_length(max(self.eval_lengths))}
        if position == "shaw":
            return {"max_distance": self.train_length}
        if position == "t5":  # T5's own decoder uses one-way buckets (bidirectional=False, models.py)
            return {"num_buckets": 16 if model == "encoder" else 8, "max_distance": self.train_length}
        return {}


FULL_SETTINGS = LengthGeneralizationSettings(
    positions=tuple(POSITION_KINDS), models=("decoder",), tasks=("copy", "bites", "recall"), train_length=8,
    min_train_length=3, eval_lengths=tuple(range(3, 25)), seeds=tuple(range(10)), d_model=32, num_heads=4,
    num_layers=2, max_steps=4000, batch_size=64, learning_rate=3e-3, schedule="cosine", target_accuracy=0.99,
    eval_examples=512, num_symbols=32, backend="fast", randomized=(), random_range=1.0,
)
"""The study committed with the book (``book/data/length-generalization/``): the decoders of every kind on copy,
who-bites-whom and associative recall, ten seeds, trained on sizes 3..L with L = 8 and scored up to 3L, up to
4000 steps with a cosine schedule, stopping once the held-out exact match reaches 0.99 at every training size
on three checks in a row (:func:`posenc_ref.lab.train.train_model`). Sized for a 2-core CPU: about an hour with
``--jobs 2``. Every field is written out, so that the defaults can change alone."""

QUICK_SETTINGS = dataclasses.replace(FULL_SETTINGS, tasks=("bites", "recall"), seeds=(0, 1, 2))
"""``--quick``, the live run of the book build: the committed study (:data:`FULL_SETTINGS`) on who-bites-whom and
associative recall (where recency is no shortcut: the pair asked for stands anywhere in the input), with its
first three seeds. Every other setting is the study's, so each live run recomputes one committed run: on the
machine and code of the study it gives the same numbers, and elsewhere the chapter measures how far they move.
About eight minutes on 2 idle CPU cores with ``jobs=2`` (the book trains it one seed per cell, keeping every
finished run in ``_build``: :func:`settings_digest`)."""

RANDOMIZED_SETTINGS = dataclasses.replace(
    FULL_SETTINGS, positions=("sinusoidal", "learned", "rope"), models=("decoder",), tasks=("bites", "copy"),
    randomized=("sinusoidal", "learned", "rope"),
)
"""The remedy committed with the book (``book/data/randomized-positions/``): the absolute and rotary decoders
of the full study, with and without randomized positions (Ruoss et al., 2023), on who-bites-whom and copy;
``--randomized-study`` on the command line."""

POSITION_FREE_ENCODER_STEPS = 500
"""The budget of the position-free encoder: it cannot fit any task (its answer slots are one function of the
same multiset of tokens, chapter 1), so it trains this many steps only, enough to show where it stays."""


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


def _settings_record(settings: LengthGeneralizationSettings) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(settings)))


def settings_digest(settings: LengthGeneralizationSettings, *, code: bool = True) -> str:
    """A short name for ``settings``: the first 12 hexadecimal digits of the SHA-256 of their record.

    With ``code`` (the default) the digest also covers the source files of ``posenc_ref`` and the versions of
    Python and torch, which decide what a run computes as much as its settings do. A folder of saved runs
    named by it (``root / settings_digest(settings)``) is therefore never reused by other settings or other
    code: resuming from it (:func:`run_length_generalization` with ``resume=True``) continues only runs that
    these settings and this code would compute again identically. The book's live run keeps its runs so.

    Raises:
        TypeError: ``settings`` is not a :class:`LengthGeneralizationSettings`.
    """
    if not isinstance(settings, LengthGeneralizationSettings):
        raise TypeError(f"settings must be a LengthGeneralizationSettings, got {type(settings).__name__}")
    digest = hashlib.sha256(json.dumps(_settings_record(settings), sort_keys=True).encode())
    if code:
        digest.update(f"python {sys.version.split()[0]} torch {torch.__version__}".encode())
        package = Path(__file__).resolve().parents[1]  # posenc_ref, the whole package, not only its lab
        for path in sorted(package.rglob("*.py")):  # sorted: the same digest whatever the file system's order
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _check_resumable(out_dir: Path, settings: LengthGeneralizationSettings, resume: bool) -> None:
    """Keep ``out_dir``'s saved runs only if they were made with these settings (and ``resume`` is set)."""
    path = out_dir / "settings.json"
    record = _settings_record(settings)
    if resume and path.exists():
        saved = json.loads(path.read_text())
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
        settings: the grid and budget (:data:`QUICK_SETTINGS`, :data:`FULL_SETTINGS` or your own).
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
        One dict per (position, randomized, model, task, seed, length) with the keys of :data:`CSV_COLUMNS`,
        in the order of :meth:`LengthGeneralizationSettings.runs`.

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


_INTEGER_COLUMNS = ("length", "seed", "train_length", "train_steps", "position_parameters", "parameters",
                    "examples")
_FLOAT_COLUMNS = ("accuracy", "token_accuracy", "train_accuracy", "train_seconds")
_BOOL_COLUMNS = ("randomized", "in_training_range", "reached_target")


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``results.csv`` written by :func:`write_results`, with their ints, floats and bools.

    Raises:
        ValueError: the file's header is not :data:`CSV_COLUMNS`.
    """
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        if tuple(reader.fieldnames or ()) != CSV_COLUMNS:
            raise ValueError(f"{path} has columns {reader.fieldnames}, expected {list(CSV_COLUMNS)}")
        rows = list(reader)
    for row in rows:
        for column in _INTEGER_COLUMNS:
            row[column] = int(row[column])
        for column in _FLOAT_COLUMNS:
            row[column] = float(row[column])
        for column in _BOOL_COLUMNS:
            row[column] = _as_bool(row[column])
    return rows


def write_results(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Write ``rows`` to a CSV file with the columns of :data:`CSV_COLUMNS`."""
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row[column] for column in CSV_COLUMNS})


def mean_accuracy(rows: Sequence[dict[str, Any]], *, model: str, task: str) -> dict[str, dict[int, float]]:
    """``{position: {length: accuracy averaged over seeds}}`` for one model kind and task, in grid order."""
    grouped: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        if row["model"] == model and row["task"] == task:
            grouped.setdefault(kind_label(row), {}).setdefault(row["length"], []).append(row["accuracy"])
    if not grouped:
        raise ValueError(f"rows hold no results for model={model!r}, task={task!r}")
    return {position: {length: statistics.fmean(values) for length, values in by_length.items()}
            for position, by_length in grouped.items()}


def format_table(rows: Sequence[dict[str, Any]], *, lengths: Sequence[int] | None = None) -> str:
    """A Markdown table: one line per (task, model, position), one column per length (mean over seeds).

    ``lengths`` picks the columns (default: every evaluated length).

    Raises:
        ValueError: ``rows`` is empty, or ``lengths`` names a length that was not evaluated.
    """
    if not rows:
        raise ValueError("rows must not be empty")
    evaluated = sorted({row["length"] for row in rows})
    lengths = evaluated if lengths is None else list(lengths)
    missing = [length for length in lengths if length not in evaluated]
    if missing:
        raise ValueError(f"lengths {missing} were not evaluated; evaluated lengths are {evaluated}")
    train_length = rows[0]["train_length"]
    header = ["task", "model", "position"] + [
        f"{length}" + ("*" if length <= train_length else "") for length in lengths]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    seen: list[tuple[str, str]] = []
    for row in rows:
        if (row["task"], row["model"]) not in seen:
            seen.append((row["task"], row["model"]))
    for task, model in seen:
        for position, by_length in mean_accuracy(rows, model=model, task=task).items():
            cells = [task, model, position] + [f"{by_length[length]:.2f}" for length in lengths]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_plots(rows: Sequence[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """One figure per (task, model): accuracy against length, a curve per position kind; returns the paths."""
    import matplotlib.pyplot as plt

    from posenc_ref import plots

    paths = []
    pairs = dict.fromkeys((row["task"], row["model"]) for row in rows)
    for task, model in pairs:
        accuracy = mean_accuracy(rows, model=model, task=task)
        lengths = sorted(next(iter(accuracy.values())))
        curves = {position: [by_length[length] for length in lengths] for position, by_length in accuracy.items()}
        train_length = rows[0]["train_length"]
        figure = plots.plot_curves(lengths, curves, xlabel="input length", ylabel="exact match",
                                   title=f"{task}, {model}", boundary=train_length + 0.5,
                                   boundary_label=f"longest training input (L = {train_length})", markers=True)
        path = Path(out_dir) / f"{task}_{model}.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        paths.append(path)
    return paths


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m posenc_ref.lab.length_generalization",
                                     description=__doc__.splitlines()[0].split(": ", 1)[-1])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("length-generalization", help="train short, test long (see the module doc)")
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
    return parser


def saved_settings(out_dir: str | Path) -> LengthGeneralizationSettings:
    """The settings of the sweep saved in ``out_dir/settings.json``.

    Raises:
        FileNotFoundError: ``out_dir`` holds no sweep.
    """
    path = Path(out_dir) / "settings.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {out_dir} is not the output folder of a sweep")
    record = json.loads(path.read_text())
    return LengthGeneralizationSettings(**{name: tuple(value) if isinstance(value, list) else value
                                           for name, value in record.items()})


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
    from posenc_ref.lab.extension import ExtensionSettings, run_context_extension

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
                                     command=["python", "-m", "posenc_ref.lab.length_generalization", *(
                                         sys.argv[1:] if argv is None else argv)])
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
                                         command=["python", "-m", "posenc_ref.lab.length_generalization", *(
                                             sys.argv[1:] if argv is None else argv)])
    except ValueError as error:
        parser.error(str(error))
    print()
    print(format_table(rows))
    print(f"\nwrote {Path(arguments.out) / 'results.csv'} ({len(rows)} rows) and the plots "
          f"in {time.perf_counter() - begin:.0f} s")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
