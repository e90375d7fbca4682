"""The committed recall-collisions data (book/data/recall-collisions/): the study's recall decoders, scored apart
on the examples whose asked key is also one of the values.

Data produced by ``python -m posenc_ref.lab recall-collisions``. Read here with the csv module alone, against the
study's own results (book/data/length-generalization/results.csv): every (kind, seed) of the study's recall
decoders is there at every training size, the two splits add up to the study's examples and to its exact match
(the same models, trained again on the study's machine), each seed's examples split alike for every kind (one
stream of examples per seed and size), and the share of collisions is the one the draw gives.
"""

import csv
import json
import math
from collections import defaultdict

from study_data import DATA, check_provenance

FOLDER = DATA / "recall-collisions"
STUDY = DATA / "length-generalization"
COLUMNS = ["position", "seed", "length", "split", "examples", "correct", "exact_match", "train_steps",
           "reached_target"]


def _rows(path):
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames), list(reader)


def _study_recall():
    _, rows = _rows(STUDY / "results.csv")
    return {(row["position"], int(row["seed"]), int(row["length"])): row for row in rows
            if row["task"] == "recall" and row["model"] == "decoder" and row["randomized"] == "False"}


def _collisions():
    columns, rows = _rows(FOLDER / "collisions.csv")
    assert columns == COLUMNS
    splits = defaultdict(dict)
    for row in rows:
        key = (row["position"], int(row["seed"]), int(row["length"]))
        assert row["split"] not in splits[key], (key, row["split"])
        splits[key][row["split"]] = row
    return splits


def test_every_recall_run_of_the_study_is_there_at_every_training_size_with_both_splits():
    study = _study_recall()
    settings = json.loads((STUDY / "settings.json").read_text())
    sizes = range(settings["min_train_length"], settings["train_length"] + 1)
    expected = {(position, seed, length) for (position, seed, _) in study for length in sizes}
    splits = _collisions()
    assert set(splits) == expected
    assert all(set(parts) == {"clean", "collision"} for parts in splits.values())


def test_the_two_splits_add_up_to_the_studys_examples_exact_match_and_training():
    study = _study_recall()
    for key, parts in _collisions().items():
        examples = sum(int(row["examples"]) for row in parts.values())
        correct = sum(int(row["correct"]) for row in parts.values())
        row = study[key]
        assert examples == int(row["examples"]), key
        assert correct == round(float(row["accuracy"]) * examples), key  # the same models, on the same examples
        for part in parts.values():
            assert part["train_steps"] == row["train_steps"] and part["reached_target"] == row["reached_target"], key
            assert float(part["exact_match"]) == round(int(part["correct"]) / int(part["examples"]), 6), key


def test_each_seeds_examples_split_alike_for_every_kind_and_collide_as_often_as_the_draw_gives():
    splits = _collisions()
    by_draw = defaultdict(set)
    for (position, seed, length), parts in splits.items():
        by_draw[seed, length].add(int(parts["collision"]["examples"]))
    assert all(len(counts) == 1 for counts in by_draw.values()), by_draw  # one stream per seed and size
    symbols = json.loads((STUDY / "settings.json").read_text())["num_symbols"]
    for length in sorted({length for _, length in by_draw}):
        seeds = [seed for seed, size in by_draw if size == length]
        collided = sum(next(iter(by_draw[seed, length])) for seed in seeds)
        total = sum(int(splits[key]["clean"]["examples"]) + int(splits[key]["collision"]["examples"])
                    for key in splits if key[2] == length and key[0] == "none")
        # n pairs, the asked key among n values drawn uniformly from the symbols: 1 - (1 - 1/s)^n.
        share = 1 - (1 - 1 / symbols) ** length
        spread = math.sqrt(share * (1 - share) / total)
        assert abs(collided / total - share) < 4 * spread, (length, collided / total, share)


def test_the_provenance_names_the_command_commit_and_machine():
    provenance = json.loads((FOLDER / "provenance.json").read_text())
    assert provenance["command"].startswith("python -m posenc_ref.lab recall-collisions ")
    check_provenance(provenance)
    assert provenance["runs"] == len({key[:2] for key in _collisions()})
