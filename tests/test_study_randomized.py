"""The committed randomized-positions study (book/data/randomized-positions/): complete, traceable, checked.

The absolute and rotary decoders with and without randomized positions (``RANDOMIZED_SETTINGS``). Its runs
without randomized positions have the settings and seeds of the main study's runs of the same kinds and tasks,
so they are the same runs: the test checks that their rows are identical.
"""

from study_data import DATA, check_grid, check_provenance, saved

from posenc_ref.lab.settings import RANDOMIZED_SETTINGS

REMEDY = DATA / "randomized-positions"


def test_the_remedy_is_the_randomized_setting_complete_and_checked():
    settings, provenance, rows = saved(REMEDY)
    assert settings == RANDOMIZED_SETTINGS
    assert "--randomized-study" in provenance["command"]
    check_provenance(provenance)
    check_grid(settings, rows)
    assert {row["randomized"] for row in rows} == {"True", "False"}


def test_its_plain_runs_are_the_main_studys_runs():
    _, _, rows = saved(REMEDY)
    _, _, study_rows = saved(DATA / "length-generalization")

    def key(row):
        return row["task"], row["model"], row["position"], row["seed"], row["length"]

    study = {key(row): row for row in study_rows}
    plain = [row for row in rows if row["randomized"] == "False"]
    assert plain
    for row in plain:
        measured = {name: value for name, value in row.items() if name != "train_seconds"}
        assert measured == {name: value for name, value in study[key(row)].items() if name != "train_seconds"}
