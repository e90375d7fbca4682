"""The grading stage (autograder/sandbox/stage.py) and what crosses back from it (autograder/sandbox/crossing.py).

The stage is where a student's bytes are read; these tests run its sandbox for real (bwrap), with a small
script in place of the grading, and check what it promises: the capped folders, no capability, a memory the
nested kernel cannot read, a wall-clock limit that ends the whole process group, a bounded answer; and that
the worker accepts an answer only of the exact shape it expects.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.sandbox import crossing, stage
from autograder.sandbox.crossing import AnswerError, check_autograded, read_answer
from autograder.sandbox.launcher import Limits, bwrap_problem
from autograder.sandbox.stage import bwrap_stage_argv, run_stage, stage_environment
from autograder.types import LayoutItem

LAYOUT = (LayoutItem("first_test", 2.0, "code"), LayoutItem("written", 3.0, "markdown"))


def _notebook_text(outputs=()) -> str:
    notebook = new_notebook(cells=[new_code_cell("x = 1", outputs=list(outputs))])
    return nbformat.writes(notebook)


def _answer(**changes) -> dict:
    answer = {
        "items": [
            {"grade_id": "first_test", "score": 2.0, "max_score": 2.0, "status": "passed", "message": ""},
            {"grade_id": "written", "score": 0.0, "max_score": 3.0, "status": "manual", "message": "to be graded"},
        ],
        "notes": ["a note"],
        "reason": None,
        "feedback": "<html><body>page</body></html>",
        "autograded": _notebook_text(),
        "log": "log",
    }
    answer.update(changes)
    return answer


def _read(answer: dict):
    return read_answer(json.dumps(answer).encode("ascii"), LAYOUT)


# ---------------------------------------------------------------------------------------------------------
# What crosses back
# ---------------------------------------------------------------------------------------------------------


def test_a_well_formed_answer_is_accepted_with_the_release_s_points():
    answer = _read(_answer())
    assert [(item.grade_id, item.score, item.max_score, item.status) for item in answer.items] == [
        ("first_test", 2.0, 2.0, "passed"),
        ("written", 0.0, 3.0, "manual"),
    ]
    assert answer.notes == ["a note"] and answer.reason is None and answer.failure is None


@pytest.mark.parametrize(
    "change, words",
    [
        ({"extra": 1}, "keys among"),
        ({"notes": "not a list"}, "notes must be a list"),
        ({"notes": [1]}, "not text"),
        ({"notes": ["x" * (crossing.MAX_NOTE + 1)]}, "characters"),
        ({"log": ["x"]}, "not text"),
        ({"items": []}, "one per graded cell"),
        ({"feedback": None}, "must hold the feedback page"),
    ],
)
def test_an_answer_of_another_shape_is_refused(change, words):
    with pytest.raises(AnswerError, match=words):
        _read(_answer(**change))


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("grade_id", "another_test", "names another cell"),
        ("max_score", 20.0, "names another cell"),
        ("score", 2.5, "outside 0..2.0"),
        ("score", -1.0, "outside"),
        ("score", "2", "not a number"),
        ("score", True, "not a number"),
        ("score", float("nan"), "not a number"),
        ("status", "hand-graded", "not one of"),
        ("message", "m" * (crossing.MAX_MESSAGE + 1), "characters"),
    ],
)
def test_a_forged_item_is_refused(field, value, words):
    answer = _answer()
    answer["items"][0][field] = value
    data = json.dumps(answer, allow_nan=True).encode("ascii")
    with pytest.raises(AnswerError, match=words):
        read_answer(data, LAYOUT)


def test_an_answer_that_is_not_ascii_json_is_refused():
    for data in (b"", b"{", "{\"log\": \"\u00e9\"}".encode(), b"[" * 100_000 + b"]" * 100_000):
        with pytest.raises(AnswerError):
            read_answer(data, LAYOUT)


@pytest.mark.parametrize(
    "output",
    [
        new_output("display_data", data={"application/javascript": "alert(1)"}),
        new_output("display_data", data={"text/html": "<b>x</b>", "image/svg+xml": "<svg onload=alert(1)>"}),
        new_output("display_data", data={"image/png": "iVBORw0KGgo="}, metadata={"image/png": {"width": "1 onerror=alert(1)"}}),
        new_output("display_data", data={"image/png": "iVBORw0KGgo="}, metadata={"image/png": {"width": 0}}),
        new_output("display_data", data={"image/png": "iVBORw0KGgo="}, metadata={"image/png": {"alt": "x"}}),
        new_output("display_data", data={"text/plain": "x"}, metadata={"isolated": True}),
        new_output("execute_result", data={"text/plain": "x"}, metadata={"application/json": {"a": 1}}, execution_count=1),
    ],
)
def test_an_autograded_notebook_with_outputs_outside_the_allowlist_is_refused(output):
    with pytest.raises(AnswerError):
        check_autograded(_notebook_text([output]))


def test_an_autograded_notebook_with_allowed_outputs_passes():
    outputs = [
        new_output("stream", name="stdout", text="hello"),
        new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}, metadata={"image/png": {"width": 640, "height": 480}}),
        new_output("execute_result", data={"text/html": "<b>x</b>", "text/plain": "x"}, execution_count=1),
    ]
    check_autograded(_notebook_text(outputs))


def test_an_autograded_cell_with_other_metadata_is_refused():
    notebook = new_notebook(cells=[new_code_cell("x = 1", metadata={"jupyter": {"source_hidden": True}})])
    with pytest.raises(AnswerError, match="allowlist"):
        check_autograded(nbformat.writes(notebook))


def _item_cell(item: object) -> str:
    metadata = {"nbgrader": {"grade": True, "grade_id": "t", "points": 1}, "autograder": item}
    return nbformat.writes(new_notebook(cells=[new_code_cell("x = 1", metadata=metadata)]))


def test_an_autograded_cell_names_its_item_as_a_short_text_only():
    check_autograded(_item_cell({"item": "Quiz 1"}))
    for item in ({"item": "4.2", "href": "x"}, {"item": ""}, {"item": "4" * 41}, {"item": ["4.2"]}, "4.2"):
        with pytest.raises(AnswerError, match="names its item"):
            check_autograded(_item_cell(item))


def test_the_stage_keeps_its_notes_and_reason_within_what_the_worker_accepts(monkeypatch):
    """Round 19: the notes and the reason are partly the student's (one note per cell, a file's or a kernel's
    name, a validation message quoting a value): past the crossing's caps the honest stage's answer became a
    failure of the grader, graded again by every run. The stage cuts them, and says so."""
    from autograder.sandbox import grading_stage

    long = "x" * (crossing.MAX_NOTE * 2)
    monkeypatch.setattr(grading_stage, "_grade", lambda request, log: {
        "reason": "r" * (crossing.MAX_REASON + 500), "notes": [long] * (crossing.MAX_NOTES + 50), "log": ""})
    answer = read_answer(json.dumps(grading_stage.grade_in_stage(None)).encode("ascii"), LAYOUT)
    assert answer.failure is None and len(answer.notes) == crossing.MAX_NOTES
    assert answer.notes[-1] == "... and 51 more notes like these"
    assert answer.notes[0].endswith(f"[... {len(long)} characters in all]") and len(answer.notes[0]) == crossing.MAX_NOTE
    assert answer.reason.endswith(f"[... {crossing.MAX_REASON + 500} characters in all]")


def test_a_feedback_page_past_the_crossing_s_cap_is_replaced_by_a_short_one():
    """Round 20: the rebuild bounds what the renderer reads, not what it writes (highlighted code grows 27 times);
    a page past the cap made the answer a grader's failure. The stage sends a short page instead, and the grades."""
    from autograder.sandbox.grading_stage import _page_within_the_crossing

    assert _page_within_the_crossing("<p>ok</p>") == "<p>ok</p>"
    short = _page_within_the_crossing("x" * (crossing.MAX_PAGE + 1))
    assert len(short) < 1000 and f"it came to {crossing.MAX_PAGE + 1} characters" in short


def test_an_answer_past_the_bytes_the_worker_reads_loses_its_page_then_its_outputs_then_is_a_reason(monkeypatch):
    """Round 21: the rebuild's budgets count characters, and a non-ASCII character costs up to 12 bytes in the
    stage's ASCII JSON; an answer past the worker's cap was a failure of the grader, graded again by every run.
    The stage drops the page, then the outputs (with a note), and past that answers a reason."""
    from autograder.sandbox import grading_stage

    wide = "\U0001f600" * 1000  # 12 bytes each once escaped
    notebook = nbformat.writes(new_notebook(cells=[new_code_cell("x = 1", outputs=[
        new_output("stream", name="stdout", text=wide)])]))
    items = [{"grade_id": "first_test", "score": 2.0, "max_score": 2.0, "status": "passed", "message": ""},
             {"grade_id": "written", "score": 0.0, "max_score": 3.0, "status": "manual", "message": ""}]
    graded = {"items": items, "notes": [], "reason": None, "feedback": wide * 4, "autograded": notebook, "log": ""}

    def answered(budget: int):
        monkeypatch.setattr(grading_stage, "RESPONSE_BUDGET", budget)
        monkeypatch.setattr(grading_stage, "_grade", lambda request, log: dict(graded))
        response = grading_stage.grade_in_stage(None)
        return read_answer(json.dumps(response, ensure_ascii=True).encode("ascii"), LAYOUT)

    whole = answered(10**9)
    assert whole.feedback == wide * 4 and wide in whole.autograded
    without_page = answered(30_000)  # the page alone is 48,000 bytes
    assert "This feedback page was not kept" in without_page.feedback and wide in without_page.autograded
    without_outputs = answered(2_000)
    assert wide not in without_outputs.autograded and without_outputs.items is not None
    assert without_outputs.notes[0].startswith("the notebook's outputs were left out")
    # Round 22: a student whose notes fill the crossing's count still gets the note, first.
    graded["notes"] = [f"note {index}" for index in range(crossing.MAX_NOTES)]
    full = answered(6_000)
    assert wide not in full.autograded and len(full.notes) == crossing.MAX_NOTES
    assert full.notes[0].startswith("the notebook's outputs were left out")
    graded["notes"] = []
    reason = answered(100)
    assert reason.items is None and reason.reason.startswith("the graded notebook and its page came to more")


def _nbgrader_cell(nbgrader: object) -> str:
    return nbformat.writes(new_notebook(cells=[new_code_cell("x = 1", metadata={"nbgrader": nbgrader})]))


def test_an_autograded_cell_holds_nbgrader_fields_of_their_types_only():
    check_autograded(_nbgrader_cell({"grade": True, "grade_id": "t", "points": 1.5, "schema_version": 3}))
    for nbgrader in ({"grade": 1}, {"points": True}, {"points": "1"}, {"grade_id": {"a": 1}},
                     {"grade_id": "t" * 101}, {"points": float("inf")}, {"onload": "x"}, ["grade"],
                     {"grade_id": 'q1"><style>.score{display:none}</style>'}, {"cell_type": "code\n"}):
        with pytest.raises(AnswerError, match="nbgrader metadata"):
            check_autograded(_nbgrader_cell(nbgrader))


# ---------------------------------------------------------------------------------------------------------
# The stage's process: wall clock, answer size
# ---------------------------------------------------------------------------------------------------------


def test_a_stage_past_its_wall_clock_is_ended_with_every_process_it_started(tmp_path):
    marker = tmp_path / "grandchild.pid"
    script = textwrap.dedent(
        f"""
        import subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        open({str(marker)!r}, "w").write(str(child.pid))
        time.sleep(300)
        """
    )
    started = time.monotonic()
    outcome = run_stage(b"", [sys.executable, "-c", script], dict(os.environ), Limits(), seconds=3)
    assert time.monotonic() - started < 60
    assert outcome.stopped == "grading took longer than 3 seconds in all and was stopped"
    grandchild = Path(f"/proc/{int(marker.read_text())}/stat")
    time.sleep(0.5)
    # gone, or a zombie waiting for a parent that reaps it (a container's first process may not)
    assert not grandchild.exists() or grandchild.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_an_answer_beyond_its_size_is_dropped_whole(monkeypatch):
    monkeypatch.setattr(stage, "MAX_RESPONSE_BYTES", 1000)
    script = "import sys; sys.stdout.write('x' * 5000)"
    outcome = run_stage(b"", [sys.executable, "-c", script], dict(os.environ), Limits(), seconds=60)
    assert outcome.response == b""
    assert outcome.stopped == "the grading stage answered more than 1000 bytes"


def test_a_stage_reads_its_request_and_answers(monkeypatch):
    script = "import sys; data = sys.stdin.buffer.read(); sys.stdout.buffer.write(data[::-1])"
    outcome = run_stage(b"abc", [sys.executable, "-c", script], dict(os.environ), Limits(), seconds=60)
    assert (outcome.response, outcome.returncode, outcome.stopped) == (b"cba", 0, None)


# ---------------------------------------------------------------------------------------------------------
# The stage's sandbox, for real
# ---------------------------------------------------------------------------------------------------------

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap cannot run here: {bwrap_problem()}")


def _in_stage(tmp_path: Path, script: str, limits: Limits) -> subprocess.CompletedProcess:
    """Run ``script`` where the grading stage runs, after :func:`autograder.sandbox.stage.enter`."""
    jupyter = tmp_path / "jupyter"
    jupyter.mkdir()
    argv = bwrap_stage_argv(tmp_path, jupyter)[:-3]
    prologue = f"from autograder.sandbox.stage import enter\nfrom autograder.sandbox.launcher import Limits\nenter(Limits(**{limits.__dict__!r}), 100)\n"
    return subprocess.run(
        [*argv, sys.executable, "-c", prologue + textwrap.dedent(script)],
        env=stage_environment(jupyter, stage.HOME), capture_output=True, text=True, timeout=180, check=False,
    )


@needs_bwrap
def test_the_stage_holds_no_capability_and_writes_only_its_capped_folders(tmp_path):
    result = _in_stage(
        tmp_path,
        """
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        print("effective", status["CapEff"].strip(), "nnp", status["NoNewPrivs"].strip())
        for place in ("/usr/x", "/etc/x", "/x"):
            try:
                with open(place, "w") as handle:
                    handle.write("x")
                print("wrote", place)
            except OSError as error:
                print("refused", place)
        # opened for writing, never written: a machine-wide setting must not even open
        for place in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches"):
            try:
                os.close(os.open(place, os.O_WRONLY))
                print("wrote", place)
            except OSError as error:
                print("refused", place)
        count = 0
        try:
            while True:
                open(f"/grading/f{count}", "w").close()
                count += 1
        except OSError as error:
            print("files", count, error.errno)
        """,
        Limits(tmp_mb=4),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "effective 0000000000000000 nnp 1"
    assert [line for line in lines if line.startswith("wrote")] == []
    files, code = lines[-1].split()[1:]
    # the home folder and the kernel's folder take two of the stage's STAGE_FILES inodes (plus the root)
    assert int(files) <= stage.STAGE_FILES and int(files) >= stage.STAGE_FILES - 5 and code == "28"


@needs_bwrap
def test_the_nested_kernel_writes_within_its_quota_and_cannot_read_the_stage(tmp_path):
    kernel_script = textwrap.dedent(
        """
        import os
        for place in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe"):
            try:
                os.close(os.open(place, os.O_WRONLY))  # opened, never written
                print("writable", place)
            except OSError:
                pass
        readable = []
        for pid in [os.environ["STAGE_PID"]]:
            for name in ("environ", "mem", "maps"):
                try:
                    with open(f"/proc/{pid}/{name}", "rb") as handle:
                        handle.read(1)
                    readable.append(f"{pid}/{name}")
                except OSError:
                    pass
        print("readable", ",".join(readable) or "none")
        written = 0
        try:
            with open("/tmp/big", "wb") as handle:
                while True:
                    handle.write(b"x" * 65536)
                    handle.flush()
                    written += 65536
        except OSError as error:
            print("bytes", written, error.errno)
        os.remove("/tmp/big")
        count = 0
        try:
            while True:
                open(f"/dev/shm/f{count}", "w").close()
                count += 1
        except OSError as error:
            print("files", count, error.errno)
        """
    )
    result = _in_stage(
        tmp_path,
        f"""
        import os, subprocess, sys
        from autograder.sandbox.launcher import Settings, bwrap_argv, kernel_environment
        kernel = "/grading/kernel"
        for name in ("tmp", "shm", "runtime"):
            os.mkdir(f"{{kernel}}/{{name}}")
        settings = Settings(scratch=kernel + "/tmp", runtime=kernel + "/runtime", limits=Limits(tmp_mb=4), writable=kernel)
        argv = bwrap_argv(settings, [sys.executable, "-c", {kernel_script!r}])
        environment = {{**kernel_environment(settings), "STAGE_PID": str(os.getpid())}}
        done = subprocess.run(argv, env=environment, capture_output=True, text=True)
        print(done.stdout, done.stderr, sep="")
        """,
        Limits(tmp_mb=4),
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["readable"] == "none", result.stdout
    assert "writable" not in lines, result.stdout
    written, code = lines["bytes"].split()
    assert int(written) <= stage.kernel_quota_bytes(Limits(tmp_mb=4)) and code == "28"
    files, code = lines["files"].split()
    assert int(files) < stage.KERNEL_FILES and code == "28"


# ---------------------------------------------------------------------------------------------------------
# Through `grade`, as an instructor runs it
# ---------------------------------------------------------------------------------------------------------

ASSIGNMENT = "01_permutation"


def _class_with(tmp_path: Path, answers: dict[str, dict[str, str]]) -> Path:
    from planted import filled, solutions, write_submission

    root = tmp_path / "class"
    for student, changed in answers.items():
        write_submission(root, student, ASSIGNMENT, filled(ASSIGNMENT, {**solutions(ASSIGNMENT), **changed}))
    return root


@pytest.mark.slow
@needs_bwrap
def test_a_notebook_past_its_wall_clock_cap_is_stopped_and_told(tmp_path):
    """Every cell keeps under the per-cell limit, but together they pass the cap per notebook: the cells after
    the cap are not run, their tests fail, and the feedback and report.txt say why."""
    from autograder.grade import grade

    sleeper = "import time\ntime.sleep(200)\n"  # under the cell's limit (300 s), past the notebook's (60 s)
    root = _class_with(tmp_path, {"slow": {"equivariance_answer": sleeper + solutions_of("equivariance_answer")}})
    out = tmp_path / "out"
    started = time.monotonic()
    results = grade(root, out, jobs=1, timeout=300, limits=Limits(notebook_seconds=60), regrade=True)
    assert time.monotonic() - started < 200
    (result,) = results
    statuses = {item.grade_id: item.status for item in result.items}
    assert statuses["attention_test"] == "passed"  # before the cap
    assert statuses["equivariance_test"] == statuses["blind_test"] == "failed"  # after it: not run
    cap_note = "the notebook ran for its 60 seconds in all (the grader's cap per notebook)"
    assert any(note.startswith(cap_note) for note in result.notes)
    page = (out / "feedback" / "slow" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert html.escape(cap_note) in page
    assert cap_note in (out / "report.txt").read_text()


def solutions_of(grade_id: str) -> str:
    from planted import solutions

    return solutions(ASSIGNMENT)[grade_id]


@pytest.mark.slow
def test_grade_refuses_to_run_without_a_sandbox_unless_told(tmp_path):
    """`python -m autograder grade` where bwrap cannot be found: nothing is graded, the terminal says why and
    how to go on; with --no-sandbox it grades and says plainly what is unprotected."""
    from planted import ROOT, command_environment

    root = _class_with(tmp_path, {"s1": {}})
    environment = command_environment()
    environment["PATH"] = str(tmp_path / "no-programs-here")  # no bwrap on it (nor anything else)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "autograder", "grade", str(root), "--out", str(out), "--no-progress"]
    refused = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300, check=False)
    assert refused.returncode == 2
    assert "no submission was graded: the sandbox cannot run on this machine (bwrap is not installed" in refused.stderr
    assert "--no-sandbox" in refused.stderr
    assert not (out / "grades.csv").exists()
    allowed = subprocess.run(
        [*command, "--no-sandbox"], cwd=ROOT, env=command_environment(), capture_output=True, text=True, timeout=600,
        check=False,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "grading WITHOUT a sandbox (--no-sandbox)" in allowed.stderr
    assert "it can read every file that user can read" in allowed.stderr
    assert (out / "grades.csv").read_text().count("s1") == 1


def test_a_sandbox_problem_that_is_not_bubblewrap_s_suggests_no_unsandboxed_grading(tmp_path, monkeypatch):
    """Round 27: a folder another account could make first stopped grade with advice to pass --no-sandbox,
    which would run that account's notebook with no sandbox."""
    import autograder.grade

    root = _class_with(tmp_path, {"s1": {}})
    monkeypatch.setattr(autograder.grade, "bwrap_problem",
                        lambda: "the kernel's view of the course cannot be built (No space left on device)")
    with pytest.raises(ValueError, match="cannot be built") as refused:
        autograder.grade.grade(root, tmp_path / "out")
    assert "--no-sandbox" not in str(refused.value) and "fix what the reason names" in str(refused.value)
    monkeypatch.setattr(autograder.grade, "bwrap_problem", lambda: "bwrap cannot create a sandbox here (1)")
    with pytest.raises(ValueError, match="or pass --no-sandbox to grade without it"):
        autograder.grade.grade(root, tmp_path / "out")


@pytest.mark.slow
@needs_bwrap
def test_a_kernel_cannot_open_the_machine_s_settings_for_writing(tmp_path):
    """A grader running as root maps the sandbox's users onto root; the kernel still cannot open a machine-wide
    setting (a program the machine runs as root) for writing. The probe opens, never writes."""
    from autograder.grade import grade

    probe = (
        "import os\nopened = []\n"
        "for place in ('/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/proc/sysrq-trigger'):\n"
        "    try:\n        os.close(os.open(place, os.O_WRONLY))\n        opened.append(place)\n"
        "    except OSError:\n        pass\n"
        "assert not opened, opened\n"
    )
    root = _class_with(tmp_path, {"prober": {"attention_answer": probe + solutions_of("attention_answer")}})
    (result,) = grade(root, tmp_path / "out", jobs=1, regrade=True)
    statuses = {item.grade_id: item.status for item in result.items}
    assert statuses["attention_test"] == "passed", result.items


@pytest.mark.slow
@needs_bwrap
def test_links_pipes_and_a_full_quota_stay_with_their_submission(tmp_path):
    """In one batch: a notebook that links to the exercise's source (its solutions), one that is a named pipe,
    and a kernel that fills every place it can write (its /tmp, /dev/shm and the folder of its sockets) with
    bytes and with files; an honest neighbour beside them keeps every point."""
    from planted import ROOT, filled, solutions, write_submission

    from autograder.grade import grade

    root = tmp_path / "class"
    write_submission(root, "honest", ASSIGNMENT, filled(ASSIGNMENT, solutions(ASSIGNMENT)))
    filler = textwrap.dedent(
        """
        import os, glob
        places = ["/tmp", "/dev/shm", *{os.path.dirname(path) for path in glob.glob("/grading/kernel/runtime/*")}]
        for place in places:
            try:
                with open(os.path.join(place, "big"), "wb") as handle:
                    while True:
                        handle.write(b"x" * 1048576)
            except OSError:
                pass
            try:
                for index in range(1_000_000):
                    open(os.path.join(place, f"f{index}"), "w").close()
            except OSError:
                pass
        """
    )
    write_submission(root, "filler", ASSIGNMENT, filled(ASSIGNMENT, {**solutions(ASSIGNMENT), "attention_answer": filler + solutions_of("attention_answer")}))
    for student in ("linker", "piper"):
        (root / student / ASSIGNMENT).mkdir(parents=True)
    (root / "linker" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").symlink_to(
        ROOT / "autograder" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    )
    os.mkfifo(root / "piper" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    free_before = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    results = {result.student: result for result in grade(root, tmp_path / "out", jobs=2, limits=Limits(tmp_mb=16), regrade=True)}
    free_after = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert results["honest"].score == results["honest"].max_score == 13.0
    for student, words in (("linker", "is a symbolic link"), ("piper", "named pipe")):
        assert results[student].score == 0.0 and words in results[student].reason, results[student]
    assert results["filler"].reason is None and not results["filler"].grader_failure  # graded, as itself
    assert free_before - free_after < 64 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------------
# The worker's side: what it makes of a stage that failed
# ---------------------------------------------------------------------------------------------------------


def _task(tmp_path: Path):
    from autograder.types import Task

    return Task(
        student="ada", assignment="01_permutation", notebook=tmp_path / "n.ipynb", template=tmp_path,
        directory=tmp_path / "task", layout=LAYOUT, notes=("a note of the intake",), feedback=tmp_path / "f.html",
        log=tmp_path / "log.txt", timeout=None, autograded=tmp_path / "a.ipynb",
    )


@pytest.mark.parametrize(
    "outcome, reason, grader_failure",
    [
        (stage.StageOutcome(b"", b"Traceback", 1), "the grader failed on this submission (see its log)", True),
        (stage.StageOutcome(b'{"items": "forged"}', b"", 0), "the grader failed on this submission (see its log)", True),
        (stage.StageOutcome(b"", b"", None, "grading took longer than 9 seconds in all and was stopped"),
         "grading took longer than 9 seconds in all and was stopped", True),
        (stage.StageOutcome(b'{"failure": "the grader failed on this submission (see its log)", "log": "x"}', b"", 0),
         "the grader failed on this submission (see its log)", True),
        (stage.StageOutcome(b'{"reason": "the file is not valid JSON", "notes": ["n"], "log": ""}', b"", 0),
         "the file is not valid JSON", False),
    ],
)
def test_a_stage_that_failed_gives_zero_and_says_whose_failure_it_was(tmp_path, outcome, reason, grader_failure):
    from autograder.pipeline import _accept

    log: list[str] = []
    result = _accept(_task(tmp_path), outcome, "", log, {})
    assert (result.score, result.reason, result.grader_failure) == (0.0, reason, grader_failure)
    assert [item.status for item in result.items] == ["not graded", "not graded"]
    assert "a note of the intake" in result.notes
    page = (tmp_path / "f.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and html.escape(reason) in page


def test_a_stage_answer_becomes_the_result_and_its_page_starts_with_the_policy(tmp_path):
    from autograder.feedback.escape import CSP_META
    from autograder.pipeline import _accept

    answer = _answer(feedback="<html><head><script>alert(1)</script></head><body><p>page</p></body></html>")
    outcome = stage.StageOutcome(json.dumps(answer).encode("ascii"), b"", 0)
    result = _accept(_task(tmp_path), outcome, "", [], {})
    assert (result.score, result.reason, result.grader_failure) == (2.0, None, False)
    page = (tmp_path / "f.html").read_text()
    assert page.index(CSP_META) < page.index("<script>")  # the policy comes before any byte the stage wrote
    assert (tmp_path / "a.ipynb").read_text() == answer["autograded"]


@pytest.mark.slow
@needs_bwrap
def test_grade_with_withheld_answers_says_a_wrong_answer_is_wrong_and_no_more(tmp_path):
    """`python -m autograder grade --withhold-answers`, as the instructors' guide has it for feedback released
    while resubmission is open: a wrong quiz letter scores 0, and neither the feedback page nor grades.csv's
    messages explain it; the same submission graded with full feedback is told why."""
    from planted import ROOT, command_environment, solutions

    from autograder.verdicts.verdict import WITHHELD

    quizzes = {grade_id: text for grade_id, text in solutions(ASSIGNMENT).items() if grade_id.startswith("quiz_")}
    quiz, answer = next(iter(quizzes.items()))
    name, right = answer.split(" = ")
    wrong = next(letter for letter in "ABCD" if letter != right.strip().strip('"'))
    root = _class_with(tmp_path, {"s1": {quiz: f'{name} = "{wrong}"'}})
    pages = {}
    for mode, flags in (("withheld", ["--withhold-answers"]), ("full", [])):
        out = tmp_path / mode
        command = [sys.executable, "-m", "autograder", "grade", str(root), "--out", str(out), "--no-progress", *flags]
        run = subprocess.run(command, cwd=ROOT, env=command_environment(), capture_output=True, text=True,
                             timeout=600, check=False)
        assert run.returncode == 0, run.stderr
        pages[mode] = html.unescape((out / "feedback" / "s1" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text())
    assert WITHHELD in pages["withheld"]
    assert WITHHELD not in pages["full"] and "not the best answer" in pages["full"]
    assert "not the best answer" not in pages["withheld"]
