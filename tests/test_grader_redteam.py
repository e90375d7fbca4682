"""Red team: attack submissions (tests/redteam) graded in one batch with two honest students.

The batch is graded once for the module, sandboxed, with small limits (a 10 s cell timeout, 2 GB of address
space). Every attack is a blank notebook plus the attack's code, so it must earn 0; the honest students must get
exactly the grades the round-trip test expects of them alone (constants from the exercises' definitions);
nothing outside the sandbox may change, no secret may appear in any feedback page, no connection may reach a
server the test opens on loopback.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import html
import os
import re
import socket
import sys
import threading
from pathlib import Path

import pytest
from planted import sandbox_missing
from redteam import ASSIGNMENT, ATTACKS, build_attacks, build_honest

from autograder import REPOSITORY
from autograder.grade import grade
from autograder.sandbox.kernel_view import MOUNT
from autograder.sandbox.launcher import Limits

pytestmark = pytest.mark.slow

# Grades of the honest students alone (tests/test_grader_roundtrip.py: full 13, planted mistakes 4).
HONEST_SCORES = {"honest_full": 13.0, "honest_mistakes": 4.0}
HONEST_FAILURES = {
    "honest_full": set(),
    "honest_mistakes": {
        "attention_test",
        "equivariance_test",
        "conclusions_test",
        "maps_test",
        "blind_test",
        "quiz_attention_symmetry_test",
    },
}
# Strings of the hidden tests and the solutions that no attack may get to print.
SECRETS = ("EXPECTED_A", "MISTAKES_A", "1.09953269783", "BEGIN SOLUTION", "EXPECTED_MAPS", "frozenset(\"abfh\")")
MAX_SCORE = 13.0
PROBING = {"read_files_nearby", "write_gradebook_and_outputs", "open_sockets"}


def _tree_digest(*roots: Path) -> dict[str, str]:
    digest = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


class Listener:
    """A TCP server on loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.server.close()


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    if sandbox_missing() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_missing()}")
    root = tmp_path_factory.mktemp("redteam")
    submissions, out = root / "submitted", root / "graded"
    listener = Listener()
    probe = {
        "read": [str(REPOSITORY / "autograder" / "source"), str(root), str(REPOSITORY / "tests")],
        "write": [str(REPOSITORY), str(root), "/tmp", str(Path.home())],
        "port": listener.port,
        "pids": [os.getpid(), os.getppid()],
    }
    build_attacks(submissions, probe)
    build_honest(submissions)
    watched = (REPOSITORY / "autograder", REPOSITORY / "tests", REPOSITORY / "posenc_ref", submissions)
    before = _tree_digest(*watched)
    try:
        results = grade(
            submissions, out, jobs=2, timeout=10, limits=Limits(memory_mb=2048, cpu_seconds=60, processes=64)
        )
    finally:
        listener.close()
    after = _tree_digest(*watched)
    yield {
        "results": {result.student: result for result in results},
        "out": out,
        "root": root,
        "changed": sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path)),
        "connections": listener.accepted,
    }


def _page(batch, student: str) -> str:
    return (batch["out"] / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_earns_no_point_and_leaks_nothing(batch, attack):
    result = batch["results"][attack]
    assert result.score == 0, [(item.grade_id, item.score) for item in result.items if item.score]
    assert result.max_score == MAX_SCORE
    page = _page(batch, attack)
    for secret in SECRETS:
        assert secret not in page, secret
    # What the probing attacks printed (their source, also on the page, has no "[" after the colon).
    reached = [ast.literal_eval(html.unescape(text)) for text in re.findall(r"REACHED: (\[[^<\n]*\])", page)]
    assert len(reached) == (1 if attack in PROBING else 0)
    # The only places a kernel may write to are its own new /tmp (which holds the folder of its sockets); it
    # may read besides only the public code it runs on.
    assert all(Path(path).is_relative_to("/tmp") or "runtime" in Path(path).parts or (attack == "read_files_nearby" and _public(path))
               for found in reached for path in found), reached


def test_no_feedback_page_holds_more_than_the_output_cap(batch):
    # The attacks send 10 MB in lines, one 40 MB message and one 5 MB line; a cell keeps 1 MiB (the default
    # output_kb), and a blank page with its styles is about 0.3 MB.
    for attack in ("huge_output_and_files", "flood_one_message"):
        page = _page(batch, attack)
        assert len(page.encode()) < 2 * 1024 * 1024, (attack, len(page))
        assert "the grader cut this cell&#39;s output here" in page or "the grader cut this cell's output here" in page


def _public(path: str) -> bool:
    """Inside the Python environment or the kernel's view of the course (the student's side of it, at
    autograder.sandbox.kernel_view.MOUNT); nothing of the repository itself."""
    path = Path(path).resolve()
    roots = [Path(root).resolve() for root in (sys.prefix, sys.base_prefix)] + [Path(MOUNT)]
    return any(path.is_relative_to(root) for root in roots)


def test_the_batch_completes_with_a_grade_for_every_submission(batch):
    assert set(batch["results"]) == set(ATTACKS) | set(HONEST_SCORES)
    with open(batch["out"] / "grades.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["student_id"] for row in rows} == set(ATTACKS) | set(HONEST_SCORES)


def test_honest_students_get_exactly_their_grades_alone(batch):
    for student, score in HONEST_SCORES.items():
        result = batch["results"][student]
        assert result.score == score, [(item.grade_id, item.message) for item in result.items]
        assert {item.grade_id for item in result.items if item.status == "failed"} == HONEST_FAILURES[student]


def test_nothing_outside_the_sandbox_changed(batch):
    assert batch["changed"] == []
    stray = [path for path in (REPOSITORY / "pwned", batch["root"] / "pwned", Path("/tmp/pwned")) if path.exists()]
    assert stray == []


def test_no_connection_left_the_sandbox(batch):
    assert batch["connections"] == 0


def test_the_report_says_the_kernels_were_sandboxed(batch):
    report = (batch["out"] / "report.txt").read_text()
    assert "WITHOUT a sandbox" not in report


def test_every_class_of_the_issue_is_attacked():
    classes = {kind for kind, _ in ATTACKS.values()}
    assert len(ATTACKS) >= 15
    assert classes >= {
        "rewrite later cells",
        "patch builtins",
        "patch libraries",
        "hide errors",
        "read files near it",
        "write to the gradebook",
        "open sockets",
        "fork",
        "allocate without bound",
        "loop forever",
        "kill its kernel",
    }
