"""The class's gradebook (autograder/gradebook.py): SQLite by default, PostgreSQL through ``db_url``.

A small class (the full solution and the planted mistakes of 04_relative, whose written answer waits for an
instructor) is graded into each database; nbgrader's own ``nbgrader export`` must then read from it exactly the
rows of ``grades.csv``, and the written answer must wait for a manual grade. Expected totals are the round-trip
test's constants (tests/test_grader_roundtrip.py). Once a score is given by hand, as the formgrader saves it,
``python -m autograder grade`` prints and writes totals that count it, and names the items still waiting.

The PostgreSQL server is Debian's (``make test`` installs the ``postgresql`` package), started by this module on
loopback in a temporary folder, as the ``postgres`` user when the tests run as root. Its tests are skipped only
where the server's binaries are missing and ``CI`` is unset; in CI a missing server fails them.
"""

from __future__ import annotations

import csv
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from planted import run_module, write_full_and_mistakes

from autograder import CONFIG_FILE
from autograder.grade import grade

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_relative"
MANUAL_ITEM = "self_bias_answer"
# From tests/test_grader_roundtrip.py: 13 autograded points of 13 for the full solution, 6 with the mistakes.
EXPECTED_SCORES = {"full": 13.0, "mistakes": 7.0}
MAX_SCORE = 16.0
MANUAL_NUMBER = "4.6"  # the written answer's heading in the notebook: "## 4.6 ..."
HAND_POINTS = 2.0  # of its 3


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return sorted(csv.DictReader(handle), key=lambda row: (row["assignment"], row["student_id"]))


def _nbgrader_export(db_url: str, folder: Path) -> list[dict[str, str]]:
    """``nbgrader export --db URL``, run as an instructor would, in a course folder with our configuration."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(CONFIG_FILE, folder / CONFIG_FILE.name)
    target = folder / "export.csv"
    completed = run_module("nbgrader", "export", "--db", db_url, "--to", str(target), cwd=folder, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return _rows(target)


def _manual_grades(db_url: str) -> dict[str, tuple[float | None, bool, float | None]]:
    """For each student: the written answer's (automatic score, needs a manual grade, manual score)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gradebook:
        found = {}
        for student in EXPECTED_SCORES:
            grade = gradebook.find_grade(MANUAL_ITEM, ASSIGNMENT, ASSIGNMENT, student)
            found[student] = (grade.auto_score, grade.needs_manual_grade, grade.manual_score)
        return found


def _check_gradebook(db_url: str, out: Path, tmp_path: Path) -> None:
    ours = _rows(out / "grades.csv")
    assert {row["student_id"]: float(row["score"]) for row in ours} == EXPECTED_SCORES
    assert {float(row["max_score"]) for row in ours} == {MAX_SCORE}
    assert _nbgrader_export(db_url, tmp_path / "export") == ours
    assert _manual_grades(db_url) == {student: (None, True, None) for student in EXPECTED_SCORES}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    write_full_and_mistakes(root, ASSIGNMENT)
    return root


def test_the_default_gradebook_is_sqlite_in_the_output_folder_and_nbgrader_reads_grades_csv_from_it(
    graded_class, tmp_path
):
    out = tmp_path / "out"
    grade(graded_class, out, jobs=2)
    assert (out / "gradebook.db").is_file()
    _check_gradebook(f"sqlite:///{out / 'gradebook.db'}", out, tmp_path)


def test_a_url_that_is_not_a_database_url_is_refused_naming_db_url(graded_class, tmp_path):
    with pytest.raises(ValueError, match=r"db_url must be a database URL.*'not a url'"):
        grade(graded_class, tmp_path / "out", db_url="not a url")


def test_an_unreachable_database_is_refused_naming_db_url_and_hiding_the_password(graded_class, tmp_path):
    with socket.socket() as probe:  # a loopback port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ValueError, match=r"db_url postgresql://grader:\*\*\*@127\.0\.0\.1") as raised:
        grade(graded_class, tmp_path / "out", db_url=f"postgresql://grader:hunter2@127.0.0.1:{port}/none")
    assert "hunter2" not in str(raised.value)


def test_the_grade_command_refuses_a_password_on_its_command_line(tmp_path):
    """A command line is readable by every account of the machine while the command runs (/proc/PID/cmdline):
    the password goes through PGPASSWORD or ~/.pgpass, and a --db that holds one grades nothing."""
    (tmp_path / "class").mkdir()
    completed = run_module("autograder", "grade", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                           "--db", "postgresql://grader:hunter2@127.0.0.1:5432/posenc", timeout=120)
    assert completed.returncode == 2
    assert "--db postgresql://grader:***@127.0.0.1:5432/posenc holds a password" in completed.stderr
    assert "(postgresql://grader@127.0.0.1:5432/posenc)" in completed.stderr and "PGPASSWORD" in completed.stderr
    assert "hunter2" not in completed.stdout + completed.stderr
    assert not (tmp_path / "out" / "gradebook.db").exists()
    # Round 28: libpq also takes a password from the URL's query.
    completed = run_module("autograder", "grade", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                           "--db", "postgresql://grader@127.0.0.1/posenc?sslmode=require&Password=hunter2",
                           timeout=120)
    assert completed.returncode == 2 and "holds a password" in completed.stderr
    assert "(postgresql://grader@127.0.0.1/posenc?sslmode=require)" in completed.stderr
    assert "hunter2" not in completed.stdout + completed.stderr


def _grade_command(submissions: Path, out: Path) -> str:
    """``python -m autograder grade`` as an instructor runs it; its standard output."""
    completed = run_module("autograder", "grade", str(submissions), "--out", str(out), "--jobs", "2", timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


def _give_hand_grade(db_url: str, student: str, score: float) -> None:
    """What the formgrader does when an instructor types a score (nbgrader's GradeHandler.put)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id="posenc") as gradebook:
        grade = gradebook.find_grade(MANUAL_ITEM, ASSIGNMENT, ASSIGNMENT, student)
        grade.manual_score, grade.extra_credit = score, None
        grade.needs_manual_grade = grade.manual_score is None and grade.auto_score is None
        gradebook.db.commit()


def test_grade_prints_and_writes_totals_with_the_hand_grades_and_names_the_items_still_waiting(
    graded_class, tmp_path
):
    out = tmp_path / "out"
    first = _grade_command(graded_class, out)
    for student, score in EXPECTED_SCORES.items():
        assert f"{student}/{ASSIGNMENT}: {score:g} / {MAX_SCORE:g}\n" in first, first
    assert f"{ASSIGNMENT} {MANUAL_NUMBER} waits for a hand grade in 2 of 2 submissions: full, mistakes" in first

    _give_hand_grade(f"sqlite:///{out / 'gradebook.db'}", "full", HAND_POINTS)
    second = _grade_command(graded_class, out)  # nothing changed in the submissions: their results are reused
    expected = {"full": EXPECTED_SCORES["full"] + HAND_POINTS, "mistakes": EXPECTED_SCORES["mistakes"]}
    for student, score in expected.items():
        assert f"{student}/{ASSIGNMENT}: {score:g} / {MAX_SCORE:g}\n" in second, second
    assert f"{ASSIGNMENT} {MANUAL_NUMBER} waits for a hand grade in 1 of 2 submissions: mistakes\n" in second
    assert "full, mistakes" not in second
    assert {row["student_id"]: float(row["score"]) for row in _rows(out / "grades.csv")} == expected
    report = (out / "report.txt").read_text().splitlines()
    full = report.index(f"full/{ASSIGNMENT}: {expected['full']:g} / {MAX_SCORE:g}")
    mistakes = report.index(f"mistakes/{ASSIGNMENT}: {expected['mistakes']:g} / {MAX_SCORE:g}")
    assert report[full + 1] == f"  graded by hand: {MANUAL_NUMBER} ({HAND_POINTS:g} / 3)"
    assert report[mistakes + 1] == f"  waiting for a hand grade: {MANUAL_NUMBER} (3 points, counted 0 until graded)"
    assert MANUAL_ITEM not in "\n".join(report)


# ---------------------------------------------------------------------------------------------------------
# A real PostgreSQL server on loopback
# ---------------------------------------------------------------------------------------------------------


def _postgres_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_server():
    """``postgresql://grader@127.0.0.1:PORT/``: a fresh cluster, trusted on loopback, stopped afterwards."""
    binaries = _postgres_binaries()
    if binaries is None:
        message = "PostgreSQL's server binaries are missing (Debian: apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message + "; `make test` installs them")
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="autograder-postgres-"))
    root.chmod(0o755)
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: the package's own user runs it
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log, port = root / "data", root / "server.log", _free_port()

    def run(*command) -> None:
        completed = subprocess.run(
            [*as_user, *map(str, command)], capture_output=True, text=True, timeout=120, check=False
        )
        server_log = log.read_text() if log.exists() else ""
        assert completed.returncode == 0, completed.stdout + completed.stderr + server_log

    run(binaries / "initdb", "-D", data, "-U", "grader", "--auth=trust", "-E", "UTF8", "--no-sync")
    run(binaries / "pg_ctl", "-D", data, "-l", log, "-w", "-o", f"-h 127.0.0.1 -p {port} -k {root}", "start")
    try:
        yield f"postgresql://grader@127.0.0.1:{port}"
    finally:
        run(binaries / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _new_database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"


def test_a_postgresql_gradebook_holds_exactly_what_grades_csv_says(postgres_server, graded_class, tmp_path):
    db_url = _new_database(postgres_server, "gradebook_first")
    out = tmp_path / "out"
    grade(graded_class, out, jobs=2, db_url=db_url)
    assert not (out / "gradebook.db").exists()
    _check_gradebook(db_url, out, tmp_path)


def test_grading_again_updates_automatic_scores_and_keeps_the_instructors_manual_grades(
    postgres_server, graded_class, tmp_path
):
    from nbgrader.api import Gradebook

    db_url = _new_database(postgres_server, "gradebook_again")
    grade(graded_class, tmp_path / "first", jobs=2, db_url=db_url)
    with Gradebook(db_url) as gradebook:  # an instructor grades the written answer of one student
        written = gradebook.find_grade(MANUAL_ITEM, ASSIGNMENT, ASSIGNMENT, "full")
        written.manual_score, written.needs_manual_grade = 2.0, False
        gradebook.db.commit()
    grade(graded_class, tmp_path / "second", jobs=2, db_url=db_url)
    exported = {row["student_id"]: float(row["score"]) for row in _nbgrader_export(db_url, tmp_path / "export")}
    assert exported == {"full": EXPECTED_SCORES["full"] + 2.0, "mistakes": EXPECTED_SCORES["mistakes"]}
    assert _manual_grades(db_url) == {"full": (None, False, 2.0), "mistakes": (None, True, None)}
    with Gradebook(db_url) as gradebook:
        assert sorted(student.id for student in gradebook.students) == sorted(EXPECTED_SCORES)
        assert len(gradebook.find_assignment(ASSIGNMENT).submissions) == len(EXPECTED_SCORES)
