"""The intake never follows a link nor reads an endless file (autograder.student.safe_files, collect, read_notebook).

A student's notebook, student folder or assignment folder that is a symbolic link (to the released sources,
to another student's work, to ``/proc/kmsg``), a named pipe, a device, a folder or a file over the size cap is
never read through: no copy reaches the grader's ``received`` folder, the reason is exact, and ``collect``
returns (each call runs in a thread with a time limit, so a read that blocks fails the test instead of hanging
it). A property test builds random trees of files, folders, pipes and links pointing inside and outside, and
checks that every copy is the exact bytes of a regular file at ``<student>/<assignment>/<name>``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autograder.course_directory import copy_exchange_files
from autograder.grade import _record_key
from autograder.intake.submissions import collect
from autograder.student import safe_files, sanitize
from autograder.student.safe_files import Folder, Refused
from autograder.student.sanitize import read_notebook

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
SOURCE = ROOT / "autograder" / "source" / "02_sinusoidal" / "02_sinusoidal.ipynb"
NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
SECONDS = 30
LINK = "is a symbolic link; links are not followed"


def _promptly(function, *args):
    """``function(*args)``, failing the test if it does not return within SECONDS (a blocking read)."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = function(*args)
        except BaseException as error:  # noqa: BLE001 (handed to the test's thread)
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(SECONDS)
    assert not thread.is_alive(), f"{function.__name__} blocked for {SECONDS} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _put(path: Path, content: bytes = NOTEBOOK) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _link(path: Path, target: Path | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def _received_files(received: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(received)): path.read_bytes()
        for path in received.rglob("*")
        if stat.S_ISREG(path.lstat().st_mode)
    }


def _only(collection, student: str = "ada"):
    [submission] = [s for s in collection.submissions if s.student == student]
    return submission


# ----------------------------------------------------------------------------------- a notebook that is no file


def test_a_link_to_the_released_source_is_refused_and_not_copied(tmp_path):
    assert SOURCE.is_file()
    _link(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", SOURCE)
    received = tmp_path / "received"
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, received))
    assert submission.path is None
    assert submission.reason == "02_sinusoidal.ipynb is a symbolic link; links are not followed"
    assert submission.notes == ("not graded: 02_sinusoidal.ipynb is a symbolic link; links are not followed",)
    assert submission.folder == received / "ada" / "02_sinusoidal"
    assert list(submission.folder.iterdir()) == []


def test_a_link_to_another_students_notebook_is_refused_and_the_other_is_graded(tmp_path):
    bob = _put(tmp_path / "class" / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"bob's own work")
    _link(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", bob)
    received = tmp_path / "received"
    collection = _promptly(collect, tmp_path / "class", ASSIGNMENTS, received)
    assert _only(collection, "ada").path is None
    assert _only(collection, "ada").reason == f"02_sinusoidal.ipynb {LINK}"
    assert _only(collection, "bob").path == received / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    assert _received_files(received) == {"bob/02_sinusoidal/02_sinusoidal.ipynb": b"bob's own work"}


def test_a_relative_link_inside_the_folder_is_refused_too(tmp_path):
    folder = tmp_path / "class" / "ada" / "02_sinusoidal"
    _put(folder / "draft.ipynb", b"draft")
    _link(folder / "02_sinusoidal.ipynb", "draft.ipynb")
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.path is None
    assert submission.notes == (
        f"not graded: 02_sinusoidal.ipynb {LINK}",
        "other notebooks in the folder were not graded: draft.ipynb",
    )
    assert _received_files(tmp_path / "received") == {}


def test_a_student_folder_that_is_a_link_is_refused_with_a_warning(tmp_path):
    _put(tmp_path / "class" / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"bob")
    _put(tmp_path / "elsewhere" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"not in the class")
    _link(tmp_path / "class" / "ada", tmp_path / "elsewhere")
    _link(tmp_path / "class" / "eve", tmp_path / "class" / "bob")
    received = tmp_path / "received"
    collection = _promptly(collect, tmp_path / "class", ASSIGNMENTS, received)
    assert [(s.student, s.assignment) for s in collection.submissions] == [("bob", "02_sinusoidal")]
    assert collection.warnings == [
        f"ada: not read: a student's folder that {LINK}",
        f"eve: not read: a student's folder that {LINK}",
    ]
    assert _received_files(received) == {"bob/02_sinusoidal/02_sinusoidal.ipynb": b"bob"}


def test_an_assignment_folder_that_is_a_link_is_refused_with_a_warning(tmp_path):
    _put(tmp_path / "elsewhere" / "02_sinusoidal.ipynb", b"not in the class")
    _link(tmp_path / "class" / "ada" / "02_sinusoidal", tmp_path / "elsewhere")
    received = tmp_path / "received"
    collection = _promptly(collect, tmp_path / "class", ASSIGNMENTS, received)
    assert collection.submissions == []
    assert collection.warnings == [f"ada/02_sinusoidal: not read: an assignment folder that {LINK}"]
    assert _received_files(received) == {}


@pytest.mark.parametrize("target", ["/proc/kmsg", "/dev/zero"])
def test_a_link_to_an_endless_file_is_refused_without_reading_it(tmp_path, target):
    _link(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", target)
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.path is None
    assert submission.reason == f"02_sinusoidal.ipynb {LINK}"


def test_a_named_pipe_is_refused_without_blocking(tmp_path):
    pipe = tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    pipe.parent.mkdir(parents=True)
    os.mkfifo(pipe)
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.path is None
    assert submission.reason == "02_sinusoidal.ipynb is a named pipe (FIFO); only regular files are read"
    assert not (tmp_path / "received" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb").exists()


def test_a_device_node_is_refused_without_opening_it(tmp_path):
    device = tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    device.parent.mkdir(parents=True)
    try:
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # the numbers of /dev/zero
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.reason == "02_sinusoidal.ipynb is a character device; only regular files are read"
    assert _received_files(tmp_path / "received") == {}


def test_a_notebook_over_the_cap_is_refused_before_a_byte_is_read(tmp_path):
    large = _put(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"")
    os.truncate(large, 50 * 1024**2 + 1)  # sparse: no disk used
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.path is None
    assert submission.reason == "02_sinusoidal.ipynb is 52428801 bytes; files larger than 52428800 bytes are not read"
    assert _received_files(tmp_path / "received") == {}


def test_a_notebook_that_is_a_folder_is_refused(tmp_path):
    _put(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb" / "inside.txt", b"x")
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.path is None
    assert submission.reason == "02_sinusoidal.ipynb is a folder; only regular files are read"


def test_a_file_that_grows_while_read_is_refused(tmp_path, monkeypatch):
    _put(tmp_path / "grows", b"0123456789ab")
    real_fstat = os.fstat

    def smaller(descriptor):  # the size seen before reading, as if the file grew afterwards
        values = list(real_fstat(descriptor))
        values[stat.ST_SIZE] = 4
        return os.stat_result(values)

    monkeypatch.setattr(safe_files.os, "fstat", smaller)
    with Folder.open(tmp_path) as folder, pytest.raises(Refused) as refused:
        folder.read("grows", 10)
    assert str(refused.value) == "grows grew beyond 10 bytes while it was read; files larger than 10 bytes are not read"


def test_a_file_of_exactly_the_cap_is_read_and_one_byte_more_is_not(tmp_path):
    _put(tmp_path / "ten", b"0123456789")
    _put(tmp_path / "eleven", b"0123456789a")
    with Folder.open(tmp_path) as folder:
        assert folder.read("ten", 10) == b"0123456789"
        with pytest.raises(Refused, match="^eleven is 11 bytes; files larger than 10 bytes are not read$"):
            folder.read("eleven", 10)


# ----------------------------------------------------------------------------------- what the grader reads


def test_the_grader_reads_only_its_own_copy_so_a_pipe_never_blocks_the_record_key(tmp_path):
    pipe = tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    pipe.parent.mkdir(parents=True)
    os.mkfifo(pipe)
    _put(tmp_path / "class" / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb", b"bob")
    received = tmp_path / "received"
    collection = _promptly(collect, tmp_path / "class", ASSIGNMENTS, received)
    ada, bob = _only(collection, "ada"), _only(collection, "bob")
    assert ada.path is None and bob.path == received / "bob" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    graded_with = {"limits": None}
    assert _promptly(_record_key, ada.path, "v1", graded_with) == _record_key(None, "v1", graded_with)
    assert _promptly(_record_key, bob.path, "v1", graded_with) != _record_key(None, "v1", graded_with)


def test_exchange_files_are_copied_capped_and_never_through_a_link(tmp_path):
    folder = tmp_path / "class" / "ada" / "02_sinusoidal"
    _put(folder / "02_sinusoidal.ipynb")
    _put(folder / "submission_secret.txt", b"0123abcd\n")
    _put(tmp_path / "secret-of-the-grader", b"SENTINEL\n")
    _link(folder / "timestamp.txt", tmp_path / "secret-of-the-grader")
    received = tmp_path / "received"
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, received))
    assert submission.notes == (f"timestamp.txt next to the notebook was not used: it {LINK}",)
    assert _received_files(received) == {
        "ada/02_sinusoidal/02_sinusoidal.ipynb": NOTEBOOK,
        "ada/02_sinusoidal/submission_secret.txt": b"0123abcd\n",
    }
    destination = tmp_path / "feedback"
    assert copy_exchange_files(submission.folder, [destination]) == []
    assert sorted(path.name for path in destination.iterdir()) == ["submission_secret.txt"]


def test_an_exchange_file_over_its_cap_is_noted_not_copied(tmp_path):
    folder = tmp_path / "class" / "ada" / "02_sinusoidal"
    _put(folder / "02_sinusoidal.ipynb")
    _put(folder / "timestamp.txt", b"2" * 201)
    submission = _only(_promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received"))
    assert submission.notes == (
        "timestamp.txt next to the notebook was not used: it is 201 bytes; files larger than 200 bytes are not read",
    )
    assert not (submission.folder / "timestamp.txt").exists()


def test_received_must_be_empty(tmp_path):
    _put(tmp_path / "class" / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb")
    _put(tmp_path / "received" / "old.ipynb")
    with pytest.raises(ValueError, match="must be an empty folder"):
        collect(tmp_path / "class", ASSIGNMENTS, tmp_path / "received")


def test_a_zip_is_read_by_the_same_rules_and_its_link_member_is_refused(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("ada/02_sinusoidal/02_sinusoidal.ipynb", NOTEBOOK)
        link = zipfile.ZipInfo("bob/02_sinusoidal/02_sinusoidal.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        bundle.writestr(link, str(SOURCE))
    received = tmp_path / "received"
    collection = _promptly(collect, archive, ASSIGNMENTS, received)
    assert [(s.student, s.path, s.reason) for s in collection.submissions] == [
        ("ada", received / "ada" / "02_sinusoidal" / "02_sinusoidal.ipynb", None),
        ("bob", None, f"02_sinusoidal.ipynb {LINK}"),
    ]
    assert _received_files(received) == {"ada/02_sinusoidal/02_sinusoidal.ipynb": NOTEBOOK}


# ----------------------------------------------------------------------------------- bounds of the walk


def test_the_walk_stops_at_its_bounds_with_warnings(tmp_path, monkeypatch):
    for name in "abcde":
        _put(tmp_path / "wide" / name)
    _put(tmp_path / "deep" / "1" / "2" / "3" / "4" / "file")
    monkeypatch.setattr(safe_files, "MAX_ENTRIES_PER_FOLDER", 3)
    monkeypatch.setattr(safe_files, "MAX_DEPTH", 3)
    with Folder.open(tmp_path / "wide") as folder:
        wide = safe_files.walk(folder)
    assert len(wide.entries) == 3 and {entry.parts for entry in wide.entries} < {(name,) for name in "abcde"}
    assert wide.warnings == ["the class's folder holds more than 3 names; only 3 were read"]
    with Folder.open(tmp_path / "deep") as folder:
        deep = safe_files.walk(folder)
    assert [entry.parts for entry in deep.entries] == [("1",), ("1", "2"), ("1", "2", "3")]
    assert deep.warnings == ["folders more than 3 levels deep were not read (the first: 1/2/3)"]
    monkeypatch.setattr(safe_files, "MAX_ENTRIES_PER_TOP_FOLDER", 1)
    with Folder.open(tmp_path / "deep") as folder:
        total = safe_files.walk(folder)
    assert [entry.parts for entry in total.entries] == [("1",), ("1", "2")]
    assert total.warnings == ["1 holds more than 1 names below it; the rest of it was not read"]


def test_a_student_who_fills_their_folder_with_names_hides_no_other_student(tmp_path, monkeypatch):
    """Round 12: 200,000 files in the first student's folder used up a class-wide count of names, and every
    student listed after them had no row and no mention."""
    for index in range(40):
        _put(tmp_path / "class" / "aaa" / "02_sinusoidal" / f"junk{index:03d}")
    _put(tmp_path / "class" / "aaa" / "02_sinusoidal" / "02_sinusoidal.ipynb", NOTEBOOK)
    _put(tmp_path / "class" / "zed" / "02_sinusoidal" / "02_sinusoidal.ipynb", NOTEBOOK)
    # No class-wide count is left to share: the walk's size is bounded by the top folder's listing times each
    # top folder's own bound.
    assert safe_files.MAX_TOTAL_ENTRIES == safe_files.MAX_ENTRIES_PER_FOLDER * (1 + safe_files.MAX_ENTRIES_PER_TOP_FOLDER)
    monkeypatch.setattr(safe_files, "MAX_ENTRIES_PER_TOP_FOLDER", 20)
    collection = _promptly(collect, tmp_path / "class", ASSIGNMENTS, tmp_path / "received")
    graded = {submission.student: submission for submission in collection.submissions}
    assert graded["zed"].path == tmp_path / "received" / "zed" / "02_sinusoidal" / "02_sinusoidal.ipynb"
    assert "aaa holds more than 20 names below it; the rest of it was not read" in collection.warnings


# ----------------------------------------------------------------------------------- read_notebook (check, prepare)


def _never(*arguments):
    raise AssertionError("a folder was opened where files are read by path")


def test_a_file_replaced_between_its_lookup_and_its_open_is_not_read(tmp_path, monkeypatch):
    first, second = _put(tmp_path / "a.ipynb"), _put(tmp_path / "b.ipynb")
    real_open = os.open

    def swapping_open(path, flags, *arguments, **keywords):
        if Path(path) == first:
            os.replace(second, first)  # a new file under the name looked up
        return real_open(path, flags, *arguments, **keywords)

    monkeypatch.setattr(safe_files.os, "open", swapping_open)
    with pytest.raises(safe_files.Refused, match="was replaced while it was opened"):
        safe_files.read_by_path(first, 1000)


def test_the_students_side_imports_where_os_lacks_posixs_open_flags():
    # As on Windows: no O_NOFOLLOW, O_DIRECTORY, O_CLOEXEC, O_NOCTTY or O_NONBLOCK, no descriptor-relative open.
    code = (
        "import os\n"
        "for name in ('O_NOFOLLOW', 'O_DIRECTORY', 'O_CLOEXEC', 'O_NOCTTY', 'O_NONBLOCK'):\n"
        "    delattr(os, name)\n"
        "os.supports_dir_fd = set()\n"
        "import autograder.student.check, autograder.student.received\n"
        "from autograder.student import safe_files\n"
        "print(safe_files.DESCRIPTOR_RELATIVE)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (completed.returncode, completed.stdout.strip()) == (0, "False"), completed.stderr[-2000:]


@pytest.mark.parametrize("opened", ["relative to the folder", "by path, as on Windows"])
def test_read_notebook_refuses_links_pipes_and_files_over_the_cap(tmp_path, monkeypatch, opened):
    # A student's own check on a system without descriptor-relative opens reads by path, with the same refusals.
    monkeypatch.setattr(sanitize, "DESCRIPTOR_RELATIVE", opened == "relative to the folder")
    monkeypatch.setattr(safe_files.Folder, "open", _never if opened != "relative to the folder" else safe_files.Folder.open)
    real = _put(tmp_path / "real.ipynb")
    _link(tmp_path / "link.ipynb", real)
    os.mkfifo(tmp_path / "pipe.ipynb")
    os.truncate(_put(tmp_path / "large.ipynb", b""), 50 * 1024**2 + 1)
    assert _promptly(read_notebook, tmp_path / "link.ipynb") == (None, f"the file {LINK}")
    assert _promptly(read_notebook, tmp_path / "pipe.ipynb") == (
        None,
        "the file is a named pipe (FIFO); only regular files are read",
    )
    assert _promptly(read_notebook, tmp_path / "large.ipynb") == (
        None,
        "the file is 52428801 bytes; files larger than 52428800 bytes are not read",
    )
    notebook, reason = read_notebook(real)
    assert reason is None and notebook.nbformat == 4


# ----------------------------------------------------------------------------------- random trees

SENTINEL = b"SENTINEL outside the class"
STUDENTS = ["ada", "bob", "bad id!", ".hidden", "__MACOSX", "submitted"]
FOLDERS = ["01_permutation", "02_sinusoidal", "homework", "ada"]
FILES = [
    "02_sinusoidal.ipynb", "01_permutation.ipynb", "Untitled.ipynb", "timestamp.txt", "submission_secret.txt",
    os.fsdecode(b"r\xe9sum\xe9.ipynb"), "\u00fc \u00f1.ipynb", "line\nbreak.ipynb", ".hidden.ipynb", "02_sinusoidal",
]
TARGETS = ["sentinel", "outside", "outside", "root", "missing", "/dev/zero", "/proc/kmsg", "inside", "inside"]


@st.composite
def _parts(draw) -> tuple[str, ...]:
    """A path of 1 to 5 names, each level drawn from names that matter there (a student, an assignment...)."""
    pools = [STUDENTS, FOLDERS, FILES, FOLDERS + FILES, FILES]
    depth = draw(st.sampled_from([1, 2, 3, 3, 3, 4, 5]))
    return tuple(draw(st.sampled_from(pool)) for pool in pools[:depth])


NODE = st.tuples(
    _parts(),
    st.sampled_from(["file", "file", "folder", "fifo", "link", "link", "link"]),
    st.text(alphabet="abc{}\n", max_size=30).map(str.encode),  # a file's bytes (never the sentinel's)
    st.sampled_from(TARGETS),
    st.integers(min_value=0, max_value=40),  # which node an "inside" link points at
)


def _build(root: Path, outside: Path, nodes) -> None:
    """Make each node that can be made; the student is the attacker, so a parent may be a link."""
    for parts, kind, content, target, index in nodes:
        path = root.joinpath(*parts)
        if os.path.lexists(path):  # never write into a pipe or through a link made before
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_bytes(content)
            elif kind == "folder":
                path.mkdir()
            elif kind == "fifo":
                os.mkfifo(path)
            else:
                places = {
                    "sentinel": outside / "sentinel.ipynb", "outside": outside, "root": root,
                    "missing": root / "missing", "inside": root.joinpath(*nodes[index % len(nodes)][0]),
                }
                path.symlink_to(places.get(target, target))
        except OSError:
            continue


def _regular_files(root: Path) -> dict[tuple[str, ...], bytes]:
    """Every regular file below ``root`` reached without a link, by its names."""
    found = {}
    for folder, _, files in os.walk(root):  # os.walk does not follow links by default
        for name in files:
            path = Path(folder) / name
            if stat.S_ISREG(path.lstat().st_mode):
                found[path.relative_to(root).parts] = path.read_bytes()
    return found


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NODE, min_size=1, max_size=25))
@example([(("ada",), "link", b"", "outside", 0)])  # the known attacks, always tried
@example([(("ada", "02_sinusoidal"), "link", b"", "outside", 0)])
@example([(("ada", "02_sinusoidal", "02_sinusoidal.ipynb"), "link", b"", "sentinel", 0)])
@example([(("bob", "02_sinusoidal", "x"), "file", b"b", "", 0), (("ada",), "link", b"", "inside", 0)])
def test_random_trees_give_only_copies_of_regular_files_at_their_place(nodes):
    with tempfile.TemporaryDirectory() as temporary:
        base = Path(temporary)
        root, outside, received = base / "class", base / "outside", base / "received"
        root.mkdir()
        # whatever level a link to ``outside`` stands at, a notebook is where collect would look for one
        for planted in ("sentinel.ipynb", "02_sinusoidal.ipynb", "02_sinusoidal/02_sinusoidal.ipynb",
                        "ada/02_sinusoidal/02_sinusoidal.ipynb", "timestamp.txt"):
            _put(outside / planted, SENTINEL)
        _build(root, outside, nodes)
        in_tree = _regular_files(root)
        collection = _promptly(collect, root, ASSIGNMENTS, received)

        copies = {}
        for folder, folders, files in os.walk(received):
            for name in folders + files:
                path = Path(folder) / name
                mode = path.lstat().st_mode
                assert stat.S_ISDIR(mode) or stat.S_ISREG(mode), path
                if stat.S_ISREG(mode):
                    copies[path.relative_to(received).parts] = path.read_bytes()
        for parts, content in copies.items():
            assert SENTINEL not in content
            assert len(parts) == 3
            sources = [
                source for source, original in in_tree.items()
                if source[-3:] == parts and len(source) in (3, 4) and original == content
            ]
            assert sources, (parts, content)
        for submission in collection.submissions:
            assert submission.folder == received / submission.student / submission.assignment
            if submission.path is not None:
                assert submission.reason is None
                assert submission.path.parent == submission.folder and submission.path.name.endswith(".ipynb")
                assert (submission.student, submission.assignment, submission.path.name) in copies
