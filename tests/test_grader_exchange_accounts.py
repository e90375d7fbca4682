"""The course's ``collect`` against students who write in each other's names, as the instructors' guide runs it.

nbgrader's exchange lets any account write ``inbound/<student>+<assignment>+<timestamp>``; ``python -m
autograder collect`` accepts a submission only when its folder and files belong to the account that the roster
gives the student it names. Three accounts are made with ``useradd`` (the tests run as root): two students
and an impostor. Each submission is made with ``nbgrader submit --student NAME`` and then given (``chown``) to
the account that submits it, which is what the owner check reads: an account's submission is a folder that
account owns.

The slow test runs the instructor's lines of the guide's loop (book/guide_instructors.md, "The whole loop:
nbgrader's exchange", read by tests/test_grader_exchange.py) as written: ``course``, ``release_assignment``,
then, after the submissions, ``collect`` and ``grade``. Alice submits the notebook as fetched, then the full
solution; Bob the full solution, then the planted mistakes; the impostor submits a blank notebook in Alice's
name (the newest of her name) and one in Bob's name dated 2099. Each student's newest own notebook must be
graded (13 and 6 points, tests/test_grader_roundtrip.py's), and the impostor's two folders refused and named.

The fast tests check the other refusals of ``collect`` on folders made by hand: links of either kind, a file
of another owner in a student's own folder, a deadline, and a destination that holds ``source/``.
"""

from __future__ import annotations

import csv
import datetime
import os
import pwd
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pytest
from planted import OTHER_MISTAKES, ROOT, filled, run_module, sandbox_missing, solutions, with_mistakes
from test_grader_exchange import GUIDE, guide_loop

ASSIGNMENT = "04_relative"
POINTS = {"alice": 13.0, "bob": 7.0}  # the full solution and OTHER_MISTAKES (tests/test_grader_roundtrip.py)
COURSE = "posenc"


@pytest.fixture(scope="module")
def accounts():
    """Three new accounts of this machine: ``alice``, ``bob`` and ``impostor`` -> (account name, uid)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("making student accounts needs root and useradd")
    suffix = secrets.token_hex(3)
    made = {}
    try:
        for role in ("alice", "bob", "impostor"):
            name = f"pe{role[:3]}{suffix}"
            subprocess.run(
                ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                check=True, capture_output=True,
            )  # fmt: skip
            made[role] = (name, pwd.getpwnam(name).pw_uid)
        yield made
    finally:
        for name, _ in made.values():
            subprocess.run(["userdel", name], check=False, capture_output=True)


def _roster(path: Path, accounts) -> Path:
    path.write_text(
        f"student_id,account\nalice,{accounts['alice'][0]}\nbob,{accounts['bob'][0]}\n", encoding="utf-8"
    )
    return path


def _give(folder: Path, uid: int) -> None:
    """``chown -R`` without following links: the account that owns a submission is the one that made it."""
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)


def _inbound_folder(inbound: Path, student: str, timestamp: str, uid: int, notebook: bytes = b"{}") -> Path:
    """A submission as nbgrader's submit writes it, owned by ``uid``."""
    folder = inbound / f"{student}+{ASSIGNMENT}+{timestamp}"
    folder.mkdir(parents=True)
    (folder / f"{ASSIGNMENT}.ipynb").write_bytes(notebook)
    (folder / "timestamp.txt").write_text(timestamp)
    (folder / "submission_secret.txt").write_text(secrets.token_hex(64))
    _give(folder, uid)
    return folder


def _collect(exchange: Path, roster: Path, out: Path, *options: str, cwd: Path = ROOT):
    completed = run_module(
        "autograder", "collect", ASSIGNMENT, "--roster", str(roster), "--out", str(out),
        f"--exchange={exchange}", *options, cwd=cwd,
    )  # fmt: skip
    return completed


def _refused(stdout: str) -> dict[str, str]:
    return dict(
        line.removeprefix("refused ").split(": ", 1) for line in stdout.splitlines() if line.startswith("refused ")
    )


def test_links_of_either_kind_another_owners_file_and_the_deadline_are_refused(tmp_path, accounts):
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = _roster(tmp_path / "roster.csv", accounts)
    alice, bob, impostor = (accounts[role][1] for role in ("alice", "bob", "impostor"))
    answer_key = ROOT / "autograder" / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    # Alice: an honest submission, then a newer one whose notebook is a symbolic link to the answer key.
    honest = _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", alice, b'{"honest": 1}')
    (honest / "figure.html").write_text("<script>alert(1)</script>")
    _give(honest, alice)
    linked = _inbound_folder(inbound, "alice", "2026-01-02 10:00:00.000000 UTC", alice)
    (linked / f"{ASSIGNMENT}.ipynb").unlink()
    (linked / f"{ASSIGNMENT}.ipynb").symlink_to(answer_key)
    _give(linked, alice)
    # Bob: an honest submission; a newer one that hard-links a copy of the answer key he owns; a newer one
    # holding a notebook the impostor owns; the newest, a folder that is a link to Alice's.
    _inbound_folder(inbound, "bob", "2026-01-01 11:00:00.000000 UTC", bob, b'{"bob": 1}')
    hard = _inbound_folder(inbound, "bob", "2026-01-02 11:00:00.000000 UTC", bob)
    (hard / f"{ASSIGNMENT}.ipynb").unlink()
    shutil.copyfile(answer_key, tmp_path / "copy.ipynb")
    os.link(tmp_path / "copy.ipynb", hard / f"{ASSIGNMENT}.ipynb")
    _give(hard, bob)
    planted = _inbound_folder(inbound, "bob", "2026-01-03 11:00:00.000000 UTC", bob)
    # Alice's newest deletes nbgrader's secret, without which release_feedback stops for the whole class.
    secretless = _inbound_folder(inbound, "alice", "2026-01-03 10:00:00.000000 UTC", alice, b'{"secretless": 1}')
    (secretless / "submission_secret.txt").unlink()
    os.chown(planted / f"{ASSIGNMENT}.ipynb", impostor, impostor)
    bobs_link = inbound / f"bob+{ASSIGNMENT}+2026-01-04 11:00:00.000000 UTC"
    bobs_link.symlink_to(honest)
    os.lchown(bobs_link, bob, bob)  # Bob's own link: refused as a link (another account's is refused as such)

    completed = _collect(exchange, roster, out, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    refused = _refused(completed.stdout)
    assert refused[linked.name] == f"{ASSIGNMENT}.ipynb is a symbolic link; links are not followed"
    assert refused[secretless.name] == ("it holds no submission_secret.txt, which nbgrader submit writes and "
                                        "release_feedback needs for every student")
    assert refused[hard.name].startswith(f"{ASSIGNMENT}.ipynb has 2 hard links"), refused
    assert f"is owned by '{accounts['impostor'][0]}'" in refused[planted.name], refused
    assert refused[f"bob+{ASSIGNMENT}+2026-01-04 11:00:00.000000 UTC"] == "it is a symbolic link; links are not followed"
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"honest": 1}'
    assert (out / "bob" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"bob": 1}'
    assert sorted(path.name for path in (out / "alice" / ASSIGNMENT).iterdir()) == [
        f"{ASSIGNMENT}.ipynb", "submission_secret.txt", "timestamp.txt"
    ]  # figure.html stayed in the exchange

    # A deadline before Bob's honest submission refuses it, unless late work is allowed.
    shutil.rmtree(out)
    deadline = "--deadline=2026-01-01 10:30:00 UTC"
    completed = _collect(exchange, roster, out, deadline, cwd=tmp_path)
    # Every folder here was made today: its status change time is past the deadline as well.
    assert "came after the deadline 2026-01-01 10:30:00 UTC" in _refused(completed.stdout)[f"bob+{ASSIGNMENT}+2026-01-01 11:00:00.000000 UTC"]
    assert not (out / "bob").exists() and not (out / "alice").exists()
    completed = _collect(exchange, roster, out, deadline, "--allow-late", cwd=tmp_path)
    assert (out / "bob" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"bob": 1}'


def test_a_notebook_rewritten_in_place_after_the_deadline_is_late(tmp_path, accounts):
    """Writing into a file changes the file, not its folder: the deadline reads every file's last change."""
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = _roster(tmp_path / "roster.csv", accounts)
    made = datetime.datetime.now(datetime.UTC)
    stamp = f"{made:%Y-%m-%d %H:%M:%S.%f} UTC"
    honest = _inbound_folder(inbound, "alice", stamp, accounts["alice"][1], b'{"on time": 1}')
    rewritten = _inbound_folder(inbound, "bob", stamp, accounts["bob"][1], b'{"on time": 1}')
    deadline = made.replace(microsecond=0) + datetime.timedelta(seconds=2)
    time.sleep(max(0.0, (deadline - datetime.datetime.now(datetime.UTC)).total_seconds()) + 1.1)
    with open(rewritten / f"{ASSIGNMENT}.ipynb", "r+b") as notebook:  # as its owner could, after the deadline
        notebook.write(b'{"late": 1}   ')
    completed = _collect(exchange, roster, out, f"--deadline={deadline:%Y-%m-%d %H:%M:%S} UTC", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    refused = _refused(completed.stdout)
    assert list(refused) == [rewritten.name], completed.stdout
    assert "its folder or a file read from it last changed" in refused[rewritten.name]
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"on time": 1}'
    assert not (out / "bob").exists() and honest.is_dir()


def test_a_change_after_a_collection_past_the_deadline_is_late_whatever_the_files_times_say(tmp_path, accounts):
    """A store through a shared memory mapping changes a file and leaves its change time as it was: a copy the
    grader collected after the deadline is what tells such a change (the red team's mmap attack, with times
    played by ``now``: the rewrite below keeps a change time before the deadline, as the mapping would)."""
    from autograder.intake.exchange import collect

    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = {"alice": accounts["alice"][0]}
    stamp = "2026-01-01 10:00:00.000000 UTC"
    folder = _inbound_folder(inbound, "alice", stamp, accounts["alice"][1], b'{"at the deadline": 1}')
    deadline = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(days=1)
    notebook = out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    # Collected before the deadline, a copy is not final: the student may still change the folder.
    collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline, now=deadline - datetime.timedelta(hours=1))
    (folder / f"{ASSIGNMENT}.ipynb").write_bytes(b'{"before the deadline": 1}')
    collected = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline,
                        now=deadline + datetime.timedelta(hours=1))  # the collection at the deadline, an hour late
    assert collected.accepted == {"alice": folder.name} and not collected.refused
    # Round 16: what that hour changed through a mapping was taken as on time; the command says so.
    assert collected.warnings == [(
        "this first collection after the deadline ran 1:00:00 after it, and what it took is final for on-time work: "
        "a notebook changed in that time by a program that kept it mapped in memory keeps its change time, and was "
        "taken as on time (on a file system held in memory, such as tmpfs, however long after); collect with "
        "--deadline at the deadline itself (at, cron)")]
    assert notebook.read_bytes() == b'{"before the deadline": 1}'
    # Changed after that collection: refused, the copy kept; with --allow-late, late by at least that hour.
    (folder / f"{ASSIGNMENT}.ipynb").write_bytes(b'{"after the deadline": 1}')
    later = deadline + datetime.timedelta(hours=2)
    collected = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline, now=later)
    assert collected.refused == [(folder.name, (
        f"it differs from the copy collected at {deadline + datetime.timedelta(hours=1):%Y-%m-%d %H:%M:%S} UTC, "
        f"after the deadline {deadline:%Y-%m-%d %H:%M:%S} UTC, so it changed after the deadline; late work is "
        "refused without --allow-late (what was collected then is kept)"))]
    assert notebook.read_bytes() == b'{"before the deadline": 1}'
    collected = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline, now=later, allow_late=True)
    assert notebook.read_bytes() == b'{"after the deadline": 1}'
    assert collected.late == {"alice": datetime.timedelta(hours=1)}
    assert (notebook.parent / "timestamp.txt").read_text() == \
        f"{deadline + datetime.timedelta(hours=1):%Y-%m-%d %H:%M:%S.%f} UTC"


def test_a_student_added_to_the_roster_after_the_final_collection_has_nothing_on_time(tmp_path, accounts):
    """What a student's folder held at the deadline is known only for the students the final collection read:
    one rostered later is late, and the reason says why."""
    from autograder.intake.exchange import collect

    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", accounts["alice"][1], b'{"a": 1}')
    bob = _inbound_folder(inbound, "bob", "2026-01-01 10:00:00.000000 UTC", accounts["bob"][1], b'{"b": 1}')
    deadline = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0) + datetime.timedelta(days=1)
    final = collect(exchange, COURSE, ASSIGNMENT, {"alice": accounts["alice"][0]}, out, deadline=deadline,
                    now=deadline + datetime.timedelta(minutes=1))
    assert set(final.accepted) == {"alice"}
    roster = {"alice": accounts["alice"][0], "bob": accounts["bob"][0]}
    later = collect(exchange, COURSE, ASSIGNMENT, roster, out, now=deadline + datetime.timedelta(hours=1))
    collected_at = f"{deadline + datetime.timedelta(minutes=1):%Y-%m-%d %H:%M:%S} UTC"
    assert "bob" not in later.accepted and dict(later.refused)[bob.name].startswith(
        f"this student was not on the roster of the collection at {collected_at}, after the deadline")
    late = collect(exchange, COURSE, ASSIGNMENT, roster, out, now=deadline + datetime.timedelta(hours=1),
                   allow_late=True)
    assert late.accepted["bob"] == bob.name and late.late["bob"] >= datetime.timedelta(minutes=1)


def test_the_first_collection_after_the_deadline_is_final_for_every_later_one_whatever_its_options(
        tmp_path, accounts, monkeypatch):
    """Round 8: a later collect without --deadline (the guide's loop line) or with a later one kept the first
    deadline's copy no more; a student whose listing was flooded at the deadline had nothing collected then,
    and changed the notebook afterwards."""
    from autograder.intake import exchange as exchange_module
    from autograder.intake.exchange import collect, final_path

    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = {"alice": accounts["alice"][0], "bob": accounts["bob"][0]}
    alice = _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", accounts["alice"][1], b'{"a": 1}')
    bob = _inbound_folder(inbound, "bob", "2026-01-01 10:00:00.000000 UTC", accounts["bob"][1], b'{"b": 1}')
    for minute in range(3):  # Bob floods his own listing past the cap before the deadline
        _inbound_folder(inbound, "bob", f"2026-01-01 09:0{minute}:00.000000 UTC", accounts["bob"][1])
    monkeypatch.setattr(exchange_module, "MAX_ROSTER_SUBMISSIONS", 2)
    # The files' change times are real (now): the deadline lies a day ahead, and each collection plays its time.
    deadline = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0) + datetime.timedelta(days=1)
    at_deadline = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline,
                          now=deadline + datetime.timedelta(minutes=1))
    assert at_deadline.accepted == {"alice": alice.name} and not (out / "bob").exists()
    assert not any("first collection after the deadline" in warning for warning in at_deadline.warnings)
    record = final_path(out, ASSIGNMENT)
    assert record.is_file()
    for path in bob.parent.glob("bob+*+2026-01-01 09:*"):
        shutil.rmtree(path)  # the flood removed, the notebooks changed after the deadline (as through a mapping)
    (alice / f"{ASSIGNMENT}.ipynb").write_bytes(b'{"a": 2}')
    (bob / f"{ASSIGNMENT}.ipynb").write_bytes(b'{"b": 2}')
    later = deadline + datetime.timedelta(hours=2)
    for options in ({}, {"deadline": deadline}):  # the guide's loop line, and the same deadline
        collected = collect(exchange, COURSE, ASSIGNMENT, roster, out, now=later, **options)
        reasons = dict(collected.refused)
        assert not collected.accepted, collected
        collected_at = f"{deadline + datetime.timedelta(minutes=1):%Y-%m-%d %H:%M:%S} UTC"
        assert reasons[alice.name].startswith(f"it differs from the copy collected at {collected_at}")
        assert reasons[bob.name].startswith(f"nothing of this student's was collected at {collected_at}")
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"a": 1}'
    other = deadline + datetime.timedelta(hours=1)
    with pytest.raises(ValueError, match=rf"--deadline {other:%Y-%m-%d %H:%M:%S} UTC differs from 04_relative's "
                                         rf"deadline {deadline:%Y-%m-%d %H:%M:%S} UTC.*remove .*04_relative.json"):
        collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=other, now=later)
    late = collect(exchange, COURSE, ASSIGNMENT, roster, out, now=later, allow_late=True)
    assert late.accepted == {"alice": alice.name, "bob": bob.name}
    assert late.late["bob"] >= datetime.timedelta(minutes=1)
    assert (out / "bob" / ASSIGNMENT / "timestamp.txt").read_text() != "2026-01-01 10:00:00.000000 UTC"


def test_late_work_records_the_time_of_its_last_change_however_little_late(tmp_path, accounts):
    """Round 8: within the minute nbgrader's submit may take, the name's timestamp was kept, late or not."""
    from autograder.intake.exchange import Inbound, recorded_timestamp

    named = datetime.datetime(2026, 1, 2, 11, 59, 50)
    record = Inbound("x", "alice", named, f"{named:%Y-%m-%d %H:%M:%S.%f} UTC")
    deadline, changed = datetime.datetime(2026, 1, 2, 12, 0, 0), datetime.datetime(2026, 1, 2, 12, 0, 30)
    assert recorded_timestamp(record, changed) == record.timestamp_text  # no deadline: the minute's leeway
    assert recorded_timestamp(record, changed, deadline) == "2026-01-02 12:00:30.000000 UTC"
    assert recorded_timestamp(record, named + datetime.timedelta(seconds=5), deadline) == record.timestamp_text


def test_a_notebook_under_another_name_is_collected_under_nbgrader_s_name(tmp_path, accounts):
    """Round 27: the folder's only notebook kept its own name in the instructor's folder, escape sequences
    (a window title, a screen erase) included, for any program that prints a listing raw."""
    exchange, out = tmp_path / "exchange", tmp_path / "collected"
    inbound = exchange / COURSE / "inbound"
    inbound.mkdir(parents=True)
    folder = _inbound_folder(inbound, "alice", "2026-01-02 10:00:00.000000 UTC", accounts["alice"][1])
    os.rename(folder / f"{ASSIGNMENT}.ipynb", folder / "\x1b]0;owned\x07\x1b[2J.ipynb")
    completed = _collect(exchange, _roster(tmp_path / "roster.csv", accounts), out, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert sorted(path.name for path in (out / "alice" / ASSIGNMENT).iterdir()) == [
        f"{ASSIGNMENT}.ipynb", "submission_secret.txt", "timestamp.txt"
    ]
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b"{}"
    assert "\x1b" not in completed.stdout + completed.stderr


def test_a_flood_of_names_in_inbound_pushes_no_student_out(tmp_path, accounts):
    """Any account can create names in inbound/; only those of this assignment's rostered students are kept."""
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = _roster(tmp_path / "roster.csv", accounts)
    _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", accounts["alice"][1], b'{"alice": 1}')
    for number in range(12_000):  # more than the 10,000 names a folder listing of the intake keeps
        (inbound / f"junk{number}").touch()
    (inbound / f"mallory+{ASSIGNMENT}+2026-01-01 10:00:00.000000 UTC").mkdir()  # no student of the roster
    completed = _collect(exchange, roster, out, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"alice": 1}'
    assert "12001 other names in the inbound folder" in completed.stdout, completed.stdout


def test_a_student_past_the_listings_cap_is_refused_alone_and_names_of_other_accounts_stop_nobody(
        tmp_path, accounts, monkeypatch):
    from autograder.intake import exchange as exchange_module

    inbound = tmp_path / "exchange" / COURSE / "inbound"
    for hour in range(3):
        _inbound_folder(inbound, "alice", f"2026-01-01 1{hour}:00:00.000000 UTC", accounts["alice"][1])
    _inbound_folder(inbound, "bob", "2026-01-01 10:00:00.000000 UTC", accounts["bob"][1], b'{"bob": 1}')
    for minute in range(5):  # another account floods names after Bob: refused there and then, not counted as his
        _inbound_folder(inbound, "bob", f"2026-01-01 11:0{minute}:00.000000 UTC", accounts["impostor"][1])
    monkeypatch.setattr(exchange_module, "MAX_ROSTER_SUBMISSIONS", 2)
    monkeypatch.setattr(exchange_module, "MAX_NAMED_IMPOSTORS", 3)
    roster = {"alice": accounts["alice"][0], "bob": accounts["bob"][0]}
    collected = exchange_module.collect(tmp_path / "exchange", COURSE, ASSIGNMENT, roster, tmp_path / "out")
    assert collected.accepted == {"bob": f"bob+{ASSIGNMENT}+2026-01-01 10:00:00.000000 UTC"}
    assert (tmp_path / "out" / "bob" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"bob": 1}'
    assert not (tmp_path / "out" / "alice").exists()
    reasons = dict(collected.refused)
    assert reasons[f"alice+{ASSIGNMENT}+..."].startswith(f"3 submissions of {ASSIGNMENT} owned by")
    assert "nothing of this student's was collected" in reasons[f"alice+{ASSIGNMENT}+..."]
    named = [name for name, why in collected.refused if f"but is owned by '{accounts['impostor'][0]}'" in why]
    assert len(named) == 3 and all(name.startswith("bob+") for name in named)
    assert "2 more folders named after students of the roster but owned by other accounts were refused" in (
        collected.warnings)


def test_an_old_name_on_late_work_is_recorded_late(tmp_path, accounts):
    """With --allow-late, a folder made after the deadline under a name from before it is taken, and recorded
    at the time it was made: its timestamp.txt and the command's LATE line say so."""
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = _roster(tmp_path / "roster.csv", accounts)
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    deadline, named = now - datetime.timedelta(hours=1), now - datetime.timedelta(hours=2)
    stamp = f"{named:%Y-%m-%d %H:%M:%S.%f} UTC"
    _inbound_folder(inbound, "alice", stamp, accounts["alice"][1])
    refused = _collect(exchange, roster, out, f"--deadline={deadline:%Y-%m-%d %H:%M:%S}", cwd=tmp_path)
    assert "came after the deadline" in _refused(refused.stdout)[f"alice+{ASSIGNMENT}+{stamp}"]
    taken = _collect(exchange, roster, out, f"--deadline={deadline:%Y-%m-%d %H:%M:%S}", "--allow-late",
                     cwd=tmp_path)
    assert taken.returncode == 0, taken.stderr
    assert f"collected alice: alice+{ASSIGNMENT}+{stamp} (LATE: " in taken.stdout, taken.stdout
    recorded = datetime.datetime.strptime((out / "alice" / ASSIGNMENT / "timestamp.txt").read_text(),
                                          "%Y-%m-%d %H:%M:%S.%f UTC")
    assert recorded > deadline and abs(recorded - now) < datetime.timedelta(minutes=10)


def test_collect_reads_nothing_from_an_exchange_another_account_could_swap_or_owns(tmp_path, accounts):
    """The exchange's root writable by all without the sticky bit (as nbgrader makes it), a course folder
    another account owns, or one that is a link: nothing is collected, and the command says which and why."""
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = _roster(tmp_path / "roster.csv", accounts)
    alice = accounts["alice"][1]
    _give(_inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", alice), alice)
    exchange.chmod(0o777)
    completed = _collect(exchange, roster, out, cwd=tmp_path)
    assert completed.returncode == 2 and not out.exists(), completed.stdout
    assert "writable by other accounts without the sticky bit" in completed.stderr
    assert f"chmod +t {exchange}" in completed.stderr

    exchange.chmod(0o1777)  # sticky: collected
    assert _collect(exchange, roster, out, cwd=tmp_path).returncode == 0
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()

    impostor_name, impostor = accounts["impostor"]
    os.chown(exchange / COURSE, impostor, impostor)  # a course folder another account made
    completed = _collect(exchange, roster, tmp_path / "again", cwd=tmp_path)
    assert completed.returncode == 2 and not (tmp_path / "again").exists()
    assert f"{str(exchange / COURSE)!r} is owned by {impostor_name!r} (uid {impostor})" in completed.stderr

    os.chown(exchange / COURSE, os.getuid(), os.getgid())
    (exchange / COURSE).rename(exchange / "elsewhere")
    (exchange / COURSE).symlink_to(exchange / "elsewhere")  # a link in place of the course folder
    completed = _collect(exchange, roster, tmp_path / "again", cwd=tmp_path)
    assert completed.returncode == 2 and "is not a folder of its own (a link" in completed.stderr


def test_collect_refuses_a_destination_that_holds_the_answer_key(tmp_path, accounts):
    exchange = tmp_path / "exchange"
    (exchange / COURSE / "inbound").mkdir(parents=True)
    (tmp_path / "course" / "source").mkdir(parents=True)
    roster = _roster(tmp_path / "roster.csv", accounts)
    completed = _collect(exchange, roster, tmp_path / "course", cwd=tmp_path)
    assert completed.returncode == 2
    assert "holds source/, the answer key" in completed.stderr


@pytest.mark.slow
def test_each_students_newest_own_work_is_graded_and_the_impostor_is_named(tmp_path, monkeypatch, accounts):
    if reason := sandbox_missing():
        pytest.skip(f"the grader's sandbox cannot run here: {reason}")
    exchange, root, home = tmp_path / "exchange", tmp_path / "instructor", tmp_path / "home"
    for folder in (exchange, root, home):
        folder.mkdir()
    exchange.chmod(0o1777)  # the guide's one-time root step
    monkeypatch.setenv("HOME", str(home))
    steps = {step.arguments[0]: step for step in guide_loop(GUIDE.read_text(encoding="utf-8"))}
    course, inbound = root / "course", exchange / COURSE / "inbound"

    def run(step, *extra: str):
        cwd = root / step.folder if step.folder != "~" else home
        completed = run_module(step.module, *step.arguments, *extra, cwd=cwd, timeout=900)
        assert completed.returncode == 0, (step, completed.stdout[-3000:] + completed.stderr[-3000:])
        return completed

    run(steps["course"])
    run(steps["release_assignment"], f"--Exchange.root={exchange}")
    _roster(course / "roster.csv", accounts)
    blank = filled(ASSIGNMENT, {})

    def submit(student: str, notebook, role: str) -> Path:
        """``nbgrader submit --student STUDENT`` from the home, the new folder given to ``role``'s account."""
        (home / ASSIGNMENT).mkdir(exist_ok=True)
        nbformat.write(notebook, home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
        before = set(inbound.iterdir()) if inbound.exists() else set()
        completed = run_module(
            "nbgrader", "submit", ASSIGNMENT, f"--CourseDirectory.student_id={student}", f"--course={COURSE}",
            f"--Exchange.root={exchange}", cwd=home,
        )  # fmt: skip
        assert completed.returncode == 0, completed.stderr[-3000:]
        (folder,) = set(inbound.iterdir()) - before
        _give(folder, accounts[role][1])
        return folder

    submit("alice", blank, "alice")
    submit("alice", filled(ASSIGNMENT, solutions(ASSIGNMENT)), "alice")
    submit("bob", filled(ASSIGNMENT, solutions(ASSIGNMENT)), "bob")
    submit("bob", with_mistakes(ASSIGNMENT, OTHER_MISTAKES[ASSIGNMENT]), "bob")
    posing = submit("alice", blank, "impostor")  # the newest in Alice's name
    future = submit("bob", blank, "impostor")
    dated = future.with_name(f"bob+{ASSIGNMENT}+2099-01-01 00:00:00.000000 UTC")
    future.rename(dated)
    (dated / "timestamp.txt").write_text("2099-01-01 00:00:00.000000 UTC")
    _give(dated, accounts["impostor"][1])

    collected = run(steps["collect"], f"--exchange={exchange}")
    refused = _refused(collected.stdout)
    impostor = accounts["impostor"][0]
    assert refused[posing.name] == (
        f"it names student 'alice', whose account is '{accounts['alice'][0]}' (uid {accounts['alice'][1]}), "
        f"but is owned by '{impostor}' (uid {accounts['impostor'][1]})"
    ), collected.stdout
    assert dated.name in refused and (impostor in refused[dated.name] or "future" in refused[dated.name])
    assert len(refused) == 2, collected.stdout

    run(steps["grade"])
    with open(course / "grades.csv", newline="") as handle:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert scores == POINTS


def test_a_timestamp_whose_zone_names_a_path_is_refused_and_the_class_is_collected(tmp_path, accounts, monkeypatch):
    # A zone word reaches dateutil's gettz, which reads it as a path under the zone folder; for "..", dateutil
    # raises its own warning as an error, which once stopped collect for every student. Under any warning
    # filter, the folder is refused with its reason, and the others are collected.
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = _roster(tmp_path / "roster.csv", accounts)
    alice, bob = accounts["alice"][1], accounts["bob"][1]
    _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", alice, b'{"honest": 1}')
    dotted = _inbound_folder(inbound, "bob", "2026-01-01 11:00:00 ..", bob, b'{"dotted": 1}')
    for warning_filter in (None, "default", "ignore"):  # None: collect as the guide runs it, whose run it stopped
        shutil.rmtree(out, ignore_errors=True)
        if warning_filter is None:
            monkeypatch.delenv("PYTHONWARNINGS", raising=False)
        else:
            monkeypatch.setenv("PYTHONWARNINGS", warning_filter)
        completed = _collect(exchange, roster, out, cwd=tmp_path)
        assert completed.returncode == 0, completed.stderr
        assert "is not a timestamp" in _refused(completed.stdout).get(dotted.name, ""), completed.stdout
        assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"honest": 1}'
        assert not (out / "bob").exists()


def test_a_roster_that_names_a_student_submitted_is_refused(tmp_path):
    # grade reads a class folder that holds one folder named submitted alone as nbgrader's folder of submissions.
    from autograder.intake.exchange import read_roster

    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,account\nalice,alice\nsubmitted,bob\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3: student_id 'submitted' is reserved"):
        read_roster(roster)
    roster.write_text("student_id,account\nalice,alice\nsubmitted2,bob\n", encoding="utf-8")
    assert read_roster(roster) == {"alice": "alice", "submitted2": "bob"}


def test_collect_warns_of_a_rostered_student_s_home_that_other_accounts_can_enter(tmp_path, accounts):
    """Round 30: in the guide's loop, homes made the ordinary way (0755) let every student read another's work in
    progress, and nbgrader's cached copy of each submission with the secret that names its feedback page."""
    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    roster = _roster(tmp_path / "roster.csv", accounts)
    name, uid = accounts["alice"]
    _inbound_folder(exchange / COURSE / "inbound", "alice", "2026-01-01 10:00:00.000000 UTC", uid)
    home = Path(pwd.getpwnam(name).pw_dir)
    assert not home.exists()  # the fixture's accounts have none
    home.mkdir()
    try:
        os.chown(home, uid, pwd.getpwnam(name).pw_gid)
        os.chmod(home, 0o755)
        completed = _collect(exchange, roster, out, cwd=tmp_path)
        assert completed.returncode == 0, completed.stderr
        assert (f"warning: the home of 1 rostered account(s) lets other accounts in: {name} ({home}, mode 0755)."
                in completed.stdout), completed.stdout
        assert "collected alice" in completed.stdout  # a warning, not a refusal
        os.chmod(home, 0o750)  # its group may enter: the account's own group (useradd --user-group), no other
        own_group = _collect(exchange, roster, out, cwd=tmp_path)
        assert own_group.returncode == 0 and "lets other accounts in" not in own_group.stdout, own_group.stdout
        os.chown(home, uid, pwd.getpwnam(accounts["bob"][0]).pw_gid)  # bob's group: bob may enter
        shared = _collect(exchange, roster, out, cwd=tmp_path)
        assert f"lets other accounts in: {name} ({home}, mode 0750)." in shared.stdout, shared.stdout
        os.chmod(home, 0o700)
        private = _collect(exchange, roster, out, cwd=tmp_path)
        assert private.returncode == 0 and "lets other accounts in" not in private.stdout, private.stdout
    finally:
        shutil.rmtree(home)


def test_a_collection_after_the_deadline_that_has_no_room_is_not_final(tmp_path, accounts, monkeypatch):
    """Round 30: a student filled the course's disk at the deadline; the collection refused everyone for room and
    still recorded the copies collected before as final, so each on-time last submission was later refused as
    changed after the deadline. A submission the grader has no room for is the grader's failure: that
    collection records nothing, says so, and the next one, with room, takes the on-time work."""
    from autograder.intake import exchange as exchange_module
    from autograder.intake.exchange import collect, final_path

    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = {"alice": accounts["alice"][0]}
    deadline = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(days=1)
    _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", accounts["alice"][1], b'{"first": 1}')
    collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline, now=deadline - datetime.timedelta(hours=2))
    newest = _inbound_folder(inbound, "alice", "2026-01-01 11:00:00.000000 UTC", accounts["alice"][1],
                             b'{"last, on time": 1}')
    real_free = exchange_module.free_bytes
    monkeypatch.setattr(exchange_module, "free_bytes", lambda path: 0)
    at_deadline = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline,
                          now=deadline + datetime.timedelta(seconds=5))
    assert at_deadline.no_room == ["alice"] and not at_deadline.accepted
    assert at_deadline.refused == [(newest.name, (
        f"its 20 bytes could not be written into {out} (the class's cap, or the free space); the grader's failure, "
        "not the student's"))]
    assert not final_path(out, ASSIGNMENT).exists()  # nothing final was recorded
    assert any("so it is not final" in warning for warning in at_deadline.warnings), at_deadline.warnings
    monkeypatch.setattr(exchange_module, "free_bytes", real_free)
    # Round 32: changed in place before the next collection, as through a memory mapping that keeps the file's
    # times (here the real times are a day before this deadline): what the attempt at the deadline read is kept.
    notebook = newest / f"{ASSIGNMENT}.ipynb"
    notebook.write_bytes(b'{"changed, late": 1}')
    changed = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline,
                      now=deadline + datetime.timedelta(seconds=20))
    assert not changed.accepted and changed.refused[0][0] == newest.name, changed.refused
    assert "differs from what the collection at" in changed.refused[0][1] and "changed after the deadline" in \
        changed.refused[0][1], changed.refused
    notebook.write_bytes(b'{"last, on time": 1}')
    final_path(out, ASSIGNMENT).unlink()  # that collection was final: nothing of Alice's on time; start again
    again = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline,
                    now=deadline + datetime.timedelta(seconds=30))
    assert again.accepted == {"alice": newest.name} and not again.refused and not again.late
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"last, on time": 1}'
    assert final_path(out, ASSIGNMENT).exists()


def test_a_secret_that_two_students_share_is_replaced_in_both_collected_copies(tmp_path, accounts):
    """nbgrader's release_feedback names each page by the submission's secret, and fetch_feedback fetches every
    page named by a secret in the student's cache. Round 30: a student who read another's secret (nbgrader's
    cache, in a home others may enter) submitted it as his own, and his page reached the victim. Round 31: which
    one copied cannot be told by the files' times. Round 32: refusing both let the copier refuse the victim's
    newest work at the deadline, and his copy was collected once the victim's folder was no longer the newest.
    Now each folder is collected (it is its owner's own work) under a new secret that nobody holds."""
    from autograder.intake.exchange import collect, read_final

    exchange, out = tmp_path / "exchange", tmp_path / "course" / "submitted"
    inbound = exchange / COURSE / "inbound"
    roster = {"alice": accounts["alice"][0], "bob": accounts["bob"][0]}
    alice, bob = accounts["alice"][1], accounts["bob"][1]

    def secret_of(student: str) -> bytes:
        return (out / student / ASSIGNMENT / "submission_secret.txt").read_bytes()

    victim = _inbound_folder(inbound, "alice", "2026-01-01 10:00:00.000000 UTC", alice, b'{"alice": 1}')
    stolen = (victim / "submission_secret.txt").read_bytes()
    copier = _inbound_folder(inbound, "bob", "2026-01-01 10:05:00.000000 UTC", bob, b'{"bob": 1}')
    (copier / "submission_secret.txt").write_bytes(stolen)
    deadline = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(seconds=2)
    collected = collect(exchange, COURSE, ASSIGNMENT, roster, out, deadline=deadline,
                        now=deadline + datetime.timedelta(seconds=5))
    assert collected.accepted == {"alice": victim.name, "bob": copier.name} and not collected.refused
    assert {student: list(others) for student, others in collected.new_secrets.items()} == {
        "alice": ["bob"], "bob": ["alice"]}
    assert f"bob's: their inbound folder {copier.name!r}" in collected.warnings[-2], collected.warnings
    assert collected.warnings[-2].startswith(f"alice's submission {victim.name!r} was collected under a new secret")
    assert len({stolen.strip(), secret_of("alice"), secret_of("bob")}) == 3  # nobody holds either new secret
    assert (out / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == b'{"alice": 1}'
    assert read_final(out, ASSIGNMENT).notebooks["alice"] is not None  # the victim's on-time work is final
    shutil.rmtree(out)

    # The victim submits again, as told; the copier's folder stays: his copy still shares a secret with a folder
    # of hers (no longer her newest), so it is collected under a new secret again.
    newest = _inbound_folder(inbound, "alice", "2026-01-01 10:10:00.000000 UTC", alice, b'{"alice": 2}')
    again = collect(exchange, COURSE, ASSIGNMENT, roster, out)
    assert again.accepted == {"alice": newest.name, "bob": copier.name} and list(again.new_secrets) == ["bob"]
    assert again.new_secrets["bob"]["alice"][0] == f"their inbound folder {victim.name!r}"
    assert secret_of("alice") == (newest / "submission_secret.txt").read_bytes().strip()  # her own, kept
    assert secret_of("bob") != stolen.strip()

    # A copy collected before keeps its secret; a later copy of it, with the victim's folder gone, is found by it.
    shutil.rmtree(victim)
    shutil.rmtree(newest)
    later = _inbound_folder(inbound, "bob", "2026-01-01 10:20:00.000000 UTC", bob, b'{"bob": 2}')
    (later / "submission_secret.txt").write_bytes(secret_of("alice"))
    third = collect(exchange, COURSE, ASSIGNMENT, roster, out)
    assert third.accepted == {"bob": later.name} and list(third.new_secrets) == ["bob"]
    assert secret_of("alice") == (later / "submission_secret.txt").read_bytes().strip() != secret_of("bob")

    # Round 32: a secret collected before and since replaced by the victim's newer one, her folders gone, is
    # found by the record of the secrets collected.
    replaced = secret_of("alice")
    third_newest = _inbound_folder(inbound, "alice", "2026-01-01 10:30:00.000000 UTC", alice, b'{"alice": 3}')
    assert collect(exchange, COURSE, ASSIGNMENT, roster, out).accepted["alice"] == third_newest.name
    shutil.rmtree(third_newest)
    last = _inbound_folder(inbound, "bob", "2026-01-01 10:40:00.000000 UTC", bob, b'{"bob": 3}')
    (last / "submission_secret.txt").write_bytes(replaced)
    fourth = collect(exchange, COURSE, ASSIGNMENT, roster, out)
    assert fourth.accepted == {"bob": last.name} and fourth.new_secrets == {
        "bob": {"alice": ["a submission of theirs collected before"]}}
    assert secret_of("bob") not in {replaced, secret_of("alice")}

    # Round 33: an extra folder of bob's, older than his newest, holds alice's new secret. Her copy gets a new one
    # (which of the two copied cannot be told), and the warning names his folder, which is never collected.
    mine = _inbound_folder(inbound, "alice", "2026-01-01 10:50:00.000000 UTC", alice, b'{"alice": 4}')
    extra = _inbound_folder(inbound, "bob", "2026-01-01 10:45:00.000000 UTC", bob, b'{"bob": "extra"}')
    (extra / "submission_secret.txt").write_bytes((mine / "submission_secret.txt").read_bytes())
    fifth = collect(exchange, COURSE, ASSIGNMENT, roster, out)
    assert fifth.accepted["alice"] == mine.name  # (bob's newest, above, gets a new secret again)
    assert fifth.new_secrets["alice"] == {"bob": [f"their inbound folder {extra.name!r}"]}
    assert [warning for warning in fifth.warnings if warning.startswith("alice's submission")] == [
        (f"alice's submission {mine.name!r} was collected under a new secret that nobody holds: its "
         f"submission_secret.txt is also bob's: their inbound folder {extra.name!r}. One of the two copied the "
         "other's (nbgrader keeps it in the student's home, readable where others may enter); nbgrader's "
         "release_feedback will deliver alice's page to no one, so give it yourself, and make the homes private")]


def test_root_counts_the_blocks_kept_for_root_as_free(tmp_path):
    """Round 32: a student who filled the course's file system made root's collect refuse everyone, though
    ext4 keeps 5% of its blocks for root, which no student's account can fill."""
    from autograder.intake.exchange import free_bytes

    status = os.statvfs(tmp_path)
    expected = status.f_bfree if os.geteuid() == 0 else status.f_bavail
    assert abs(free_bytes(tmp_path) - status.f_frsize * expected) < 64 * 1024**2  # others write meanwhile
    if os.geteuid() == 0 and status.f_bfree > status.f_bavail:
        assert free_bytes(tmp_path) > shutil.disk_usage(tmp_path).free
