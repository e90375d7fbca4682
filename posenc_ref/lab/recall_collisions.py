r"""Where associative recall fails: the examples whose asked key is also one of the values.

Command line::

    python -m posenc_ref.lab recall-collisions --out DIR [--positions A,B] [--seeds N] [--jobs N] [--no-progress]

The study's ``recall`` (:mod:`posenc_ref.lab.tasks`) draws its values from the same symbols as its keys, so in
some examples the asked key also stands as a value: for ``n`` pairs over ``s`` symbols, with probability

.. math:: 1 - (1 - 1/s)^n

(0.22 at n = 8 over 32 symbols). The asked symbol then stands twice before the query, and only the parity of its
place tells the key from the value: odd distance to the query for a key, even for a value.

:func:`run_recall_collisions` trains the study's recall decoders again (:data:`FULL_SETTINGS`: the same
settings and seeds, so on the study's machine the same models) and scores each at every training size on the
study's own examples (the stream of :func:`posenc_ref.lab.train.score`), split in two: the examples whose
asked key is also a value (``collision``) and the others (``clean``). Each run is saved as it finishes
(:mod:`posenc_ref.lab.sweep`: ``DIR/runs/``, resumable); ``DIR/collisions.csv`` holds one row per (kind, seed,
size, split) with :data:`COLUMNS`, and ``DIR/provenance.json`` the command, versions, commit and machine. The
examples' correct answers summed over both splits, divided by the examples, are the study's exact match at that
size: a check that these are the study's models.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from posenc_ref._checks import check_positive_int
from posenc_ref.lab import sweep
from posenc_ref.lab.length_generalization import build_run_model
from posenc_ref.lab.models import TinyTransformer
from posenc_ref.lab.results import write_results
from posenc_ref.lab.settings import FULL_SETTINGS, LengthGeneralizationSettings, Run, _settings_record
from posenc_ref.lab.tasks import make_batch
from posenc_ref.lab.train import answer_logits, correct_tokens, train_model

COLUMNS = ("position", "seed", "length", "split", "examples", "correct", "exact_match", "train_steps",
           "reached_target")
SPLITS = ("clean", "collision")


def collision_settings(positions: Sequence[str], seeds: Sequence[int]) -> LengthGeneralizationSettings:
    """The study's settings, on ``recall`` only, for ``positions`` and ``seeds``."""
    return dataclasses.replace(FULL_SETTINGS, tasks=("recall",), positions=tuple(positions), seeds=tuple(seeds))


def asked_key_is_a_value(prompts: torch.Tensor, length: int) -> torch.Tensor:
    """For recall prompts ``(batch, 2 * length + 2)``, ``k_1 v_1 ... k_n v_n SEP k_q``: whether ``k_q`` is one of
    the values, ``(batch,)`` bool."""
    values = prompts[:, 1:2 * length:2]  # (batch, length)
    return (values == prompts[:, -1:]).any(dim=1)  # (batch,)


@torch.no_grad()
def split_scores(model: TinyTransformer, length: int, *, num_examples: int, seed: int, num_symbols: int,
                 batch_size: int = 256) -> dict[str, tuple[int, int]]:
    """``{split: (correct, examples)}`` of ``model`` on the examples :func:`~posenc_ref.lab.train.score` draws for
    recall at ``length`` (the same stream, hence the same examples), split by :func:`asked_key_is_a_value`."""
    check_positive_int("num_examples", num_examples)
    rng = random.Random(f"evaluate/{seed}/recall/{length}")
    model.eval()
    counts = {split: [0, 0] for split in SPLITS}
    remaining = num_examples
    while remaining:
        size = min(batch_size, remaining)
        batch = make_batch("recall", length, size, rng=rng, num_symbols=num_symbols)
        right = correct_tokens(answer_logits(model, batch), batch.answers).all(dim=1)  # (size,)
        collision = asked_key_is_a_value(batch.prompts, length)  # (size,)
        for split, mask in (("clean", ~collision), ("collision", collision)):
            counts[split][0] += int((right & mask).sum())
            counts[split][1] += int(mask.sum())
        remaining -= size
    return {split: (correct, examples) for split, (correct, examples) in counts.items()}


def _train_and_split(job: tuple[LengthGeneralizationSettings, Run]) -> list[dict[str, Any]]:
    settings, run = job
    model = build_run_model(settings, run)
    result = train_model(model, "recall", settings.train_settings("recall"), seed=run.seed,
                         device=torch.device("cpu"), progress=False)
    rows = []
    for length in range(settings.min_train_length, settings.train_length + 1):
        scores = split_scores(model, length, num_examples=settings.eval_examples, seed=run.seed,
                              num_symbols=settings.num_symbols)
        for split, (correct, examples) in scores.items():
            rows.append({"position": run.position, "seed": run.seed, "length": length, "split": split,
                         "examples": examples, "correct": correct,
                         "exact_match": round(correct / examples, 6) if examples else None,
                         "train_steps": result.steps, "reached_target": result.reached_target})
    return rows


def run_recall_collisions(out_dir: str | Path, *, positions: Sequence[str] = FULL_SETTINGS.positions,
                          seeds: Sequence[int] = FULL_SETTINGS.seeds, jobs: int = 2, progress: bool = True,
                          command: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Train and split-score every (kind, seed) of ``positions`` x ``seeds`` on the CPU, one thread per job; write
    ``out_dir/collisions.csv`` and ``out_dir/provenance.json``; return the rows.

    Raises:
        ValueError: a kind or seed the study's settings do not allow, or ``jobs`` < 1.
    """
    check_positive_int("jobs", jobs)
    settings = collision_settings(positions, seeds)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started, version, runs = time.time(), sweep.code_version(), settings.runs()
    computed = 0

    def note_provenance() -> None:
        sweep.provenance(out_dir, command=list(sys.argv if command is None else command),
                         settings=_settings_record(settings), device="cpu", jobs=jobs, threads=1, started=started,
                         runs=len(runs), runs_this_invocation=computed, version=version)

    def count(job: Any, result: Any) -> None:
        nonlocal computed
        computed += 1
        note_provenance()  # after every run, so an interrupted invocation keeps its time

    results = sweep.run_sweep([(settings, run) for run in runs], _train_and_split, folder=out_dir,
                              key=lambda job: job[1].key, jobs=jobs, threads=1, progress=progress, on_result=count)
    rows = [row for run_rows in results for row in run_rows]
    write_results(rows, out_dir / "collisions.csv", COLUMNS)
    note_provenance()
    return rows
