"""The committed length-generalization study (book/data/length-generalization/): complete, traceable, fit checked.

These files are data produced by ``python -m posenc_ref.experiments`` (the command is in provenance.json;
it is ``python -m posenc_ref.lab`` now); the chapter plots them. The test checks their schema and that the grid
is complete: every task x model x kind x seed is present at every length, the fit criterion was applied to
every run (a run that did not fit had its whole budget).
"""

import csv
import json
from pathlib import Path

import pytest

from posenc_ref.attention import POSITION_KINDS
from posenc_ref.lab.results import CSV_COLUMNS
from posenc_ref.lab.settings import FULL_SETTINGS, POSITION_FREE_ENCODER_STEPS, LengthGeneralizationSettings
from posenc_ref.lab.tasks import TASKS

DATA = Path(__file__).resolve().parents[1] / "book" / "data"
STUDY = DATA / "length-generalization"


def read(name):
    with open(STUDY / name, newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def settings():
    record = json.loads((STUDY / "provenance.json").read_text())["settings"]
    return LengthGeneralizationSettings(**{key: tuple(value) if isinstance(value, list) else value
                                           for key, value in record.items()})


def test_the_study_is_the_full_setting_of_the_command(settings):
    assert settings == FULL_SETTINGS
    assert set(settings.tasks) == set(TASKS) and len(settings.seeds) >= 5
    assert set(settings.positions) == set(POSITION_KINDS) and set(settings.models) == {"encoder", "decoder"}
    provenance = json.loads((STUDY / "provenance.json").read_text())
    assert provenance["command"].startswith("python -m posenc_ref.experiments length-generalization")
    assert provenance["versions"]["torch"] and len(provenance["commit"]) == 40
    assert provenance["wall_seconds"] > 0 and provenance["invocations"]


def test_every_run_is_present_at_every_length(settings):
    rows = read("results.csv")
    with open(STUDY / "results.csv", newline="") as file:
        assert next(csv.reader(file)) == list(CSV_COLUMNS)
    keys = [(row["task"], row["model"], row["position"], row["randomized"], row["seed"], row["length"])
            for row in rows]
    expected = {(run.task, run.model, run.position, str(run.randomized), str(run.seed), str(length))
                for run in settings.runs() for length in settings.eval_lengths}
    assert len(keys) == len(set(keys)) and set(keys) == expected
    for row in rows:
        accuracy = float(row["accuracy"])
        assert 0.0 <= accuracy <= 1.0 and (accuracy * int(row["examples"])).is_integer()


def test_the_fit_criterion_holds_for_every_run(settings):
    """Reached means an exact match >= the target at L; a run that did not reach it had its whole budget (early
    stopping ends only runs that fitted), and the position-free encoder, which cannot fit, never does."""
    for row in read("results.csv"):
        name = f"{row['task']} {row['model']} {row['position']} seed {row['seed']}"
        reached = row["reached_target"] == "True"
        assert reached == (float(row["train_accuracy"]) >= settings.target_accuracy), name
        hopeless = row["position"] == "none" and row["model"] == "encoder"
        budget = min(settings.max_steps, POSITION_FREE_ENCODER_STEPS) if hopeless else settings.max_steps
        assert int(row["train_steps"]) <= budget, name
        if not reached:
            assert int(row["train_steps"]) == budget, f"{name} stopped before its budget without fitting"
        if hopeless:
            assert not reached, name
