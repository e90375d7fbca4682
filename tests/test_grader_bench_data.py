"""The grading-speed figures of the instructors' guide come from committed bench data
(``book/data/grading-speed/``, written by ``python -m autograder.bench --out``), and that data agrees with itself.

Each file's rates are recomputed from its times and counts, its ratio from its rates and its efficiency from its
times; the built guide must print the figures of the files.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEED = ROOT / "book" / "data" / "grading-speed"
GUIDE = ROOT / "_build" / "html" / "book" / "guide_instructors.html"
PROVENANCE = ("command", "date", "commit", "uncommitted_changes", "machine", "versions", "load_before", "load_after")


def _read(name: str) -> dict:
    return json.loads((SPEED / name).read_text(encoding="utf-8"))


def test_the_ratio_run_is_complete_and_consistent():
    run = _read("ratio.json")
    assert set(PROVENANCE) <= set(run) and run["command"][:3] == ["python", "-m", "autograder.bench"]
    assert "--out" in run["command"] and run["sandboxed"] is True
    assert run["notebooks"] == run["students"] * len(run["assignments"])
    # The times are kept to 0.1 s, the rates and the ratio computed before that rounding.
    assert run["plain_per_minute"] == pytest.approx(60 * run["notebooks"] / run["plain_seconds"], rel=2e-3)
    assert run["ours_per_minute"] == pytest.approx(60 * run["notebooks"] / run["ours_seconds"], rel=2e-3)
    assert run["ratio"] == pytest.approx(run["plain_seconds"] / run["ours_seconds"], rel=2e-3)


def test_the_busy_ratio_run_is_complete_and_ran_beside_a_busy_process():
    run = _read("ratio_busy.json")
    assert set(PROVENANCE) <= set(run) and run["command"][:3] == ["python", "-m", "autograder.bench"]
    assert run["command"][run["command"].index("--beside-busy") + 1] == "1" and run["busy_processes"] == 1
    assert run["sandboxed"] is True and run["notebooks"] == run["students"] * len(run["assignments"])
    assert run["ratio"] == pytest.approx(run["ours_per_minute"] / run["plain_per_minute"], rel=2e-3)


def test_the_ratio_runs_profile_adds_up():
    # Each phase's share is its time over all timed notebooks, over the sum of every phase's time.
    run = _read("ratio.json")
    profile = run["profile"]
    assert profile["notebooks"] == run["notebooks"]
    totals = {row["phase"]: row["mean_seconds"] * row["notebooks"] for row in profile["phases"]}
    assert sum(row["share"] for row in profile["phases"]) == pytest.approx(1.0, abs=0.01)
    assert profile["mean_seconds_per_notebook"] == pytest.approx(sum(totals.values()) / profile["notebooks"],
                                                                 rel=0.01)
    for row in profile["phases"]:
        assert row["share"] == pytest.approx(totals[row["phase"]] / sum(totals.values()), abs=0.002)
    assert run["plain_seconds_per_notebook"] == pytest.approx(run["plain_seconds"] / run["notebooks"], rel=2e-3)


def test_the_scaling_run_is_complete_and_consistent():
    run = _read("scaling.json")
    assert set(PROVENANCE) <= set(run) and "--workers" in run["command"]
    one, two = run["seconds"]["1"], run["seconds"]["2"]
    assert run["efficiency"]["2"] == pytest.approx(one / (2 * two), rel=2e-3)
    assert run["seconds_per_notebook"] == pytest.approx(one / run["notebooks"], rel=2e-3)


def _guide_text() -> str:
    if not GUIDE.is_file():
        pytest.fail(f"no built guide at {GUIDE}: run `make book` first (`make test` does)")
    text = html.unescape(re.sub(r"<[^>]+>", "", GUIDE.read_text(encoding="utf-8")))
    return text.replace("\u2019", "'")  # the build's typographic apostrophe, as the data writes it


def test_the_guide_prints_the_committed_figures():
    text = " ".join(_guide_text().split())
    ratio, scaling = _read("ratio.json"), _read("scaling.json")
    assert f"a ratio of {ratio['ratio']:.2f}" in text
    assert f"({ratio['plain_seconds']:.1f} s)" in text and f"({ratio['ours_seconds']:.1f} s)" in text
    assert f"a parallel efficiency of {scaling['efficiency']['2']:.2f}" in text
    busy = _read("ratio_busy.json")
    assert "beside 1 process that keeps a core busy" in text and f"a ratio of {busy['ratio']:.2f}." in text
    assert f"need {scaling['workers_needed']} such workers" in text
    for row in ratio["profile"]["phases"]:
        assert f"{row['phase']}: mean {row['mean_seconds']:.2f} s, median {row['median_seconds']:.2f} s" in text, (
            row["phase"])
