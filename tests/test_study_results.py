"""The committed length-generalization study (book/data/length-generalization/): complete, traceable, checked.

These files are data produced by the lab's command line (the command, commit and machine are in
provenance.json); the chapter reads them. The test checks that they are the study the code defines
(``FULL_SETTINGS``), that every run is present at every size, that the stopping rule was applied, and that the
book's live run is a part of the study.
"""

import dataclasses

from study_data import DATA, check_grid, check_provenance, saved

from posenc_ref.attention import POSITION_KINDS
from posenc_ref.lab.settings import FULL_SETTINGS, QUICK_SETTINGS

STUDY = DATA / "length-generalization"


def test_the_study_is_the_full_setting_of_the_command_with_ten_seeds():
    settings, provenance, _ = saved(STUDY)
    assert settings == FULL_SETTINGS
    assert len(settings.seeds) >= 10 and set(settings.positions) == set(POSITION_KINDS)
    assert " length-generalization " in provenance["command"] and "--randomized-study" not in provenance["command"]
    check_provenance(provenance)


def test_every_run_is_present_at_every_size_and_the_stopping_rule_was_applied():
    settings, _, rows = saved(STUDY)
    check_grid(settings, rows)


def test_the_live_run_of_the_book_is_a_part_of_the_study():
    assert dataclasses.replace(FULL_SETTINGS, tasks=QUICK_SETTINGS.tasks, seeds=QUICK_SETTINGS.seeds) == QUICK_SETTINGS
    assert set(QUICK_SETTINGS.tasks) <= set(FULL_SETTINGS.tasks) and set(QUICK_SETTINGS.seeds) <= set(FULL_SETTINGS.seeds)
