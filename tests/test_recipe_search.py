"""posenc_ref.lab.recipe_search: recipes searched inside the training range, on seeds that are not the study's."""

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from posenc_ref.lab import cli, recipe_search
from posenc_ref.lab.settings import FULL_SETTINGS

INSIDE = tuple(range(3, 9))


def changed_fields(settings):
    return {field.name for field in dataclasses.fields(settings)
            if getattr(settings, field.name) != getattr(FULL_SETTINGS, field.name)}


@pytest.mark.parametrize("recipe", list(recipe_search.RECIPES))
def test_each_recipe_changes_its_budget_and_scores_the_training_sizes_only(recipe):
    settings = recipe_search.search_settings(recipe, tasks=("recall",), positions=("t5",), seed=101)
    assert changed_fields(settings) - {"tasks", "positions", "seeds", "eval_lengths"} == set(
        recipe_search.RECIPES[recipe])
    assert settings.eval_lengths == INSIDE and settings.seeds == (101,)


def test_the_recipes_are_the_ones_the_docstring_names():
    recipes = recipe_search.RECIPES
    assert recipes["study"] == {}
    assert recipes["slow-long"] == {"learning_rate": 1e-3, "max_steps": 8000, "warmup_steps": 500}
    assert recipes["wide-slow-long"] == {**recipes["slow-long"], "d_model": 64}
    assert recipes["wide-deep-slow-long"] == {**recipes["wide-slow-long"], "num_layers": 3}
    assert recipes["wide-deep-large-batch-longer"] == {**recipes["wide-deep-slow-long"], "max_steps": 16000,
                                                       "warmup_steps": 1000, "batch_size": 128}
    assert FULL_SETTINGS.warmup_steps == 50 and FULL_SETTINGS.learning_rate == 3e-3


def test_a_seed_of_the_study_and_an_unknown_recipe_are_refused():
    with pytest.raises(ValueError, match="must not be one of the study's seeds"):
        recipe_search.search_settings("study", tasks=("copy",), positions=("rope",), seed=3)
    with pytest.raises(ValueError, match="recipe must be one of"):
        recipe_search.search_settings("dropout", tasks=("copy",), positions=("rope",), seed=100)
    assert not set(recipe_search.SEARCH_SEEDS) & set(FULL_SETTINGS.seeds)


def run_rows(kind, task, seed, exact_by_length):
    """The rows of one run: its exact match at each training size."""
    return [{"position": kind, "randomized": False, "model": "decoder", "task": task, "seed": seed,
             "length": length, "accuracy": exact, "in_training_range": True}
            for length, exact in zip(INSIDE, exact_by_length, strict=True)]


FIT = (1.0,) * 6
ALMOST = (1.0, 1.0, 1.0, 1.0, 0.995, 0.97)  # lowest 0.97: not fitted
POOR = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4)  # lowest 0.4


def test_the_recipe_that_fits_the_most_runs_is_chosen():
    rows = {
        "study": run_rows("rope", "copy", 100, FIT) + run_rows("rope", "copy", 101, POOR),
        "slow-long": run_rows("rope", "copy", 100, FIT) + run_rows("rope", "copy", 101, FIT),
    }
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    assert (choice.kind, choice.recipe, choice.fitted, choice.runs) == ("rope", "slow-long",
                                                                       {"study": 1, "slow-long": 2}, 2)
    assert choice.lowest_inside == {"study": pytest.approx((1.0 + 0.4) / 2), "slow-long": 1.0}


def test_ties_go_to_the_higher_lowest_exact_match_then_to_the_cheaper_recipe():
    rows = {"study": run_rows("t5", "lookup", 100, POOR), "slow-long": run_rows("t5", "lookup", 100, ALMOST),
            "wide-slow-long": run_rows("t5", "lookup", 100, ALMOST)}
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    assert choice.recipe == "slow-long" and choice.first_stage_fitted == {"study": 0, "slow-long": 0,
                                                                          "wide-slow-long": 0}
    assert choice.finalists == ("slow-long", "wide-slow-long") and choice.fitted == {"slow-long": 0,
                                                                                    "wide-slow-long": 0}


def test_recipes_are_compared_on_the_seeds_they_all_finished():
    rows = {"study": run_rows("alibi", "copy", 100, POOR) + run_rows("alibi", "copy", 101, FIT),
            "slow-long": run_rows("alibi", "copy", 100, ALMOST)}  # seed 101 still running
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    assert choice.seeds == (100,) and choice.recipe == "slow-long" and choice.runs == 1


def test_the_first_stages_best_two_are_ranked_again_on_every_seed_they_finished():
    rows = {
        "study": run_rows("rope", "copy", 100, POOR) + run_rows("rope", "copy", 101, FIT),  # not a finalist
        "slow-long": run_rows("rope", "copy", 100, FIT) + run_rows("rope", "copy", 101, POOR),
        "wide-slow-long": run_rows("rope", "copy", 100, ALMOST) + run_rows("rope", "copy", 101, FIT),
    }
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    # First stage, seed 100: slow-long fits (1), wide-slow-long's lowest 0.97 beats the study's 0.4.
    assert choice.first_stage_seeds == (100,) and choice.first_stage_fitted == {
        "study": 0, "slow-long": 1, "wide-slow-long": 0}
    assert choice.finalists == ("slow-long", "wide-slow-long")
    # Second stage, seeds 100 and 101: one fitted run each; wide-slow-long's mean lowest (0.97 + 1) / 2 beats
    # slow-long's (1 + 0.4) / 2. The study fitted seed 101 too, but went out in the first stage.
    assert (choice.recipe, choice.seeds, choice.runs) == ("wide-slow-long", (100, 101), 2)
    assert choice.fitted == {"slow-long": 1, "wide-slow-long": 1}
    assert choice.lowest_inside == {"slow-long": pytest.approx(0.7), "wide-slow-long": pytest.approx(0.985)}


def test_a_recipe_run_on_a_later_seed_only_never_entered_the_first_stage():
    rows = {
        "study": run_rows("shaw", "copy", 100, POOR),
        "slow-long": run_rows("shaw", "copy", 100, ALMOST) + run_rows("shaw", "copy", 101, FIT),
        "wide-slow-long": run_rows("shaw", "copy", 101, FIT),  # run on 101 for another kind's finalists
    }
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    assert choice.first_stage_fitted == {"study": 0, "slow-long": 0} and choice.finalists == ("slow-long", "study")
    assert (choice.recipe, choice.seeds) == ("slow-long", (100,))  # the finalists share seed 100 only


def test_a_recipe_run_on_some_tasks_of_the_first_seed_only_never_entered_the_first_stage():
    rows = {
        "study": run_rows("shaw", "copy", 100, FIT) + run_rows("shaw", "lookup", 100, FIT),
        "slow-long": run_rows("shaw", "copy", 100, POOR) + run_rows("shaw", "lookup", 100, ALMOST),
        "wide-slow-long": run_rows("shaw", "lookup", 100, FIT),  # its copy run not made for this kind
    }
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    assert choice.first_stage_fitted == {"study": 2, "slow-long": 0} and choice.finalists == ("study", "slow-long")
    assert choice.runs == 2 and choice.recipe == "study"


def test_with_the_first_seed_alone_the_choice_is_the_first_stages_best():
    rows = {recipe: run_rows("t5", "copy", 100, values)
            for recipe, values in (("study", POOR), ("slow-long", ALMOST), ("wide-slow-long", FIT))}
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    assert choice.finalists == ("wide-slow-long", "slow-long") and choice.recipe == "wide-slow-long"
    assert choice.seeds == choice.first_stage_seeds == (100,)


def test_the_choice_reads_the_choice_tasks_only_and_records_them():
    rows = {"study": run_rows("rope", "copy", 100, FIT) + run_rows("rope", "recall", 100, POOR)
                     + run_rows("rope", "lookup", 100, FIT),
            "slow-long": run_rows("rope", "copy", 100, FIT) + run_rows("rope", "recall", 100, FIT)
                         + run_rows("rope", "lookup", 100, ALMOST)}
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8).values()
    # On copy and lookup (recall, which lets a value repeat the asked key, is not chosen on): 2 fitted against 1.
    assert recipe_search.CHOICE_TASKS == ("copy", "bites", "lookup") and choice.tasks == recipe_search.CHOICE_TASKS
    assert (choice.recipe, choice.fitted, choice.runs) == ("study", {"study": 2, "slow-long": 1}, 2)
    (choice,) = recipe_search.choose_recipes(rows, target_accuracy=0.99, train_length=8,
                                             tasks=("copy", "recall")).values()
    assert (choice.recipe, choice.fitted) == ("slow-long", {"study": 1, "slow-long": 2})


def test_folders_name_tasks_other_than_the_studys_and_a_run_saved_twice_is_read_once(tmp_path):
    assert recipe_search.recipe_folder(tmp_path, "study", 100) == tmp_path / "study" / "seed-100"
    assert recipe_search.recipe_folder(tmp_path, "study", 100, ("lookup",)) == tmp_path / "study" / "seed-100-lookup"
    assert recipe_search.recipe_folder(tmp_path, "study", 101, ("copy", "lookup")) == \
        tmp_path / "study" / "seed-101-copy+lookup"
    for folder, tasks in (("seed-100", ("copy",)), ("seed-100-copy+lookup", ("copy", "lookup"))):
        (tmp_path / "study" / folder / "runs").mkdir(parents=True)
        for task in tasks:
            (tmp_path / "study" / folder / "runs" / f"{task}-decoder-rope-seed100.json").write_text(
                json.dumps(run_rows("rope", task, 100, FIT)))
    rows = recipe_search.read_search(tmp_path)["study"]
    assert sorted({row["task"] for row in rows}) == ["copy", "lookup"] and len(rows) == 2 * len(INSIDE)


def test_a_row_beyond_the_training_range_is_refused():
    rows = run_rows("rope", "copy", 100, FIT)
    rows.append({**rows[-1], "length": 9, "in_training_range": False})
    with pytest.raises(ValueError, match="must lie inside the training range"):
        recipe_search.choose_recipes({"study": rows}, target_accuracy=0.99, train_length=8)


def test_the_command_runs_seed_by_seed_and_writes_its_choice(tmp_path, monkeypatch, capsys):
    calls = []

    def recording_run(settings, *, out_dir, command, **options):
        """Stands in for the training: every run fits under slow-long, none under the study's recipe."""
        calls.append((settings, out_dir, command, options))
        (out_dir / "runs").mkdir(parents=True)
        rows = []
        for run in settings.runs():
            run_rows_ = run_rows(run.position, run.task, run.seed, FIT if settings.max_steps == 8000 else POOR)
            (out_dir / "runs" / f"{run.key}.json").write_text(json.dumps(run_rows_))
            rows += run_rows_
        return rows

    monkeypatch.setattr(recipe_search, "run_length_generalization", recording_run)
    cli.main(["recipe-search", "--out", str(tmp_path), "--tasks", "lookup", "--positions", "t5,rope",
              "--recipes", "study,slow-long", "--seeds", "100,101", "--no-progress"])
    assert [out_dir.relative_to(tmp_path).as_posix() for _, out_dir, _, _ in calls] == [
        "study/seed-100-lookup", "slow-long/seed-100-lookup", "study/seed-101-lookup", "slow-long/seed-101-lookup"]
    assert all(settings.eval_lengths == INSIDE for settings, _, _, _ in calls)
    assert calls[0][2][:4] == ["python", "-m", "posenc_ref.lab", "recipe-search"]
    chosen = json.loads((tmp_path / "chosen.json").read_text())
    assert {kind: choice["recipe"] for kind, choice in chosen.items()} == {"t5": "slow-long", "rope": "slow-long"}
    assert chosen["rope"]["fitted"] == {"study": 0, "slow-long": 2}
    assert "rope: slow-long" in capsys.readouterr().out


def test_finalists_only_runs_each_recipe_for_the_kinds_it_is_a_finalist_of(tmp_path, monkeypatch):
    calls = []

    def recording_run(settings, *, out_dir, command, **options):
        """Seed 100: t5 fits under slow-long only, rope under wide-slow-long only."""
        calls.append((out_dir.relative_to(tmp_path).as_posix(), settings.positions))
        (out_dir / "runs").mkdir(parents=True)
        for run in settings.runs():
            recipe = out_dir.parent.name
            fits = {"t5": "slow-long", "rope": "wide-slow-long"}[run.position] == recipe
            (out_dir / "runs" / f"{run.key}.json").write_text(
                json.dumps(run_rows(run.position, run.task, run.seed, FIT if fits else POOR)))
        return []

    monkeypatch.setattr(recipe_search, "run_length_generalization", recording_run)
    base = ["recipe-search", "--out", str(tmp_path), "--tasks", "copy", "--positions", "t5,rope", "--no-progress"]
    with pytest.raises(SystemExit):  # no first stage yet
        cli.main([*base, "--recipes", "study,slow-long,wide-slow-long", "--seeds", "101", "--finalists"])
    cli.main([*base, "--recipes", "study,slow-long,wide-slow-long", "--seeds", "100"])
    calls.clear()
    cli.main([*base, "--recipes", "study,slow-long,wide-slow-long", "--seeds", "101", "--finalists"])
    # Finalists: t5 -> slow-long, then study (lowest 0.4 ties wide-slow-long's; the cheaper goes on); rope ->
    # wide-slow-long, then study.
    assert calls == [("study/seed-101-copy", ("t5", "rope")), ("slow-long/seed-101-copy", ("t5",)),
                     ("wide-slow-long/seed-101-copy", ("rope",))]
    chosen = json.loads((tmp_path / "chosen.json").read_text())
    assert chosen["t5"]["seeds"] == [100, 101] and chosen["t5"]["recipe"] == "slow-long"
    assert chosen["rope"]["finalists"] == ["wide-slow-long", "study"]
    # A seed begun for every kind before the search ran finalists only is resumed with the kinds it began with
    # (slow-long is a finalist of t5 alone); one begun with other kinds runs the finalists' kinds.
    for recipe, begun_with in (("slow-long", ["t5", "rope"]), ("wide-slow-long", ["t5"])):
        (tmp_path / recipe / "seed-102-copy").mkdir()
        (tmp_path / recipe / "seed-102-copy" / "settings.json").write_text(json.dumps({"positions": begun_with}))
    monkeypatch.setattr(recipe_search, "saved_settings", lambda folder: argparse.Namespace(
        positions=tuple(json.loads((Path(folder) / "settings.json").read_text())["positions"])))
    calls.clear()
    cli.main([*base, "--recipes", "slow-long,wide-slow-long", "--seeds", "102", "--finalists"])
    assert calls == [("slow-long/seed-102-copy", ("t5", "rope")), ("wide-slow-long/seed-102-copy", ("rope",))]


def test_bad_arguments_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["recipe-search", "--out", str(tmp_path), "--seeds", "0,100"])
    assert "must not be one of the study's seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["recipe-search", "--out", str(tmp_path), "--seeds", "x"])
    assert "seeds must be whole numbers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["recipe-search", "--out", str(tmp_path), "--recipes", "dropout"])
    assert "recipe must be one of" in capsys.readouterr().err
