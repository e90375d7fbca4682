"""A hostile class (tests/redteam/hostile.py) graded in one batch beside honest students.

The batch runs as an instructor would run it, with secrets in the grader's environment, the class gradebook
outside the output folder, a mode-600 file, a Unix socket and another checkout's sources elsewhere on the
machine. What must hold: every attack earns 0; the honest students, graded on the same workers after the
attacks (and one of them beside 60 busy processes), get exactly their grades; the batch completes; no
kernel reaches any of those things or goes beyond its limits; nothing the students wrote starts a formula in
a CSV, a line in ``report.txt`` or a script in a feedback page, and no byte a kernel wrote reaches a log file
unescaped or unmarked as the kernel's.
"""

from __future__ import annotations

import ast
import copy
import csv
import html
import os
import re
import shutil
import socket
import tempfile
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
from planted import ROOT, filled, grade_id, released, sandbox_missing, solutions, write_submission
from redteam.hostile import KERNEL_ATTACKS, SYMPY_BOMB

from autograder.grade import grade
from autograder.sandbox import seccomp
from autograder.sandbox.cgroups import problem as cgroup_problem
from autograder.sandbox.launcher import KERNEL_OPEN_FILES, Limits

pytestmark = pytest.mark.slow

ASSIGNMENT = "01_permutation"
FIRST_ANSWER = "attention_answer"
HONEST = ("busy_processes_zneighbour", "zz_honest_1", "zz_honest_2", "zz_honest_3")
HONEST_SCORE = 13.0
LIMITS = Limits(memory_mb=2048, cpu_seconds=60, processes=64, tmp_mb=256)
SECRET_VALUES = ("secret-pg-password-31337", "secret-hub-token-31337")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _attack(code: str, probe: dict) -> object:
    notebook = released(ASSIGNMENT)
    for cell in notebook.cells:
        if grade_id(cell) == FIRST_ANSWER:
            cell.source = textwrap.dedent(code).strip().replace("{probe}", repr(probe))
    return notebook


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Things on the machine that no kernel may reach: a mode-600 file, a listening Unix socket and another
    checkout's exercise sources, under /var/tmp; secrets in the grader's environment."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-hostile-", dir="/var/tmp"))
    secret = folder / "secret.txt"
    secret.write_text("the secret file")
    secret.chmod(0o600)
    other = folder / "other-checkout" / "autograder" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    other.parent.mkdir(parents=True)
    shutil.copy(ROOT / "autograder" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", other)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "service.sock"))
    server.listen(50)
    server.settimeout(0.1)
    saved = {name: os.environ.get(name) for name in ("PGPASSWORD", "JUPYTERHUB_API_TOKEN")}
    os.environ.update(PGPASSWORD=SECRET_VALUES[0], JUPYTERHUB_API_TOKEN=SECRET_VALUES[1])
    yield {"folder": folder, "secret": secret, "other": other, "socket": folder / "service.sock", "server": server}
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.close()
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def batch(host, tmp_path_factory):
    if sandbox_missing() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_missing()}")
    root = tmp_path_factory.mktemp("hostile")
    submissions, out = root / "class", root / "out"
    gradebook = root / "elsewhere" / "classbook.db"
    gradebook.parent.mkdir()
    probe = {
        "secrets": [str(host["secret"]), str(host["other"]), str(gradebook), "/etc/shadow",
                    str(ROOT / "autograder" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")],
        "sockets": [str(host["socket"]), "/var/run/postgresql/.s.PGSQL.5432"],
        "public": "/nothing-is-public",
    }
    for name, code in KERNEL_ATTACKS.items():
        write_submission(submissions, name, ASSIGNMENT, _attack(code, probe))
    for student in HONEST:
        write_submission(submissions, student, ASSIGNMENT, filled(ASSIGNMENT, solutions(ASSIGNMENT)))
    sinusoidal = copy.deepcopy(released("02_sinusoidal"))
    for cell in sinusoidal.cells:
        if grade_id(cell) == "pe_d6_at_p_answer":
            cell.source = SYMPY_BOMB
    write_submission(submissions, "sympy_bomb", "02_sinusoidal", sinusoidal)
    # A lone surrogate, as JSON writes it (nbformat cannot write one).
    folder = submissions / "lone_surrogate" / ASSIGNMENT
    folder.mkdir(parents=True)
    raw = (ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb").read_text().replace('"source": [', '"source": ["\\ud800",', 1)
    (folder / f"{ASSIGNMENT}.ipynb").write_text(raw)
    latin = submissions / "latin1_name" / ASSIGNMENT
    latin.mkdir(parents=True)
    (latin / os.fsdecode(b"r\xe9sum\xe9.ipynb")).write_bytes((ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb").read_bytes())
    forged = submissions / "evil\nFORGED: 9 / 9" / ASSIGNMENT
    forged.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb", forged / f"{ASSIGNMENT}.ipynb")
    blank_learned = submissions / "blank_learned" / "03_learned"
    blank_learned.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "03_learned.ipynb", blank_learned / "03_learned.ipynb")
    results = grade(submissions, out, jobs=2, timeout=20, limits=LIMITS, db_url=f"sqlite:///{gradebook}")
    accepted = 0
    while True:
        try:
            host["server"].accept()[0].close()
            accepted += 1
        except OSError:
            break
    return {"results": {(r.student, r.assignment): r for r in results}, "out": out, "accepted": accepted}


def _pages(batch) -> dict[str, str]:
    pages = {}
    for path in (batch["out"] / "feedback").rglob("*.html"):
        pages[str(path.relative_to(batch["out"]))] = path.read_text(errors="backslashreplace")
    return pages


def _page(batch, student: str, assignment: str = ASSIGNMENT) -> str:
    return (batch["out"] / "feedback" / student / assignment / f"{assignment}.html").read_text()


def _printed(page: str, label: str) -> list:
    return [ast.literal_eval(html.unescape(text)) for text in re.findall(rf"{label}: (\[[^<\n]*\]|\d+)", page)]


def test_the_batch_completes_and_every_attack_earns_nothing(batch):
    results = batch["results"]
    for name in KERNEL_ATTACKS:
        assert results[name, ASSIGNMENT].score == 0, name
    for student in ("sympy_bomb", "lone_surrogate", "latin1_name", "blank_learned"):
        assignment = {"sympy_bomb": "02_sinusoidal", "blank_learned": "03_learned"}.get(student, ASSIGNMENT)
        assert results[student, assignment].score == 0, student


def test_honest_students_after_and_beside_the_attacks_get_their_grades(batch):
    for student in HONEST:
        result = batch["results"][student, ASSIGNMENT]
        assert result.score == HONEST_SCORE, (student, [(item.grade_id, item.message) for item in result.items])


def test_no_kernel_reached_a_secret_a_socket_or_the_gradebook(batch):
    for name in ("read_host_secrets", "read_environment", "connect_host_sockets"):
        [reached] = _printed(_page(batch, name), "REACHED")
        # The kernel's own sockets (its runtime folder, where nbgrader talks to it) are not the host's.
        assert [path for path in reached if "/runtime/kernel-" not in path] == [], (name, reached)
    assert batch["accepted"] == 0
    for where, page in _pages(batch).items():
        for secret in (*SECRET_VALUES, "the secret file"):
            assert secret not in page, (where, secret)


def test_limits_hold_for_processes_and_shared_memory(batch):
    [processes] = _printed(_page(batch, "many_processes"), "PROCESSES")
    assert processes < LIMITS.processes
    [hoarded] = _printed(_page(batch, "shm_hoard"), "SHM_MB")
    assert hoarded <= LIMITS.tmp_mb
    # Memory that the address space does not count is refused by the kernel's seccomp filter, cgroups or not.
    assert _printed(_page(batch, "memfd_hoard"), "MEMFD") == [[0, "EPERM"]]
    assert _printed(_page(batch, "sysv_hoard"), "SYSV") == [[0, "EPERM"]]
    # What counts against the grader's own account machine-wide: refused (seccomp, RLIMIT_MSGQUEUE).
    assert _printed(_page(batch, "per_user_counters"), "COUNTERS") == [[0, "EPERM", 0, "EPERM"]]
    assert _printed(_page(batch, "raised_limits"), "RAISED") == [[]]  # soft and hard limits alike
    # The grader's session keyring (its keys, its quota) and System V message queues: refused.
    assert _printed(_page(batch, "keyrings"), "KEYS") == [["EPERM", "EPERM"]]
    # The machine's device files, which a sandbox's root owns where the grader is root: their modes stay.
    assert _printed(_page(batch, "device_modes"), "DEVICES") == [["EPERM", "EPERM", "EPERM"]]
    # Queued signals, counted per account machine-wide: the kernel may queue none.
    assert _printed(_page(batch, "queued_signals"), "QUEUED") == [[0, "EAGAIN"]]
    # Asynchronous I/O contexts, one counter for the whole machine: refused.
    assert _printed(_page(batch, "aio_contexts"), "AIO") == [[-1, "EPERM"]]
    # The machine's page cache of shared files: no advice that drops or fills it (not implemented, to the kernel).
    assert _printed(_page(batch, "page_cache_advice"), "ADVICE") == [["ENOSYS", "ENOSYS"]]
    # Pseudo-terminals, one count for every devpts instance but the machine's: the kernel has none to open.
    assert _printed(_page(batch, "pseudo_terminals"), "PTYS") == [[0, "ENOENT"]]
    # Byte-range locks, kernel memory that no limit counts: none (ENOLCK, as when the system has none left).
    assert _printed(_page(batch, "byte_range_locks"), "LOCKS") == [[0, "ENOLCK"]]
    # Namespaces, counted against the grader's account up to the machine's: the kernel makes none.
    assert _printed(_page(batch, "nested_namespaces"), "NAMESPACES") == [["EPERM", "EPERM", "EPERM"]]
    # Descriptors in flight, counted per real user (one kernel could stop every other's passing): none sent.
    assert _printed(_page(batch, "descriptors_in_flight"), "IN_FLIGHT") == [[0, "EPERM"]]
    # Socket and pipe buffers, which only a control group counts: no growing them, Unix sockets only, and as
    # many as the kernel's open files allow, each with its default buffer.
    [[held, pairs, grown, pipe_grown, inet]] = _printed(_page(batch, "socket_buffers"), "SOCKETS")
    assert (grown, pipe_grown, inet) == ("EPERM", "EPERM", "EPERM")
    assert 0 < pairs < KERNEL_OPEN_FILES // 2
    assert 0 < held <= seccomp.buffer_bound(KERNEL_OPEN_FILES)


def test_the_kernel_sees_no_process_of_its_stage_nor_the_machines_identity(batch):
    [[command_line, boot_id, others, machine, hostname]] = _printed(_page(batch, "proc_leak"), "PROC")
    assert not command_line and not boot_id  # covered: unreadable or empty
    assert machine == ["", "", "", "", ""] and hostname == "sandbox"  # the grader's keys, the kernel's state
    # What it sees: its own bwrap (pid 1 of its namespace) and itself, never the stage's bwrap, the stage or the
    # launcher, whose command lines run autograder.sandbox (and name the control groups and received paths).
    assert len(others) <= 2 and [line for line in others if "autograder.sandbox" in line] == [], others
    assert any("ipykernel_launcher" in line for line in others), others


@pytest.mark.skipif(cgroup_problem() is not None, reason=f"no control groups here: {cgroup_problem()}")
def test_the_report_names_no_limit_that_failed_to_hold(batch):
    report = (batch["out"] / "report.txt").read_text()
    assert "WITHOUT a sandbox" not in report and "no control group" not in report


def test_hidden_tests_show_no_expected_value_on_any_page(batch):
    page = _page(batch, "blank_learned", "03_learned")
    assert "EXPECTED" not in page and "MISTAKES" not in page


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {name: value or "" for name, value in attrs}))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def test_feedback_pages_stay_small_and_run_no_student_script(batch):
    for where, page in _pages(batch).items():
        assert len(page.encode()) < 6 * 1024 * 1024, where
        parser = _Tags()
        parser.feed(page)
        assert parser.tags[:3] and any(
            tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy" for tag, attrs in parser.tags
        ), where
        assert not any("pwned" in script for script in parser.scripts), where
        for tag, attrs in parser.tags:
            assert tag not in ("iframe", "object", "embed", "svg"), (where, tag)
            assert not any(name.startswith("on") for name in attrs), (where, tag, attrs)
            assert not any(value.strip().lower().startswith("javascript:") for value in attrs.values()), (where, attrs)
    assert "the notebook&#39;s output" in _page(batch, "output_every_cell") or (
        "the notebook's output" in _page(batch, "output_every_cell")
    )


def test_csv_cells_start_no_formula_and_report_lines_are_not_forged(batch):
    for name in ("items.csv", "grades.csv"):
        with open(batch["out"] / name, newline="") as handle:
            for row in csv.reader(handle):
                for cell in row:
                    assert not cell.startswith(FORMULA_STARTS), (name, cell)
    with open(batch["out"] / "items.csv", newline="") as handle:
        messages = [row["message"] for row in csv.DictReader(handle) if row["student_id"] == "formula_exception"]
    assert any("HYPERLINK" in message for message in messages)  # still there, neutralized
    report = (batch["out"] / "report.txt").read_text()
    assert not any(line.startswith("FORGED") for line in report.splitlines())
    assert "evil\\nFORGED" in report
    assert "r\\xe9sum\\xe9.ipynb" in report


def test_a_kernel_s_escape_sequences_reach_its_log_escaped_and_marked_as_the_kernel_s(batch):
    log = (batch["out"] / "logs" / "terminal_escapes" / f"{ASSIGNMENT}.log").read_bytes()
    assert b"\x1b" not in log and b"\x07" not in log and b"\r" not in log
    lines = log.decode("utf-8").splitlines()
    assert all(re.match(r" *(grader|nbgrader|stage|kernel) \| ", line) for line in lines), lines[:5]
    assert all(line.isprintable() for line in lines)
    kernel = [line for line in lines if line.startswith("  kernel | ")]
    assert "  kernel | \\x1b[2Kscore 16 / 16" in kernel  # the forged score, as the kernel's
    assert "  kernel |   grader | the notebook is fine" in kernel  # a forged mark, inside the kernel's line
    assert not any(re.fullmatch(r" *(grader|nbgrader|stage) \| (\\x1b\[2K)?score 16 / 16", line) for line in lines)
    for path in (batch["out"] / "logs").rglob("*.log"):
        assert b"\x1b" not in path.read_bytes(), path
