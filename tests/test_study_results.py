"""The committed length-generalization study (book/data/length-generalization/): complete, fitted, traceable.

These files are data produced by ``python -m posenc_ref.experiments`` (the command is in provenance.json);
the chapter plots them. The test checks their schema and that the grid is complete: every task x model x
kind x seed is present at every length, every model but the position-free encoder reached the fit criterion,
and the context-extension table covers every rule, factor and seed.
"""

import csv
import itertools
import json
from pathlib import Path

import pytest

from posenc_ref.attention import POSITION_KINDS
from posenc_ref.experiments import CSV_COLUMNS, FULL_SETTINGS, LengthGeneralizationSettings
from posenc_ref.extension import EXTENSION_COLUMNS, EXTENSION_METHODS, ExtensionSettings
from posenc_ref.tasks import TASKS

DATA = Path(__file__).resolve().parents[1] / "book" / "data"
STUDY = DATA / "length-generalization"
EXTENSION = DATA / "context-extension"


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


def test_every_model_that_can_fit_fitted_before_it_was_scored(settings):
    for row in read("results.csv"):
        hopeless = row["position"] == "none" and row["model"] == "encoder"
        if hopeless:
            assert float(row["train_accuracy"]) < settings.target_accuracy
        else:
            assert row["reached_target"] == "True", f"{row['task']} {row['model']} {row['position']} " \
                                                    f"randomized={row['randomized']} seed {row['seed']} did not fit"
            assert float(row["train_accuracy"]) >= settings.target_accuracy


def test_context_extension_covers_every_rule_factor_and_seed(settings):
    with open(EXTENSION / "extension.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    with open(EXTENSION / "extension.csv", newline="") as file:
        assert next(csv.reader(file)) == list(EXTENSION_COLUMNS)
    extension = ExtensionSettings()
    expected = set()
    for task, seed, factor, finetuned in itertools.product(settings.tasks, settings.seeds, extension.factors,
                                                          ("False", "True")):
        lengths = (settings.train_length, factor * settings.train_length)
        expected |= {(task, "rope", method, str(factor), finetuned, str(seed), str(length))
                     for method in EXTENSION_METHODS for length in lengths}
        expected |= {(task, kind, "none", str(factor), finetuned, str(seed), str(length))
                     for kind in extension.references for length in lengths}
    keys = [(row["task"], row["position"], row["method"], row["factor"], row["finetuned"], row["seed"],
             row["length"]) for row in rows]
    assert len(keys) == len(set(keys)) and set(keys) == expected
