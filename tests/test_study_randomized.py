"""The committed randomized-positions study (book/data/randomized-positions/): complete, traceable, fit checked.

Data produced by ``python -m posenc_ref.experiments length-generalization --randomized-study`` (the command
is in provenance.json; it is ``python -m posenc_ref.lab`` now): the absolute and rotary decoders with and
without randomized positions.
"""

import csv
import json
from pathlib import Path

from posenc_ref.lab.results import CSV_COLUMNS
from posenc_ref.lab.settings import RANDOMIZED_SETTINGS, LengthGeneralizationSettings

REMEDY = Path(__file__).resolve().parents[1] / "book" / "data" / "randomized-positions"


def test_the_remedy_is_complete_and_the_fit_criterion_was_applied():
    provenance = json.loads((REMEDY / "provenance.json").read_text())
    assert provenance["command"].startswith("python -m posenc_ref.experiments length-generalization")
    assert "--randomized-study" in provenance["command"] and len(provenance["commit"]) == 40
    settings = LengthGeneralizationSettings(**{key: tuple(value) if isinstance(value, list) else value
                                               for key, value in provenance["settings"].items()})
    assert settings == RANDOMIZED_SETTINGS
    with open(REMEDY / "results.csv", newline="") as file:
        reader = csv.DictReader(file)
        assert reader.fieldnames == list(CSV_COLUMNS)
        rows = list(reader)
    keys = [(row["task"], row["model"], row["position"], row["randomized"], row["seed"], row["length"])
            for row in rows]
    expected = {(run.task, run.model, run.position, str(run.randomized), str(run.seed), str(length))
                for run in settings.runs() for length in settings.eval_lengths}
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert {row["randomized"] for row in rows} == {"True", "False"}
    for row in rows:
        reached = row["reached_target"] == "True"
        assert reached == (float(row["train_accuracy"]) >= settings.target_accuracy)
        if not reached:
            assert int(row["train_steps"]) == settings.max_steps
