r"""The results of a length-generalization study: ``results.csv``, its rows, tables and plots.

One row per (position kind, randomized or not, model, task, seed, length), with the columns of
:data:`CSV_COLUMNS`; :func:`write_results` and :func:`read_results` write and read them, :func:`fitted` says
whether a run fitted its training range, :func:`mean_accuracy`, :func:`format_table` and :func:`write_plots`
average them over seeds.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CSV_COLUMNS: tuple[str, ...] = (
    "position", "randomized", "model", "task", "length", "accuracy", "token_accuracy", "seed", "train_length",
    "in_training_range", "train_steps", "train_accuracy", "reached_target", "train_seconds",
    "position_parameters", "parameters", "examples",
)
"""The columns of ``results.csv``: the first eight name the measurement (``accuracy`` is the exact match,
``token_accuracy`` the share of right answer tokens, :func:`posenc_ref.lab.train.score`); the rest describe its
training run. ``randomized`` is True for a run with randomized positions
(:attr:`~posenc_ref.lab.settings.LengthGeneralizationSettings.randomized`). ``train_accuracy`` is the lowest
held-out exact match over the training lengths at the last check, and ``reached_target`` whether the stopping
rule was met; whether a run *fitted* is read from its scoring rows inside the training range
(:func:`fitted`)."""


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


def write_results(rows: Sequence[dict[str, Any]], path: str | Path,
                  columns: Sequence[str] = CSV_COLUMNS) -> None:
    """Write ``rows`` to a CSV file with ``columns`` (default :data:`CSV_COLUMNS`), in that order."""
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row[column] for column in columns})


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
