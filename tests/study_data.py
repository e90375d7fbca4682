"""Shared checks of a committed sweep folder (book/data/<study>/): settings, provenance, a complete grid."""

import csv
import json
from pathlib import Path

from posenc_ref.lab.results import CSV_COLUMNS
from posenc_ref.lab.settings import LengthGeneralizationSettings

DATA = Path(__file__).resolve().parents[1] / "book" / "data"
# The lab's command line was `python -m posenc_ref.experiments` until it moved into the lab's own package; a
# study records the command as it was typed at its commit.
COMMANDS = ("python -m posenc_ref.experiments ", "python -m posenc_ref.lab ")


def saved(folder):
    """(settings, provenance, rows as strings) of a sweep folder."""
    provenance = json.loads((folder / "provenance.json").read_text())
    record = json.loads((folder / "settings.json").read_text())
    assert provenance["settings"] == record
    settings = LengthGeneralizationSettings(**{key: tuple(value) if isinstance(value, list) else value
                                               for key, value in record.items()})
    with open(folder / "results.csv", newline="") as file:
        reader = csv.DictReader(file)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        rows = list(reader)
    return settings, provenance, rows


def check_provenance(provenance):
    """Every invocation names its command, commit (clean), versions and machine with its instruction sets."""
    assert provenance["invocations"] and provenance["wall_seconds"] > 0
    for invocation in provenance["invocations"]:
        assert invocation["command"].startswith(COMMANDS), invocation["command"]
        assert len(invocation["commit"]) == 40 and invocation["uncommitted_changes"] is False
        assert invocation["versions"]["torch"] and invocation["versions"]["torch_git"]
        machine = invocation["machine"]
        assert machine["cpu"] and machine["cores"] >= 1 and machine["torch_cpu_capability"]
        assert isinstance(machine["cpu_flags"], list)


def check_grid(settings, rows):
    """Every run of the grid at every size once; scores are counts out of the examples; per-token accuracy is at
    least the exact match; the stopping rule and the budget agree with each run's record."""
    keys = [(row["task"], row["model"], row["position"], row["randomized"], row["seed"], row["length"])
            for row in rows]
    expected = {(run.task, run.model, run.position, str(run.randomized), str(run.seed), str(length))
                for run in settings.runs() for length in settings.eval_lengths}
    assert len(keys) == len(set(keys)) and set(keys) == expected
    for row in rows:
        name = f"{row['task']} {row['position']} random={row['randomized']} seed {row['seed']} n={row['length']}"
        exact, tokens = float(row["accuracy"]), float(row["token_accuracy"])
        assert 0.0 <= exact <= tokens + 5e-7 and tokens <= 1.0, name  # per-token accuracy is kept to 6 decimals
        assert (exact * int(row["examples"])).is_integer() and int(row["examples"]) == settings.eval_examples
        inside = settings.min_train_length <= int(row["length"]) <= settings.train_length
        assert row["in_training_range"] == str(inside), name
        reached, steps = row["reached_target"] == "True", int(row["train_steps"])
        assert steps <= settings.max_steps, name
        # The stopping rule: met only after `patience` passing checks; not met means the whole budget.
        assert steps == settings.max_steps or reached, f"{name} stopped before its budget without meeting the rule"
        if reached:
            assert float(row["train_accuracy"]) >= settings.target_accuracy, name
