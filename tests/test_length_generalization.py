"""posenc_ref.lab.length_generalization with its settings, results and command line (posenc_ref.lab.cli):
the CLI writes a complete results.csv; settings, tables and plots."""

import csv
import dataclasses
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc_ref.attention import POSITION_KINDS
from posenc_ref.lab.cli import main
from posenc_ref.lab.length_generalization import run_length_generalization
from posenc_ref.lab.results import CSV_COLUMNS, format_table, mean_accuracy
from posenc_ref.lab.settings import FULL_SETTINGS, QUICK_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_COLUMNS = {"position", "model", "task", "length", "accuracy", "seed"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def read_csv(path):
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        return reader.fieldnames, list(reader)


def test_quick_cli_writes_a_complete_results_csv_and_one_plot_per_model(tmp_path, capsys):
    # The quick grid as it is, with a budget of two steps per run and few examples, to stay fast.
    main(["length-generalization", "--quick", "--device", "cpu", "--max-steps", "2", "--eval-examples", "4",
          "--no-progress", "--out", str(tmp_path)])
    header, rows = read_csv(tmp_path / "results.csv")
    assert REQUIRED_COLUMNS <= set(header)
    expected_keys = set(itertools.product(
        QUICK_SETTINGS.positions, QUICK_SETTINGS.models, QUICK_SETTINGS.tasks,
        [str(seed) for seed in QUICK_SETTINGS.seeds], [str(length) for length in QUICK_SETTINGS.eval_lengths],
    ))
    keys = [(row["position"], row["model"], row["task"], row["seed"], row["length"]) for row in rows]
    assert len(keys) == len(set(keys)) and set(keys) == expected_keys
    assert set(QUICK_SETTINGS.positions) == set(POSITION_KINDS)
    assert max(QUICK_SETTINGS.eval_lengths) == 3 * QUICK_SETTINGS.train_length
    for row in rows:
        accuracy = float(row["accuracy"])
        assert row["examples"] == "4" and (4 * accuracy).is_integer() and 0.0 <= accuracy <= 1.0
        assert row["in_training_range"] == str(int(row["length"]) <= QUICK_SETTINGS.train_length)
        assert row["train_steps"] in ("1", "2")
    for task, model in itertools.product(QUICK_SETTINGS.tasks, QUICK_SETTINGS.models):
        assert (tmp_path / f"{task}_{model}.png").stat().st_size > 0
    assert "| task | model | position |" in capsys.readouterr().out


def test_python_dash_m_runs_the_command(tmp_path):
    command = [sys.executable, "-m", "posenc_ref.lab", "length-generalization", "--quick",
               "--device", "cpu", "--positions", "alibi", "--models", "decoder", "--max-steps", "1",
               "--eval-examples", "2", "--no-progress", "--out", str(tmp_path)]
    completed = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert completed.returncode == 0, completed.stderr
    header, rows = read_csv(tmp_path / "results.csv")
    assert header == list(CSV_COLUMNS)
    assert len(rows) == len(QUICK_SETTINGS.eval_lengths) * len(QUICK_SETTINGS.tasks) * len(QUICK_SETTINGS.seeds)
    assert {row["position"] for row in rows} == {"alibi"}


def test_cli_names_a_bad_option():
    with pytest.raises(SystemExit):
        main(["length-generalization", "--quick", "--positions", "xpos", "--out", "unused"])


def test_position_options_size_every_table_for_the_lengths_it_meets():
    # bites at length 24: 24 tokens, the separator and two answer tokens.
    assert QUICK_SETTINGS.position_options("learned", "decoder", "bites") == {"max_len": 24 + 1 + 2}
    assert FULL_SETTINGS.position_options("learned", "encoder", "recall") == {"max_len": 2 * 24 + 2 + 1}
    assert QUICK_SETTINGS.position_options("shaw", "encoder", "bites") == {"max_distance": 8}
    assert QUICK_SETTINGS.position_options("t5", "encoder", "bites") == {"num_buckets": 16, "max_distance": 8}
    assert QUICK_SETTINGS.position_options("t5", "decoder", "bites") == {"num_buckets": 8, "max_distance": 8}
    assert QUICK_SETTINGS.position_options("rope", "decoder", "bites") == {}


def test_every_t5_bucket_and_shaw_row_is_reached_by_offsets_inside_the_training_length():
    from posenc_ref.relative import relative_position_bucket

    length = QUICK_SETTINGS.train_length
    for model, bidirectional in (("encoder", True), ("decoder", False)):
        options = QUICK_SETTINGS.position_options("t5", model, "bites")
        inside = torch.arange(-length, length + 1)
        everywhere = torch.arange(-1000, 1001)
        reached = relative_position_bucket(inside, bidirectional=bidirectional, **options)
        reachable = relative_position_bucket(everywhere, bidirectional=bidirectional, **options)
        # (bidirectional buckets: bucket num_buckets / 2 would be offset +0, which takes bucket 0: none reach it)
        assert set(reached.tolist()) == set(reachable.tolist())
        assert len(set(reachable.tolist())) == options["num_buckets"] - bidirectional
    assert QUICK_SETTINGS.position_options("shaw", "encoder", "bites")["max_distance"] <= length


def test_full_settings_cover_every_kind_of_decoder_on_three_tasks_with_ten_seeds_up_to_three_times_the_training_length():
    assert set(FULL_SETTINGS.tasks) == {"copy", "bites", "recall"}
    assert len(FULL_SETTINGS.seeds) >= 10 and set(FULL_SETTINGS.models) == {"decoder"}
    assert set(FULL_SETTINGS.positions) == set(POSITION_KINDS)
    from posenc_ref.lab.settings import RANDOMIZED_SETTINGS

    assert set(RANDOMIZED_SETTINGS.randomized) == set(RANDOMIZED_SETTINGS.positions) == {"sinusoidal", "learned",
                                                                                         "rope"}
    assert {run.randomized for run in RANDOMIZED_SETTINGS.runs()} == {False, True}
    assert max(FULL_SETTINGS.eval_lengths) == 3 * FULL_SETTINGS.train_length
    assert FULL_SETTINGS.num_symbols >= max(FULL_SETTINGS.eval_lengths)  # recall's keys are distinct


@pytest.mark.parametrize(("change", "match"), [
    ({"positions": ("rope", "xpos")}, "positions must be one of"),
    ({"positions": ("rope", "rope")}, "must not repeat"),
    ({"models": ()}, "models must be a non-empty sequence"),
    ({"tasks": "bites"}, "tasks must be a non-empty sequence"),
    ({"eval_lengths": (8, 4)}, "ascending"),
    ({"eval_lengths": (2, 3, 4, 5, 6, 7, 8)}, "length must be an int >= 3"),
    ({"eval_lengths": (3, 4, 8)}, r"every training length 3..8; \[5, 6, 7\] are missing"),
    ({"min_train_length": 9}, "min_train_length must be at most train_length=8"),
    ({"tasks": ("recall",), "eval_lengths": (3, 4, 5, 6, 7, 8, 20), "num_symbols": 16}, "'recall' needs length <= 16"),
    ({"tasks": ("lookup",), "eval_lengths": tuple(range(3, 26)), "num_symbols": 32}, "'lookup' needs length <= 24"),
    ({"seeds": ()}, "seeds must be a non-empty sequence"),
    ({"backend": "triton"}, "backend must be one of"),
    ({"max_steps": 0}, "max_steps"),
])
def test_bad_settings_are_named(change, match):
    with pytest.raises((TypeError, ValueError), match=match):
        dataclasses.replace(QUICK_SETTINGS, **change)


def test_run_rejects_something_that_is_not_settings(tmp_path):
    with pytest.raises(TypeError, match="settings must be a LengthGeneralizationSettings"):
        run_length_generalization({"tasks": ("copy",)}, out_dir=tmp_path)


def fake_rows():
    rows = []
    for seed, accuracy_at_4, accuracy_at_8 in ((0, 1.0, 0.25), (1, 0.5, 0.75)):
        for length, accuracy in ((4, accuracy_at_4), (8, accuracy_at_8)):
            rows.append({"position": "rope", "model": "decoder", "task": "copy", "seed": seed, "length": length,
                         "accuracy": accuracy, "train_length": 4})
    rows.append({"position": "none", "model": "decoder", "task": "copy", "seed": 0, "length": 4,
                 "accuracy": 0.2, "train_length": 4})
    rows.append({"position": "none", "model": "decoder", "task": "copy", "seed": 0, "length": 8,
                 "accuracy": 0.0, "train_length": 4})
    return rows


def test_mean_accuracy_averages_over_seeds():
    means = mean_accuracy(fake_rows(), model="decoder", task="copy")
    assert means == {"rope": {4: 0.75, 8: 0.5}, "none": {4: 0.2, 8: 0.0}}
    with pytest.raises(ValueError, match="no results for model='encoder'"):
        mean_accuracy(fake_rows(), model="encoder", task="copy")


def test_format_table_has_a_line_per_position_and_marks_the_trained_lengths():
    lines = format_table(fake_rows()).splitlines()
    assert lines[0] == "| task | model | position | 4* | 8 |"
    assert lines[2] == "| copy | decoder | rope | 0.75 | 0.50 |"
    assert lines[3] == "| copy | decoder | none | 0.20 | 0.00 |"
    assert format_table(fake_rows(), lengths=[8]).splitlines()[2] == "| copy | decoder | rope | 0.50 |"
    with pytest.raises(ValueError, match=r"lengths \[6\] were not evaluated"):
        format_table(fake_rows(), lengths=[6])


def test_quick_settings_are_the_live_run_of_several_seeds_on_two_tasks():
    # who-bites-whom, and a task where recency is no shortcut (issue: the live run covers both kinds of task)
    assert len(QUICK_SETTINGS.seeds) >= 3 and set(QUICK_SETTINGS.tasks) == {"bites", "recall"}
    assert set(QUICK_SETTINGS.positions) == set(POSITION_KINDS) and QUICK_SETTINGS.models == ("decoder",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        QUICK_SETTINGS.max_steps = 5


# Resumable sweeps, parallel runs, provenance, randomized positions.

def measured(rows):
    """Rows without their training time, the one column that differs from one run to the next."""
    return [{key: value for key, value in row.items() if key != "train_seconds"} for row in rows]


TINY = dataclasses.replace(QUICK_SETTINGS, positions=("alibi", "rope"), models=("decoder",), tasks=("bites",),
                           seeds=(0, 1), max_steps=2, eval_examples=4, eval_lengths=(4, 8, 12), min_train_length=8)


def test_an_interrupted_sweep_continues_where_it_stopped_and_gives_the_same_rows(tmp_path, monkeypatch):
    from posenc_ref.lab import length_generalization

    whole = run_length_generalization(TINY, out_dir=tmp_path / "whole", progress=False, verbose=False,
                                      plots=False)
    trained = []
    original = length_generalization._train_and_score

    def fails_on_the_third_run(job):
        if len(trained) == 2:
            raise KeyboardInterrupt
        trained.append(job.run.key)
        return original(job)

    monkeypatch.setattr(length_generalization, "_train_and_score", fails_on_the_third_run)
    with pytest.raises(KeyboardInterrupt):
        run_length_generalization(TINY, out_dir=tmp_path / "cut", progress=False, verbose=False, plots=False)
    assert sorted(path.stem for path in (tmp_path / "cut" / "runs").glob("*.json")) == sorted(trained)
    assert not (tmp_path / "cut" / "results.csv").exists()
    monkeypatch.setattr(length_generalization, "_train_and_score", original)
    resumed = run_length_generalization(TINY, out_dir=tmp_path / "cut", progress=False, verbose=False,
                                        plots=False)
    assert measured(resumed) == measured(whole)
    provenance = json.loads((tmp_path / "cut" / "provenance.json").read_text())
    # The cut invocation recorded itself after each of its two runs; the resumed one computed the other two.
    assert [entry["runs_computed"] for entry in provenance["invocations"]] == [2, 2]
    assert provenance["runs"] == 4 and provenance["settings"]["seeds"] == [0, 1]
    assert provenance["versions"]["torch"] == torch.__version__
    assert provenance["invocations"][0]["machine"]["cores"] == os.cpu_count()
    before = (tmp_path / "cut" / "provenance.json").read_bytes()
    again = run_length_generalization(TINY, out_dir=tmp_path / "cut", progress=False, verbose=False, plots=False)
    assert again == resumed  # read back from the saved runs, seconds included
    # an invocation that computed nothing is not one that produced the sweep: the record stays as it was
    assert (tmp_path / "cut" / "provenance.json").read_bytes() == before


def test_other_settings_are_refused_in_a_folder_of_saved_runs_unless_restarted(tmp_path):
    run_length_generalization(TINY, out_dir=tmp_path, progress=False, verbose=False, plots=False)
    other = dataclasses.replace(TINY, max_steps=3)
    with pytest.raises(ValueError, match=r"differ in \['max_steps'\]"):
        run_length_generalization(other, out_dir=tmp_path, progress=False, verbose=False, plots=False)
    rows = run_length_generalization(other, out_dir=tmp_path, progress=False, verbose=False, plots=False,
                                     resume=False)
    assert {row["train_steps"] for row in rows} <= {1, 2, 3}
    assert json.loads((tmp_path / "settings.json").read_text())["max_steps"] == 3


def test_parallel_runs_give_the_rows_of_serial_runs(tmp_path):
    # Enough steps and examples that the scores depend on every weight: a difference would show.
    settings = dataclasses.replace(TINY, seeds=(0,), max_steps=60, eval_examples=64)
    serial = run_length_generalization(settings, out_dir=tmp_path / "serial", progress=False, verbose=False,
                                       plots=False)
    parallel = run_length_generalization(settings, out_dir=tmp_path / "parallel", progress=False, verbose=False,
                                         plots=False, jobs=2)
    assert len({row["token_accuracy"] for row in serial}) > 2
    assert measured(parallel) == measured(serial)


def test_randomized_variants_follow_their_kind_and_are_labelled(tmp_path):
    settings = dataclasses.replace(TINY, positions=("learned", "rope", "alibi"), randomized=("rope", "learned"),
                                   seeds=(0,))
    assert [run.key for run in settings.runs()] == [
        "bites-decoder-learned-seed0", "bites-decoder-learned+random-seed0", "bites-decoder-rope-seed0",
        "bites-decoder-rope+random-seed0", "bites-decoder-alibi-seed0"]
    longest = 12 + 1 + 2  # bites: the sentence, the separator and the two answer tokens
    assert settings.random_positions == longest
    assert dataclasses.replace(settings, random_range=2.5).random_positions == math.ceil(2.5 * longest)
    assert settings.position_options("learned", "decoder", "bites", randomized=True) == {"max_len": longest}
    rows = run_length_generalization(settings, out_dir=tmp_path, progress=False, verbose=False, plots=False)
    assert list(mean_accuracy(rows, model="decoder", task="bites")) == [
        "learned", "learned+random", "rope", "rope+random", "alibi"]
    header, saved = read_csv(tmp_path / "results.csv")
    assert header == list(CSV_COLUMNS)
    assert {(row["position"], row["randomized"]) for row in saved} == {
        ("learned", "False"), ("learned", "True"), ("rope", "False"), ("rope", "True"), ("alibi", "False")}


@pytest.mark.parametrize(("randomized", "match"), [
    (("alibi",), "randomized must be one of"), (("sinusoidal",), "must also be in positions"),
])
def test_randomized_kinds_are_checked(randomized, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, randomized=randomized)


def test_random_range_below_one_is_refused():
    with pytest.raises(ValueError, match="random_range must be a real number >= 1"):
        dataclasses.replace(TINY, random_range=0.5)


def test_the_position_free_encoder_gets_the_short_budget(tmp_path, monkeypatch):
    from posenc_ref.lab import length_generalization
    from posenc_ref.lab.settings import POSITION_FREE_ENCODER_STEPS

    budgets = {}
    real_train_model = length_generalization.train_model

    def recording_train_model(model, task, settings, **options):
        budgets[options["description"]] = settings.max_steps
        return real_train_model(model, task, dataclasses.replace(settings, max_steps=2), **options)

    monkeypatch.setattr(length_generalization, "train_model", recording_train_model)
    settings = dataclasses.replace(TINY, positions=("none",), models=("encoder", "decoder"), seeds=(0,),
                                   max_steps=POSITION_FREE_ENCODER_STEPS + 25)
    run_length_generalization(settings, out_dir=tmp_path, progress=False, verbose=False, plots=False)
    assert budgets == {"bites-encoder-none-seed0": POSITION_FREE_ENCODER_STEPS,
                       "bites-decoder-none-seed0": POSITION_FREE_ENCODER_STEPS + 25}


def test_read_results_gives_back_the_rows_written(tmp_path):
    rows = run_length_generalization(TINY, out_dir=tmp_path, progress=False, verbose=False, plots=False)
    from posenc_ref.lab.results import read_results

    assert read_results(tmp_path / "results.csv") == rows
    (tmp_path / "other.csv").write_text("position,accuracy\nrope,0.5\n")
    with pytest.raises(ValueError, match="expected"):
        read_results(tmp_path / "other.csv")


# The book's live run: one folder per settings digest, one cell per seed, resumed after a kill.

def test_the_settings_digest_changes_with_the_settings_and_covers_the_code():
    from posenc_ref.lab.settings import settings_digest

    assert settings_digest(TINY) == settings_digest(dataclasses.replace(TINY))
    assert len(settings_digest(TINY)) == 12 and int(settings_digest(TINY), 16) >= 0
    changed = [dataclasses.replace(TINY, max_steps=3), dataclasses.replace(TINY, seeds=(0,)),
               dataclasses.replace(TINY, eval_examples=5)]
    digests = {settings_digest(settings) for settings in (TINY, *changed)}
    assert len(digests) == 1 + len(changed)
    assert settings_digest(TINY, code=False) != settings_digest(TINY)  # the sources and versions count too
    with pytest.raises(TypeError, match="LengthGeneralizationSettings"):
        settings_digest({"seeds": (0,)})


def test_a_killed_live_run_resumes_and_trains_only_what_is_missing(tmp_path, monkeypatch):
    """The chapter's cell: a seed's runs in a folder named by the digest, resume=True; killed after its first
    run (a cell timeout), the next call trains only the runs that had not finished."""
    from posenc_ref.lab import length_generalization
    from posenc_ref.lab.settings import settings_digest

    seed_settings = dataclasses.replace(TINY, seeds=(1,))
    folder = tmp_path / settings_digest(TINY) / "seed1"
    expected = [run.key for run in seed_settings.runs()]
    assert len(expected) == 2
    whole = run_length_generalization(seed_settings, out_dir=tmp_path / "whole", progress=False, verbose=False,
                                      plots=False)
    trained = []
    original = length_generalization._train_and_score

    def killed_after_one_run(job):
        if trained:
            raise KeyboardInterrupt  # what the kernel gets when the cell runs out of time
        trained.append(job.run.key)
        return original(job)

    monkeypatch.setattr(length_generalization, "_train_and_score", killed_after_one_run)
    with pytest.raises(KeyboardInterrupt):
        run_length_generalization(seed_settings, out_dir=folder, progress=False, verbose=False, plots=False,
                                  resume=True, save_models=True)
    assert trained == expected[:1]

    retrained = []

    def counted(job):
        retrained.append(job.run.key)
        return original(job)

    monkeypatch.setattr(length_generalization, "_train_and_score", counted)
    rows = run_length_generalization(seed_settings, out_dir=folder, progress=False, verbose=False, plots=False,
                                     resume=True, save_models=True)
    assert retrained == expected[1:]  # the finished run is kept, not trained again
    assert measured(rows) == measured(whole)
    provenance = json.loads((folder / "provenance.json").read_text())
    assert [entry["runs_computed"] for entry in provenance["invocations"]] == [1, 1]
    assert sorted(path.stem for path in (folder / "runs").glob("*.pt")) == sorted(expected)
    run = seed_settings.runs()[0]
    model = length_generalization.load_trained_model(folder, seed_settings, run)
    assert sum(parameter.numel() for parameter in model.parameters()) == rows[0]["parameters"]
