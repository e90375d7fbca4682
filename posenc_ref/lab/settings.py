r"""The grid and training budget of the length-generalization study, and the settings the book runs.

:class:`LengthGeneralizationSettings` names one study: position kinds, model kinds, tasks, seeds, the training
lengths and the lengths scored, the model size and the training budget; :class:`Run` is one training run of
its grid. :data:`FULL_SETTINGS` is the study committed with the book, :data:`QUICK_SETTINGS` the book build's
live run and :data:`RANDOMIZED_SETTINGS` the randomized-positions remedy. :func:`settings_digest` names a
setting (and the code that runs it), :func:`saved_settings` reads back the settings of a sweep's folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc_ref._checks import check_choice, check_int, check_positive_int
from posenc_ref.attention import BACKENDS, POSITION_KINDS
from posenc_ref.lab.models import MODEL_KINDS
from posenc_ref.lab.tasks import TASKS
from posenc_ref.lab.train import TrainSettings


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
        warmup_steps: steps of the learning rate's linear warm-up from 0 to ``learning_rate``.
        eval_examples: examples scored per length.
        num_symbols: content symbols (``recall`` needs at least the largest evaluation length, ``lookup`` that
            plus :data:`~posenc_ref.lab.tasks.LOOKUP_VALUE_SYMBOLS`).
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
    warmup_steps: int = 50
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
            batch_size=self.batch_size, learning_rate=self.learning_rate, warmup_steps=self.warmup_steps,
            schedule=self.schedule,
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
    num_layers=2, max_steps=4000, batch_size=64, learning_rate=3e-3, warmup_steps=50, schedule="cosine",
    target_accuracy=0.99,
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


def _settings_record(settings: LengthGeneralizationSettings) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(settings)))


def settings_digest(settings: LengthGeneralizationSettings, *, code: bool = True) -> str:
    """A short name for ``settings``: the first 12 hexadecimal digits of the SHA-256 of their record.

    With ``code`` (the default) the digest also covers the source files of ``posenc_ref`` and the versions of
    Python and torch, which decide what a run computes as much as its settings do. A folder of saved runs
    named by it (``root / settings_digest(settings)``) is therefore never reused by other settings or other
    code: resuming from it (:func:`~posenc_ref.lab.length_generalization.run_length_generalization` with
    ``resume=True``) continues only runs that these settings and this code would compute again identically.
    The book's live run keeps its runs so.

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
