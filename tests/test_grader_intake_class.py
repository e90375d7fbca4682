"""The class folder cannot make the intake read another file or stop the batch (autograder.student.safe_files,
autograder.student.received, collect).

A notebook with a second name (a hard link to another student's notebook or to the released sources) is
refused like a symbolic link; a folder on another file system (a mount point) is not entered; the copies into
``received/`` stop at the class's cap and at the free space of the grader's folder, and a copy that fails on a
full disk gives its submission 0 with the reason while the others are received. The mounts are made in a
namespace of their own (bubblewrap, with a tmpfs of a chosen size), as a student's server could hold them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.intake.submissions import collect
from autograder.student import received as received_module

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal")
SOURCE = ROOT / "autograder" / "source" / "02_sinusoidal" / "02_sinusoidal.ipynb"
NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
HARD_LINK = "files with more than one name are not read, like symbolic links"
MOUNT_POINT = "is a mount point (another file system); mount points in a class's folder are not entered"


def _put(path: Path, content: bytes = NOTEBOOK) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _copies(received: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(received)): path.read_bytes()
        for path in received.rglob("*")
        if stat.S_ISREG(path.lstat().st_mode)
    }


def _by_student(collection) -> dict:
    return {submission.student: submission for submission in collection.submissions}


# ------------------------------------------------------------------------------------------------ hard links


def test_a_hard_link_to_another_students_notebook_is_refused_for_both_names(tmp_path):
    bob = _put(tmp_path / "class" / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"bob's own work")
    ada = tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    ada.parent.mkdir(parents=True)
    os.link(bob, ada)
    _put(tmp_path / "class" / "cy" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"cy's work")
    received = tmp_path / "received"
    found = _by_student(collect(tmp_path / "class", ASSIGNMENTS, received))
    for student in ("ada", "bob"):  # one file under two names: neither name can say it is the original
        assert found[student].path is None
        assert found[student].reason == f"02_sinusoidal.ipynb has 2 hard links; {HARD_LINK}"
        assert found[student].notes[0] == f"not graded: {found[student].reason}"
    assert _copies(received) == {"cy/02_sinusoidal/02_sinusoidal.ipynb": b"cy's work"}


def test_a_hard_link_to_the_released_sources_is_refused(tmp_path):
    sources = tmp_path / "course" / "source" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    _put(sources, SOURCE.read_bytes())  # the answer key, on the class folder's file system
    notebook = tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    notebook.parent.mkdir(parents=True)
    os.link(sources, notebook)
    received = tmp_path / "received"
    [submission] = collect(tmp_path / "class", ASSIGNMENTS, received).submissions
    assert submission.reason == f"02_sinusoidal.ipynb has 2 hard links; {HARD_LINK}"
    assert _copies(received) == {}


def test_an_exchange_file_with_a_second_name_is_not_used(tmp_path):
    folder = tmp_path / "class" / "ada" / "02_sinusoidal"
    _put(folder / "02_sinusoidal.ipynb")
    os.link(_put(tmp_path / "elsewhere.txt", b"2020-01-01 00:00:00"), folder / "timestamp.txt")
    [submission] = collect(tmp_path / "class", ASSIGNMENTS, tmp_path / "received").submissions
    assert submission.path is not None
    assert submission.notes == (f"timestamp.txt next to the notebook was not used: it has 2 hard links; {HARD_LINK}",)


def test_only_a_timestamp_that_collect_wrote_is_used_as_the_submission_time(tmp_path):
    """A student's own timestamp.txt (in a class folder or a zip) says nothing of when the work was handed in."""
    from autograder.course_directory import copy_exchange_files
    from autograder.intake.exchange import collected_timestamps, record_collected

    written = b"2026-11-27 08:40:00.123456 UTC"
    folders = {}
    for student, text in (("ada", written), ("bob", b"2099-12-31 23:59:59 UTC")):
        folders[student] = tmp_path / "class" / student / "02_sinusoidal"
        _put(folders[student] / "timestamp.txt", text)
    record_collected(tmp_path / "class", "02_sinusoidal", "ada", written)
    record_collected(tmp_path / "class", "02_sinusoidal", "bob", written)  # collect wrote another time for bob
    digests = collected_timestamps(tmp_path / "class", "02_sinusoidal")
    assert set(digests) == {"ada", "bob"} and collected_timestamps(tmp_path / "elsewhere", "02_sinusoidal") == {}
    for student, used in (("ada", True), ("bob", False)):
        destination = tmp_path / "out" / student
        notes = copy_exchange_files(folders[student], [destination], digests.get(student))
        assert (destination / "timestamp.txt").exists() == used, student
        assert bool(notes) != used and all("collect did not write it" in note for note in notes), notes
    assert copy_exchange_files(folders["ada"], [tmp_path / "zip"], None)  # no record at all: not used either
    assert not (tmp_path / "zip" / "timestamp.txt").exists()


# ------------------------------------------------------------------------------------------------ mount points


def _bwrap_missing() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    probe = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/mnt", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else f"bwrap cannot mount here: {probe.stderr.decode()[:200]}"


needs_mounts = pytest.mark.skipif(_bwrap_missing() is not None, reason=str(_bwrap_missing()))


def _collect_with_mounts(
    mounts: list[str], prepare: str, class_folder: Path, received: Path, fds: tuple[int, ...] = ()
) -> dict:
    """Run ``prepare`` then ``collect`` in a mount namespace where ``mounts`` (bwrap arguments) are mounted;
    the collection as JSON."""
    script = textwrap.dedent(
        f"""
        import json, pathlib
        from autograder.intake.submissions import collect
        {prepare}
        collection = collect(pathlib.Path({str(class_folder)!r}), {ASSIGNMENTS!r}, pathlib.Path({str(received)!r}))
        print(json.dumps({{
            "submissions": {{s.student: [s.path and str(s.path), s.reason] for s in collection.submissions}},
            "warnings": collection.warnings,
        }}))
        """
    )
    done = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", *mounts, sys.executable, "-c", script],
        capture_output=True, text=True, cwd=ROOT, timeout=120, pass_fds=fds, check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_mounts
def test_a_mount_point_in_the_class_folder_is_not_entered(tmp_path):
    class_folder = tmp_path / "class"
    _put(class_folder / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"ada's work")
    bob, cy = class_folder / "bob", class_folder / "cy" / "02_sinusoidal"
    bob.mkdir()
    cy.mkdir(parents=True)
    prepare = (  # written inside the mounts: a student's folder and an assignment folder on a tmpfs
        f"pathlib.Path({str(bob / '02_sinusoidal')!r}).mkdir(); "
        f"pathlib.Path({str(bob / '02_sinusoidal' / '02_sinusoidal.ipynb')!r}).write_bytes(b'elsewhere'); "
        f"pathlib.Path({str(cy / '02_sinusoidal.ipynb')!r}).write_bytes(b'elsewhere')"
    )
    found = _collect_with_mounts(["--tmpfs", str(bob), "--tmpfs", str(cy)], prepare, class_folder, tmp_path / "received")
    assert found["submissions"] == {"ada": [str(tmp_path / "received/ada/02_sinusoidal/02_sinusoidal.ipynb"), None]}
    assert f"cy/02_sinusoidal: not read: 02_sinusoidal {MOUNT_POINT}" in found["warnings"]
    assert f"the class's folder: bob {MOUNT_POINT}; not read" in found["warnings"]
    assert _copies(tmp_path / "received") == {"ada/02_sinusoidal/02_sinusoidal.ipynb": b"ada's work"}


@needs_mounts
def test_a_notebook_mounted_from_another_file_system_is_not_copied(tmp_path):
    notebook = _put(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"ada's placeholder")
    key = _put(tmp_path / "key.ipynb", b"the answer key")
    with open(key, "rb") as source:  # bwrap copies it onto its own tmpfs and binds that file on the notebook
        mounts = ["--ro-bind-data", str(source.fileno()), str(notebook)]
        found = _collect_with_mounts(mounts, "", tmp_path / "class", tmp_path / "received", (source.fileno(),))
    assert found["submissions"] == {"ada": [None, f"02_sinusoidal.ipynb {MOUNT_POINT}"]}
    assert _copies(tmp_path / "received") == {}


@needs_mounts
def test_the_one_folder_the_class_folder_holds_may_be_a_mount_of_the_instructor_s(tmp_path):
    submitted = tmp_path / "class" / "submitted"  # e.g. nbgrader's submitted/ on a network file system
    submitted.mkdir(parents=True)
    notebook = submitted / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    prepare = (
        f"pathlib.Path({str(notebook.parent)!r}).mkdir(parents=True); "
        f"pathlib.Path({str(notebook)!r}).write_bytes(b'ada on the mount')"
    )
    found = _collect_with_mounts(["--tmpfs", str(submitted)], prepare, tmp_path / "class", tmp_path / "received")
    assert found == {
        "submissions": {"ada": [str(tmp_path / "received/ada/02_sinusoidal/02_sinusoidal.ipynb"), None]},
        "warnings": [],
    }


# ----------------------------------------------------------------------------------- the class's cap and disk


def test_the_class_cap_refuses_the_file_that_would_pass_it_and_receives_the_rest(tmp_path):
    for student, size in (("aaa_hoarder", 3000), ("bob", 400), ("cy", 400)):
        _put(tmp_path / "class" / student / "02_sinusoidal" / "02_sinusoidal.ipynb", b"x" * size)
    received = tmp_path / "received"
    found = _by_student(collect(tmp_path / "class", ASSIGNMENTS, received, max_bytes=2000))
    assert found["aaa_hoarder"].path is None
    assert found["aaa_hoarder"].reason == (
        "02_sinusoidal.ipynb is 3000 bytes and was not copied: the class's files may take at most 2000 bytes of "
        "the grader's folder (0 are taken; grade --max-class-mb sets the cap)"
    )
    assert found["aaa_hoarder"].grader_failure  # the grader's limit, not the student's fault (round 30)
    assert found["bob"].path is not None and found["cy"].path is not None
    assert not found["bob"].grader_failure
    assert sum(len(content) for content in _copies(received).values()) == 800


@pytest.mark.parametrize("max_bytes", [0, -1, 1.5, True])
def test_a_cap_that_is_no_positive_number_of_bytes_is_refused(tmp_path, max_bytes):
    with pytest.raises(ValueError, match="the class's cap must be a positive number of bytes"):
        collect(tmp_path, ASSIGNMENTS, tmp_path / "received", max_bytes=max_bytes)


def _run_with_small_disk(tmp_path: Path, disk_bytes: int, python: str) -> dict:
    """Collect the class of ``tmp_path / "class"`` into a tmpfs of ``disk_bytes`` (a grader's full temporary
    folder), after ``python`` ran in the same process; the collection as JSON."""
    received = tmp_path / "small-disk"
    received.mkdir()
    script = textwrap.dedent(
        f"""
        import json, pathlib
        from autograder.student import received as received_module
        from autograder.intake.submissions import collect
        {python}
        collection = collect(pathlib.Path({str(tmp_path / "class")!r}), {ASSIGNMENTS!r}, pathlib.Path({str(received / "received")!r}))
        print(json.dumps({{s.student + "/" + s.assignment: [s.reason, s.grader_failure] for s in collection.submissions}}))
        """
    )
    done = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--size", str(disk_bytes), "--tmpfs", str(received),
         sys.executable, "-c", script],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    # a copy the grader could not keep (its disk) is the grader's failure; the others are nobody's
    assert all(grader_failure == (reason is not None) for reason, grader_failure in found.values()), found
    return {key: reason for key, (reason, _) in found.items()}


def _hoarder_and_honest(tmp_path: Path) -> None:
    """One student with two notebooks of 3 MB (under the notebook cap), sorted first; two honest ones."""
    for assignment in ASSIGNMENTS:
        _put(tmp_path / "class" / "aaa_hoarder" / assignment / f"{assignment}.ipynb", b"x" * (3 * 1024**2))
    for student in ("bob", "cy"):
        _put(tmp_path / "class" / student / "02_sinusoidal" / "02_sinusoidal.ipynb", NOTEBOOK)


@needs_mounts
def test_a_student_who_would_fill_the_disk_is_refused_before_the_copy_and_the_others_are_received(tmp_path):
    _hoarder_and_honest(tmp_path)
    reasons = _run_with_small_disk(
        tmp_path, 5 * 1024**2, "received_module.RESERVED_FREE_BYTES = 1024**2"
    )
    assert reasons["bob/02_sinusoidal"] is None and reasons["cy/02_sinusoidal"] is None
    assert reasons["aaa_hoarder/01_permutation"] is None  # 3 MB fit in 5 MB, 1 MB kept free; 3 more do not
    reason = reasons["aaa_hoarder/02_sinusoidal"]
    assert reason.startswith("02_sinusoidal.ipynb is 3145728 bytes and was not copied: the grader's folder has")
    assert f"and {1024**2} must stay free for the grading" in reason


@needs_mounts
def test_a_disk_that_fills_during_a_copy_refuses_that_submission_only(tmp_path):
    _hoarder_and_honest(tmp_path)
    # The free space checked before each copy reads as plenty (another process fills the disk meanwhile):
    # the write itself meets ENOSPC, the partial copy is deleted and the next students still fit.
    reasons = _run_with_small_disk(
        tmp_path, 4 * 1024**2, "received_module.free_bytes = lambda folder: 10 * 1024**3"
    )
    assert reasons["bob/02_sinusoidal"] is None and reasons["cy/02_sinusoidal"] is None
    assert reasons["aaa_hoarder/01_permutation"] is None
    assert reasons["aaa_hoarder/02_sinusoidal"] == (
        "02_sinusoidal.ipynb could not be copied into the grader's folder (No space left on device)")


def test_the_free_space_is_read_from_the_grader_folder(tmp_path, monkeypatch):
    _put(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb")
    asked = []
    monkeypatch.setattr(received_module, "free_bytes", lambda folder: asked.append(folder) or 0)
    [submission] = collect(tmp_path / "class", ASSIGNMENTS, tmp_path / "received").submissions
    assert asked == [tmp_path / "received"]
    assert "the grader's folder has 0 bytes free" in submission.reason
    assert submission.grader_failure


@pytest.mark.slow
def test_a_notebook_the_grader_has_no_room_for_is_the_grader_s_failure_and_a_link_the_student_s(
        tmp_path, monkeypatch):
    """Round 30: a student filled the grader's temporary folder, and every notebook that was not copied was
    graded 0 as if it were the student's answer now, which removed every hand grade of the class for good. A
    grader's failure keeps the hand grades and is graded again by the next run (tests/test_grader_records.py)."""
    from autograder.grade import grade

    _put(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", NOTEBOOK)
    (tmp_path / "class" / "bob" / "02_sinusoidal").mkdir(parents=True)
    (tmp_path / "class" / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(received_module, "free_bytes", lambda folder: 0)
    results = {result.student: result for result in grade(tmp_path / "class", tmp_path / "out", jobs=1)}
    assert results["ada"].grader_failure and "the grader's folder has 0 bytes free" in results["ada"].reason
    assert not results["bob"].grader_failure and "link" in results["bob"].reason


def test_what_was_not_read_of_a_students_folder_is_kept_as_that_students(tmp_path):
    """grade gives such a student rows (tests/test_grader_roundtrip.py); the intake says whose each warning is."""
    from autograder.intake.submissions import Skipped

    root = tmp_path / "class"
    _put(root / "ana" / "02_sinusoidal.ipynb")  # one folder too high
    _put(root / "bob" / "homework" / "homework.ipynb")  # an unknown assignment
    _put(root / "carl" / "01_permutation" / "deeper" / "01_permutation.ipynb")  # one folder too deep
    _put(root / "stray.ipynb")  # the class's top: nobody's
    _put(tmp_path / "elsewhere" / "01_permutation" / "01_permutation.ipynb")
    (root / "eve").symlink_to(tmp_path / "elsewhere")  # a student's folder that is a link
    collection = collect(root, ASSIGNMENTS, tmp_path / "received")
    assert collection.submissions[0].student == "carl" and len(collection.submissions) == 1
    whose = sorted((one.student, one.assignment) for one in collection.skipped)
    assert whose == [("ana", "02_sinusoidal"), ("bob", None), ("carl", "01_permutation"), ("eve", None)]
    assert all(isinstance(one, Skipped) and one.reason in collection.warnings for one in collection.skipped)
    assert any(warning.startswith("stray.ipynb: not graded") for warning in collection.warnings)
    assert "stray.ipynb" not in {one.student for one in collection.skipped}
