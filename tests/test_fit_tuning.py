"""posenc_ref.lab.fit_tuning: one change of the study's settings per variant, on the cells asked for."""

import dataclasses

import pytest

from posenc_ref.lab import cli, fit_tuning
from posenc_ref.lab.settings import FULL_SETTINGS


def changed_fields(settings):
    return {field.name for field in dataclasses.fields(settings)
            if getattr(settings, field.name) != getattr(FULL_SETTINGS, field.name)}


@pytest.mark.parametrize("variant", list(fit_tuning.VARIANTS))
def test_each_variant_changes_one_setting_of_the_study_besides_the_cells(variant):
    settings = fit_tuning.variant_settings(variant, tasks=("recall",), positions=("t5", "rope"), seeds=(0, 1))
    assert changed_fields(settings) - {"tasks", "positions", "seeds"} == set(fit_tuning.VARIANTS[variant])
    assert (settings.tasks, settings.positions, settings.seeds) == (("recall",), ("t5", "rope"), (0, 1))


def test_the_variants_are_twice_the_steps_twice_the_width_and_a_third_of_the_learning_rate():
    assert FULL_SETTINGS.max_steps * 2 == fit_tuning.VARIANTS["steps-8000"]["max_steps"]
    assert FULL_SETTINGS.d_model * 2 == fit_tuning.VARIANTS["width-64"]["d_model"]
    assert fit_tuning.VARIANTS["learning-rate-0.001"]["learning_rate"] == pytest.approx(FULL_SETTINGS.learning_rate / 3)


def test_an_unknown_variant_is_named():
    with pytest.raises(ValueError, match="variant must be one of"):
        fit_tuning.variant_settings("dropout", tasks=("copy",), positions=("rope",), seeds=(0,))


def test_the_command_runs_every_variant_into_its_own_folder(tmp_path, monkeypatch):
    calls = []

    def recording_run(settings, *, out_dir, command, **options):
        calls.append((settings, out_dir, command, options))
        return [{"settings": settings}]

    monkeypatch.setattr(fit_tuning, "run_length_generalization", recording_run)
    rows = cli.main(["fit-tuning", "--out", str(tmp_path), "--tasks", "recall", "--positions", "t5", "--seeds", "2",
                     "--no-progress"])
    assert len(rows) == len(fit_tuning.VARIANTS)
    assert [out_dir for _, out_dir, _, _ in calls] == [tmp_path / variant for variant in fit_tuning.VARIANTS]
    assert all(settings.seeds == (0, 1) and settings.tasks == ("recall",) for settings, _, _, _ in calls)
    assert calls[0][2][:4] == ["python", "-m", "posenc_ref.lab", "fit-tuning"]
    assert all(options["device"] == "cpu" and options["threads"] == 1 for _, _, _, options in calls)


def test_bad_arguments_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit-tuning", "--out", str(tmp_path), "--positions", "xpos"])
    assert "positions must be one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["fit-tuning", "--out", str(tmp_path), "--seeds", "0"])
    assert "--seeds must be an int >= 1" in capsys.readouterr().err
