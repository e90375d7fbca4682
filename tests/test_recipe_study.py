"""posenc_ref.lab.recipe_study: the study's grid again, each kind under the recipe the search chose for it."""

from __future__ import annotations

import concurrent.futures
import json
import threading

import pytest

from posenc_ref.lab import cli, recipe_study
from posenc_ref.lab.recipe_search import RECIPES
from posenc_ref.lab.settings import FULL_SETTINGS

CHOICES = {"rope": {"recipe": "wide-deep-large-batch-longer", "fitted": {"wide-deep-large-batch-longer": 4}},
           "learned": {"recipe": "study", "fitted": {"study": 6}}}


def test_a_kinds_settings_are_the_studys_grid_under_its_recipe():
    settings = recipe_study.kind_settings("rope", "wide-deep-large-batch-longer", 3)
    # What the recipe changes (d = 64, three layers, 1e-3 after 1000 warm-up steps, 16000 steps, batch 128) ...
    assert (settings.d_model, settings.num_layers, settings.learning_rate, settings.warmup_steps,
            settings.max_steps, settings.batch_size) == (64, 3, 1e-3, 1000, 16000, 128)
    # ... and what it keeps: the study's decoders, training sizes, stopping rule and lengths up to 3L, on the
    # tasks the recipes were chosen on (associative recall with keys and values apart).
    assert settings.positions == ("rope",) and settings.seeds == (3,)
    assert (settings.tasks, settings.models, settings.eval_lengths, settings.target_accuracy, settings.schedule) == (
        ("copy", "bites", "lookup"), ("decoder",), tuple(range(3, 25)), 0.99, "cosine")
    assert recipe_study.kind_settings("learned", "study", 0) == FULL_SETTINGS.__class__(
        **{**FULL_SETTINGS.__dict__, "positions": ("learned",), "tasks": ("copy", "bites", "lookup"), "seeds": (0,)})


def test_the_stopping_rule_moves_alone_and_never_below_the_fit_threshold():
    first = recipe_study.kind_settings("t5", "wide-slow-long", 2)
    margin = recipe_study.kind_settings("t5", "wide-slow-long", 2, stop_accuracy=0.999)
    assert first.target_accuracy == 0.99 and margin.target_accuracy == 0.999
    assert margin.train_settings("copy").target_accuracy == 0.999  # what train_model stops on
    assert {**margin.__dict__, "target_accuracy": 0.99} == first.__dict__
    # One mistake in the 256 checks of a size is 0.9961: the margin rule admits no mistake at all.
    assert 1 >= recipe_study.MARGIN_STOP_ACCURACY > 255 / 256 == 1 - 1 / margin.train_settings("copy").check_examples
    for bad in (0.98, 1.0, 1.01, True, "0.996"):
        with pytest.raises(ValueError, match=f"stop_accuracy must be a number from the fit threshold 0.99 up to, not including, 1, "
                                             f"got {bad!r}"):
            recipe_study.kind_settings("t5", "wide-slow-long", 2, stop_accuracy=bad)


def test_unknown_recipes_kinds_and_seeds_are_named():
    with pytest.raises(ValueError, match="recipe must be one of"):
        recipe_study.kind_settings("rope", "dropout", 0)
    with pytest.raises(ValueError, match="kind must be one of the study's"):
        recipe_study.kind_settings("xpos", "study", 0)
    with pytest.raises(ValueError, match="seed must be one of the study's"):
        recipe_study.kind_settings("rope", "study", 100)


@pytest.fixture(autouse=True)
def threads_for_processes(monkeypatch):
    """The sweeps run in threads of this process, where the stand-in for the training below is seen (spawned
    worker processes would import the real one)."""
    monkeypatch.setattr(recipe_study, "_executor", lambda jobs: concurrent.futures.ThreadPoolExecutor(jobs))


def _recording(calls):
    def recording_run(settings, *, out_dir, command, **options):
        """Stands in for the training: one row per run, its steps the recipe's budget."""
        assert options["jobs"] == 1 and options["threads"] == 1  # each sweep's runs one after another
        calls.append((out_dir, settings, command))
        (out_dir / "runs").mkdir(parents=True, exist_ok=True)
        for run in settings.runs():
            row = {"position": run.position, "task": run.task, "seed": run.seed, "train_steps": settings.max_steps}
            (out_dir / "runs" / f"{run.key}.json").write_text(json.dumps([row]))
        return []
    return recording_run


def test_the_command_runs_seed_by_seed_and_records_each_kinds_recipe(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(recipe_study, "run_length_generalization", _recording(calls))
    choices = tmp_path / "chosen.json"
    choices.write_text(json.dumps(CHOICES))
    out = tmp_path / "study"
    cli.main(["recipe-study", "--out", str(out), "--choices", str(choices), "--seeds", "2", "--no-progress"])
    assert [path.relative_to(out).as_posix() for path, _, _ in calls] == [
        "rope/seed-0", "learned/seed-0", "rope/seed-1", "learned/seed-1"]
    assert calls[0][2][:4] == ["python", "-m", "posenc_ref.lab", "recipe-study"]
    assert json.loads((out / "choices.json").read_text()) == dict(sorted(CHOICES.items()))
    rows = recipe_study.read_recipe_study(out)
    assert [(row["position"], row["seed"]) for row in rows if row["task"] == "copy"] == [
        ("learned", 0), ("learned", 1), ("rope", 0), ("rope", 1)]
    steps = {row["position"]: row["train_steps"] for row in rows}
    assert steps == {"rope": RECIPES["wide-deep-large-batch-longer"]["max_steps"], "learned": FULL_SETTINGS.max_steps}


def test_the_command_passes_the_stopping_rule_to_every_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(recipe_study, "run_length_generalization", _recording(calls))
    choices = tmp_path / "chosen.json"
    choices.write_text(json.dumps(CHOICES))
    cli.main(["recipe-study", "--out", str(tmp_path / "out"), "--choices", str(choices), "--seeds", "1",
              "--stop-accuracy", "0.999", "--no-progress"])
    assert [settings.target_accuracy for _, settings, _ in calls] == [0.999, 0.999]
    assert "--stop-accuracy 0.999" in " ".join(calls[0][2])


def test_a_bad_stopping_rule_is_named_on_the_command_line(tmp_path, capsys):
    choices = tmp_path / "chosen.json"
    choices.write_text(json.dumps(CHOICES))
    with pytest.raises(SystemExit):
        cli.main(["recipe-study", "--out", str(tmp_path / "out"), "--choices", str(choices),
                  "--stop-accuracy", "0.5"])
    assert "stop_accuracy must be a number from the fit threshold 0.99 up to, not including, 1, got 0.5" in capsys.readouterr().err


def test_jobs_run_that_many_sweeps_at_once_started_in_the_planned_order(tmp_path, monkeypatch):
    started, running, most = [], set(), [0]
    lock, both_started = threading.Lock(), threading.Barrier(2, timeout=10)

    def overlapping_run(settings, *, out_dir, command, **options):
        with lock:
            started.append(out_dir.relative_to(tmp_path).as_posix())
            running.add(out_dir)
            most[0] = max(most[0], len(running))
        if len(started) <= 2:
            both_started.wait()  # the first two sweeps run at the same time, or this times out
        with lock:
            running.discard(out_dir)
        return [{"position": settings.positions[0], "seed": settings.seeds[0]}]

    monkeypatch.setattr(recipe_study, "run_length_generalization", overlapping_run)
    results = recipe_study.run_recipe_study(tmp_path, CHOICES, seeds=(0, 1, 2), jobs=2, progress=False,
                                            command=["x"])
    assert started[:2] == ["rope/seed-0", "learned/seed-0"] and most[0] == 2
    assert sorted(started) == sorted(f"{kind}/seed-{seed}" for kind in CHOICES for seed in (0, 1, 2))
    assert list(results) == [f"{kind}/seed-{seed}" for seed in (0, 1, 2) for kind in CHOICES]


def test_a_kinds_runs_under_another_recipe_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe_study, "run_length_generalization", _recording([]))
    recipe_study.run_recipe_study(tmp_path, CHOICES, seeds=(0,), progress=False, command=["x"])
    changed = {**CHOICES, "rope": {"recipe": "wide-slow-long"}}
    with pytest.raises(ValueError, match="rope: wide-deep-large-batch-longer there, wide-slow-long now"):
        recipe_study.run_recipe_study(tmp_path, changed, seeds=(1,), progress=False, command=["x"])
    # Another kind added later is recorded beside the first ones.
    recipe_study.run_recipe_study(tmp_path, {**CHOICES, "t5": {"recipe": "study"}}, positions=("t5",), seeds=(0,),
                                  progress=False, command=["x"])
    assert sorted(json.loads((tmp_path / "choices.json").read_text())) == ["learned", "rope", "t5"]


def test_bad_choices_and_kinds_are_named(tmp_path, capsys):
    choices = tmp_path / "chosen.json"
    choices.write_text(json.dumps({"rope": {"recipe": "dropout"}}))
    with pytest.raises(SystemExit):
        cli.main(["recipe-study", "--out", str(tmp_path / "out"), "--choices", str(choices)])
    assert "the choice of kind 'rope' must name a recipe" in capsys.readouterr().err
    choices.write_text(json.dumps(CHOICES))
    with pytest.raises(SystemExit):
        cli.main(["recipe-study", "--out", str(tmp_path / "out"), "--choices", str(choices), "--positions", "t5"])
    assert "no choice for ['t5']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["recipe-study", "--out", str(tmp_path / "out"), "--choices", str(tmp_path / "missing.json")])
    assert "missing.json" in capsys.readouterr().err
