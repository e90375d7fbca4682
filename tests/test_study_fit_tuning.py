"""The committed fit-tuning runs (book/data/fit-tuning/<variant>/): one change of the study's settings each.

Data produced by ``python -m posenc_ref.lab fit-tuning``: the same cells (tasks, kinds, seeds) in every variant,
each variant the study's settings with the one change of ``VARIANTS``, every run complete and checked.
"""

import pytest
from study_data import DATA, check_grid, check_provenance, saved

from posenc_ref.lab.fit_tuning import VARIANTS, variant_settings

TUNING = DATA / "fit-tuning"


def test_every_variant_is_committed_and_nothing_else():
    assert sorted(path.name for path in TUNING.iterdir() if path.is_dir()) == sorted(VARIANTS)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_variant_is_the_study_with_its_one_change_on_the_same_cells(variant):
    settings, provenance, rows = saved(TUNING / variant)
    first, _, _ = saved(TUNING / next(iter(VARIANTS)))
    cells = {"tasks": first.tasks, "positions": first.positions, "seeds": first.seeds}
    assert settings == variant_settings(variant, **cells)
    assert " fit-tuning " in provenance["command"]
    check_provenance(provenance)
    check_grid(settings, rows)
