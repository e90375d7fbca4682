"""posenc_ref.lab.recall_collisions: recall scored apart where the asked key is also a value."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest
import torch

from posenc_ref.lab import cli, recall_collisions
from posenc_ref.lab.length_generalization import build_run_model
from posenc_ref.lab.settings import FULL_SETTINGS, Run
from posenc_ref.lab.tasks import make_batch
from posenc_ref.lab.train import score


def test_the_asked_key_is_a_value_exactly_when_a_plain_reading_finds_it_among_the_values():
    batch = make_batch("recall", 8, 500, rng=4, num_symbols=32)
    found = recall_collisions.asked_key_is_a_value(batch.prompts, 8).tolist()
    for prompt, flagged in zip(batch.prompts.tolist(), found, strict=True):
        asked, values = prompt[-1], [prompt[index] for index in range(1, 16, 2)]
        assert flagged == (asked in values)
    # About 1 - (31/32)^8 = 0.224 of the examples.
    assert abs(sum(found) / 500 - (1 - (31 / 32) ** 8)) < 0.05


def test_the_two_splits_are_the_examples_score_reads_and_add_up_to_its_exact_match():
    torch.manual_seed(0)
    settings = recall_collisions.collision_settings(("rope",), (0,))
    model = build_run_model(settings, Run("recall", "decoder", "rope", False, 0))
    for length in (3, 8):
        splits = recall_collisions.split_scores(model, length, num_examples=300, seed=5, num_symbols=32,
                                                batch_size=128)
        assert sum(examples for _, examples in splits.values()) == 300
        exact = score(model, "recall", length, num_examples=300, batch_size=256, seed=5, num_symbols=32).exact_match
        assert sum(correct for correct, _ in splits.values()) / 300 == pytest.approx(exact)
        assert 0 < splits["collision"][1] < 300


def test_the_command_writes_one_row_per_kind_seed_size_and_split_and_resumes(tmp_path, monkeypatch):
    trained = []

    def untrained(model, task, budget, *, seed, **options):
        """Stands in for the training (the study's 4000 steps): records the run and returns its budget."""
        assert task == "recall" and budget == FULL_SETTINGS.train_settings("recall")
        trained.append(seed)
        return SimpleNamespace(steps=0, reached_target=False)

    monkeypatch.setattr(recall_collisions, "train_model", untrained)
    arguments = ["recall-collisions", "--out", str(tmp_path), "--positions", "alibi", "--seeds", "2", "--jobs", "1",
                 "--no-progress"]
    cli.main(arguments)
    with open(tmp_path / "collisions.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == recall_collisions.COLUMNS
    assert {(row["seed"], row["length"], row["split"]) for row in rows} == {
        (str(seed), str(length), split) for seed in (0, 1) for length in range(3, 9) for split in ("clean", "collision")}
    for seed in ("0", "1"):
        for length in range(3, 9):
            pair = [row for row in rows if row["seed"] == seed and row["length"] == str(length)]
            assert sum(int(row["examples"]) for row in pair) == FULL_SETTINGS.eval_examples
    assert json.loads((tmp_path / "provenance.json").read_text())["command"].startswith(
        "python -m posenc_ref.lab recall-collisions")
    cli.main(arguments)  # every run saved: nothing trained again
    assert trained == [0, 1]


def test_bad_arguments_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["recall-collisions", "--out", str(tmp_path), "--positions", "xpos"])
    assert "positions" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["recall-collisions", "--out", str(tmp_path), "--jobs", "0"])
    assert "jobs must be an int >= 1" in capsys.readouterr().err
