"""The committed context-extension study (book/data/context-extension/): every rule, factor and seed.

Data produced by ``python -m posenc_ref.experiments context-extension`` (``python -m posenc_ref.lab
context-extension`` now) from the trained decoders of the committed length-generalization study (the
command and settings are in provenance.json).
"""

import csv
import itertools
import json
from pathlib import Path

import pytest
from study_data import COMMANDS, check_provenance

from posenc_ref.lab.extension import EXTENSION_COLUMNS, EXTENSION_METHODS, ExtensionSettings
from posenc_ref.lab.settings import LengthGeneralizationSettings

DATA = Path(__file__).resolve().parents[1] / "book" / "data"
STUDY = DATA / "length-generalization"
EXTENSION = DATA / "context-extension"


@pytest.fixture(scope="module")
def settings():
    record = json.loads((STUDY / "settings.json").read_text())
    return LengthGeneralizationSettings(**{key: tuple(value) if isinstance(value, list) else value
                                           for key, value in record.items()})


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
    provenance = json.loads((EXTENSION / "provenance.json").read_text())
    assert provenance["command"].startswith(tuple(f"{command}context-extension" for command in COMMANDS))
    check_provenance(provenance)
    assert provenance["settings"]["length_generalization"] == json.loads((STUDY / "settings.json").read_text())
    assert provenance["settings"]["extension"]["finetune_steps"] == extension.finetune_steps
