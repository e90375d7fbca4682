"""A class's zip is read member by member, never extracted whole (autograder.intake.zip_tree, collect).

Each member is refused by what it declares before a byte is read (encrypted, Deflate64, larger than the
notebook's cap), copied a chunk at a time at most its declared size, and refused when it holds another size
or fails while it is read (a corrupt header or stream): that student gets no copy and the reason, and every
other student of the zip is received. The members are patched by hand, as a hostile zip would be written.
"""

from __future__ import annotations

import csv
import io
import random
import subprocess
import sys
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest
from planted import ROOT, command_environment, sandbox_missing

from autograder.intake.submissions import collect
from autograder.student.sanitize import MAX_NOTEBOOK_BYTES

ASSIGNMENTS = ("01_permutation", "02_sinusoidal")
NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
HONEST = {"ada": NOTEBOOK, "cy": NOTEBOOK + b" "}
# Offsets in a zip's local file header and central directory entry (APPNOTE.TXT 4.3.7, 4.3.12).
LOCAL = {"flags": 6, "method": 8, "crc": 14, "compressed": 18, "size": 22}
CENTRAL = {"flags": 8, "method": 10, "crc": 16, "compressed": 20, "size": 24}


def _path(student: str) -> str:
    return f"{student}/02_sinusoidal/02_sinusoidal.ipynb"


def _zip(hostile: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED, honest: dict[str, bytes] = HONEST) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as bundle:
        for student, content in {**honest, **hostile}.items():
            bundle.writestr(_path(student), content)
    return buffer.getvalue()


def _patch(data: bytes, student: str, local: dict[str, int] | None = None, central: dict[str, int] | None = None,
           local_signature: bytes | None = None) -> bytes:
    """``data`` with fields of ``student``'s member set: ``flags`` and ``method`` (2 bytes), ``crc``,
    ``compressed`` and ``size`` (4 bytes), in its local header and its central directory entry."""
    patched = bytearray(data)
    name = _path(student).encode()
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        offset = bundle.getinfo(_path(student)).header_offset
    central_offset = next(
        index for index in _all(data, b"PK\x01\x02") if data[index + 46 : index + 46 + len(name)] == name
    )
    for fields, base in ((local or {}, offset), (central or {}, central_offset)):
        table = LOCAL if base == offset else CENTRAL
        for field, value in fields.items():
            width = 2 if field in ("flags", "method") else 4
            patched[base + table[field] : base + table[field] + width] = value.to_bytes(width, "little")
    if local_signature is not None:
        patched[offset : offset + 4] = local_signature
    return bytes(patched)


def _all(data: bytes, needle: bytes):
    start = data.find(needle)
    while start != -1:
        yield start
        start = data.find(needle, start + 1)


def _collect(tmp_path: Path, data: bytes):
    archive = tmp_path / "class.zip"
    archive.write_bytes(data)
    received = tmp_path / "received"
    collection = collect(archive, ASSIGNMENTS, received)
    return {submission.student: submission for submission in collection.submissions}, received


def _assert_honest_received(found: dict, received: Path, refused: str) -> None:
    for student, content in HONEST.items():
        assert found[student].path.read_bytes() == content, student
    assert found[refused].path is None
    copies = {path.relative_to(received).as_posix() for path in received.rglob("*") if path.is_file()}
    assert copies == {_path(student) for student in HONEST}  # nothing of the refused member, not even a part


def test_an_encrypted_member_gives_its_student_0_and_the_others_are_received(tmp_path):
    data = _patch(_zip({"eve": NOTEBOOK}), "eve", local={"flags": 1}, central={"flags": 1})
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:  # zipfile itself would stop the batch here
        try:
            bundle.read(_path("eve"))
        except RuntimeError as error:
            assert "encrypted" in str(error)
        else:
            raise AssertionError("zipfile read an encrypted member without a password")
    found, received = _collect(tmp_path, data)
    assert found["eve"].reason == "02_sinusoidal.ipynb is encrypted in the zip; encrypted files are not read"
    _assert_honest_received(found, received, "eve")


def test_a_deflate64_member_gives_its_student_0_and_the_others_are_received(tmp_path):
    data = _patch(_zip({"dan": NOTEBOOK}), "dan", local={"method": 9}, central={"method": 9})
    found, received = _collect(tmp_path, data)
    assert found["dan"].reason == (
        "02_sinusoidal.ipynb is compressed by method 9 in the zip (Deflate64 is 9); only stored, deflate, bzip2, "
        "lzma are read"
    )
    _assert_honest_received(found, received, "dan")


def test_a_corrupt_local_header_gives_its_student_0_with_the_reason(tmp_path):
    data = _patch(_zip({"hal": NOTEBOOK}), "hal", local_signature=b"XX\x03\x04")
    found, received = _collect(tmp_path, data)
    assert found["hal"].reason == (
        "02_sinusoidal.ipynb could not be read from the zip (BadZipFile: Bad magic number for file header)"
    )
    _assert_honest_received(found, received, "hal")


def test_a_corrupt_deflate_stream_gives_its_student_0_with_the_reason(tmp_path):
    data = bytearray(_zip({"zed": NOTEBOOK * 50}))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as bundle:
        info = bundle.getinfo(_path("zed"))
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start : start + 8] = b"\xff" * 8  # a reserved block type: zlib.error
    found, received = _collect(tmp_path, bytes(data))
    assert found["zed"].reason.startswith("02_sinusoidal.ipynb could not be read from the zip (error: Error -3")
    _assert_honest_received(found, received, "zed")


def test_a_cut_stream_gives_its_student_0_with_the_reason(tmp_path):
    content = random.Random(35).randbytes(50_000)  # not compressible: half the stream is half the member
    data = _zip({"kim": content})
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        compressed = bundle.getinfo(_path("kim")).compress_size
    data = _patch(data, "kim", central={"compressed": compressed // 2})  # the stream ends early
    found, received = _collect(tmp_path, data)
    assert found["kim"].reason == (  # zipfile reads what the stream holds, then checks the CRC of the whole member
        f"02_sinusoidal.ipynb could not be read from the zip (BadZipFile: Bad CRC-32 for file '{_path('kim')}')"
    )
    _assert_honest_received(found, received, "kim")


def test_a_member_that_holds_more_than_it_declares_is_refused(tmp_path):
    data = _zip({"max": NOTEBOOK * 10}, method=zipfile.ZIP_STORED)
    data = _patch(data, "max", local={"size": len(NOTEBOOK)}, central={"size": len(NOTEBOOK)})
    found, received = _collect(tmp_path, data)
    # zipfile stops at the declared size and checks the CRC of the whole member: what was read does not match
    assert found["max"].reason == (
        f"02_sinusoidal.ipynb could not be read from the zip (BadZipFile: Bad CRC-32 for file '{_path('max')}')"
    )
    _assert_honest_received(found, received, "max")


def test_a_member_that_holds_fewer_bytes_than_it_declares_is_refused(tmp_path):
    data = _zip({"min": NOTEBOOK}, method=zipfile.ZIP_STORED)
    declared = len(NOTEBOOK) * 10
    data = _patch(data, "min", local={"size": declared}, central={"size": declared})
    found, received = _collect(tmp_path, data)
    # zipfile reads the 65 bytes stored, whose CRC is right: the intake counts them against the declared size
    assert found["min"].reason == f"02_sinusoidal.ipynb holds {len(NOTEBOOK)} bytes but declares {declared}; it was not copied"
    _assert_honest_received(found, received, "min")


def test_a_member_declared_beyond_the_cap_is_refused_before_a_byte_is_read(tmp_path):
    big = MAX_NOTEBOOK_BYTES + 1
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for student, content in HONEST.items():
            bundle.writestr(_path(student), content)
        with bundle.open(_path("bomb"), "w") as member:  # 50 MB of zeros: about 50 KB compressed
            for _ in range(big // 1024**2):
                member.write(bytes(1024**2))
            member.write(bytes(big % 1024**2))
    assert len(buffer.getvalue()) < 1024**2
    tracemalloc.start()
    try:
        found, received = _collect(tmp_path, buffer.getvalue())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found["bomb"].reason == (
        f"02_sinusoidal.ipynb declares {big} bytes in the zip; files larger than {MAX_NOTEBOOK_BYTES} bytes are not read"
    )
    assert peak < 8 * 1024**2
    _assert_honest_received(found, received, "bomb")


def test_a_large_member_under_the_cap_is_copied_a_chunk_at_a_time(tmp_path):
    size = 45 * 1024**2  # the notebooks: just under the cap
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as bundle, bundle.open(_path("ada"), "w") as member:
        for _ in range(45):
            member.write(b"x" * 1024**2)
    archive = tmp_path / "class.zip"
    archive.write_bytes(buffer.getvalue())
    del buffer
    tracemalloc.start()
    try:
        collection = collect(archive, ASSIGNMENTS, tmp_path / "received")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    [submission] = collection.submissions
    assert submission.path.stat().st_size == size
    assert peak < 8 * 1024**2, f"{peak} bytes held at once while copying {size}"
    # written once: only the zip and the one copy in received/
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file()) == [
        "class.zip", f"received/{_path('ada')}"
    ]


def test_a_zip_member_crc_is_checked(tmp_path):
    data = _zip({"rex": NOTEBOOK}, method=zipfile.ZIP_STORED)
    crc = zlib.crc32(NOTEBOOK) ^ 1
    data = _patch(data, "rex", local={"crc": crc}, central={"crc": crc})
    found, received = _collect(tmp_path, data)
    assert found["rex"].reason.endswith(f"(BadZipFile: Bad CRC-32 for file '{_path('rex')}')")
    _assert_honest_received(found, received, "rex")


def test_an_error_zipfile_raises_on_opening_a_member_gives_its_student_0(tmp_path):
    # "Compressed patched data" (flag bit 5), which the intake does not look for: zipfile raises
    # NotImplementedError when it opens the member, as it would for any method or feature it lacks.
    data = _patch(_zip({"pat": NOTEBOOK}), "pat", local={"flags": 0x20}, central={"flags": 0x20})
    found, received = _collect(tmp_path, data)
    assert found["pat"].reason == (
        "02_sinusoidal.ipynb could not be read from the zip (NotImplementedError: compressed patched data (flag bit 5))"
    )
    _assert_honest_received(found, received, "pat")


@pytest.mark.slow
def test_grade_of_a_hostile_zip_grades_every_student_and_says_why_each_was_refused(tmp_path):
    """`python -m autograder grade class.zip --out DIR --max-class-mb 1`, as the instructors' guide writes it:
    one student encrypted, one Deflate64, one past the class's cap; the batch completes and items.csv says why."""
    if sandbox_missing() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_missing()}")
    honest = {"ada": b"not JSON", "cy": b"not JSON either"}  # received, then refused in the stage: no kernel runs
    data = _zip({"bob": b"b" * (1024**2 + 1), "dan": NOTEBOOK, "eve": NOTEBOOK}, honest=honest)
    data = _patch(data, "dan", local={"method": 9}, central={"method": 9})
    data = _patch(data, "eve", local={"flags": 1}, central={"flags": 1})
    archive = tmp_path / "class.zip"
    archive.write_bytes(data)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "autograder", "grade", str(archive), "--out", str(out), "--no-progress",
               "--max-class-mb", "1"]
    run = subprocess.run(
        command, cwd=ROOT, env=command_environment(), capture_output=True, text=True, timeout=900, check=False
    )
    assert run.returncode == 0, run.stderr
    with open(out / "items.csv", newline="") as handle:
        reasons = {row["student_id"]: row["message"] for row in csv.DictReader(handle)}
    assert set(reasons) == {"ada", "bob", "cy", "dan", "eve"}
    for student in ("ada", "cy"):
        assert reasons[student].startswith("the file is not valid JSON"), reasons[student]
    assert "class's files may take at most 1048576 bytes" in reasons["bob"]
    assert "compressed by method 9" in reasons["dan"]
    assert "is encrypted in the zip" in reasons["eve"]
    with open(out / "grades.csv", newline="") as handle:
        assert {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)} == dict.fromkeys(reasons, 0.0)


def test_a_student_with_thousands_of_members_in_a_class_zip_stops_no_other_student(tmp_path, monkeypatch):
    """Round 12: 20,001 members in one student's folder made the whole zip refused; now that student's own
    folder is cut at its bound, with a warning, and the others are read."""
    from autograder.student import safe_files

    monkeypatch.setattr(safe_files, "MAX_ENTRIES_PER_TOP_FOLDER", 30)
    for prefix in ("", "submitted/"):  # students at the zip's top, or in nbgrader's one folder
        archive = tmp_path / f"class{len(prefix)}.zip"
        with zipfile.ZipFile(archive, "w") as bundle:
            for number in range(25_000):
                bundle.writestr(f"{prefix}aaa/01_permutation/junk{number:05d}", "")
            bundle.writestr(f"{prefix}zed/01_permutation/01_permutation.ipynb", NOTEBOOK)
        received = tmp_path / f"received{len(prefix)}"
        collection = collect(archive, ASSIGNMENTS, received)
        assert [(submission.student, submission.path) for submission in collection.submissions] == [
            ("aaa", None), ("zed", received / "zed" / "01_permutation" / "01_permutation.ipynb")]
        assert f"{prefix}aaa holds more than 30 names below it in the zip; the rest of it was not read" in (
            collection.warnings)


def test_a_zip_s_skipped_names_beside_its_submitted_folder_share_no_bound_between_students(tmp_path, monkeypatch):
    """Round 17: a __MACOSX/ folder or a .DS_Store beside the one folder of the class (as macOS's Compress writes
    them) made the zip's top hold two names before they were skipped: the students then shared one bound, and
    one student's junk left out everyone after them in the zip."""
    from autograder.student import safe_files

    monkeypatch.setattr(safe_files, "MAX_ENTRIES_PER_TOP_FOLDER", 30)
    for extra in ("__MACOSX/submitted/._ada", ".DS_Store", "submitted/.DS_Store"):
        archive = tmp_path / "class.zip"
        with zipfile.ZipFile(archive, "w") as bundle:
            bundle.writestr("submitted/ada/01_permutation/01_permutation.ipynb", NOTEBOOK)
            for number in range(40):
                bundle.writestr(f"submitted/mal/01_permutation/junk{number:02d}", "")
            bundle.writestr("submitted/zed/01_permutation/01_permutation.ipynb", NOTEBOOK)
            bundle.writestr(extra, "")
        received = tmp_path / "received" / str(len(extra))
        collection = collect(archive, ASSIGNMENTS, received)
        assert [submission.student for submission in collection.submissions if submission.path] == ["ada", "zed"], extra
        assert "submitted/mal holds more than 30 names below it in the zip; the rest of it was not read" in (
            collection.warnings)


def _batch(root, names, as_zip: bool):
    """A batch holding a notebook under each of ``names``: the folder ``root``, or the zip ``root.zip``."""
    if as_zip:
        with zipfile.ZipFile(root.with_suffix(".zip"), "w") as bundle:
            for name in names:
                bundle.writestr(name, NOTEBOOK)
        return root.with_suffix(".zip")
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(NOTEBOOK)
    return root


@pytest.mark.parametrize("as_zip", [False, True])
def test_a_lone_student_folder_is_read_as_that_student_s_and_never_as_the_class(tmp_path, as_zip):
    """Round 17: a batch holding one student's folder with no assignment folder in it was taken as the class's
    root, and the folders the student made in it were graded as other students' (with their parameters, into
    their gradebook rows). Only nbgrader's ``submitted`` is a folder of the class; any other is a student's."""
    planted = ("mallory/alice/01_permutation/01_permutation.ipynb", "mallory/bob/01_permutation/01_permutation.ipynb")
    root = _batch(tmp_path / "late", planted, as_zip)
    collection = collect(root, ASSIGNMENTS, tmp_path / "received")
    assert not any(submission.student in ("alice", "bob") for submission in collection.submissions)
    assert any(warning.startswith("mallory is the only folder of the class's root and holds no assignment folder")
               for warning in collection.warnings)


@pytest.mark.parametrize("as_zip", [False, True])
def test_a_student_whose_id_is_an_assignment_s_name_in_submitted_stops_no_other_student(tmp_path, as_zip):
    """Round 18: inside nbgrader's submitted/, a student folder named like an assignment made submitted/ read as
    one student's folder: nobody else was graded, or listed. submitted/ holds the students whatever their IDs."""
    names = ("submitted/01_permutation/01_permutation/01_permutation.ipynb",
             "submitted/ada/01_permutation/01_permutation.ipynb")
    root = _batch(tmp_path / "class", names, as_zip)
    collection = collect(root, ASSIGNMENTS, tmp_path / "received")
    assert [(submission.student, submission.assignment) for submission in collection.submissions
            if submission.path] == [("01_permutation", "01_permutation"), ("ada", "01_permutation")]


def test_zip_names_deeper_than_a_folder_s_walk_reads_are_left_out_with_one_warning(tmp_path):
    """Round 17: a zip's names had no depth bound, and each part of a name is a folder of the tree: memory and
    time grew with the square of a name's depth, in grade's own process. Names past the walk's depth are left out
    before they are stored, with one warning for the student's folder; the other students are read."""
    from autograder.intake.zip_tree import MAX_NAME_PARTS, ZipTree

    archive = tmp_path / "class.zip"
    deep = "/".join(["d"] * 5000)
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("ada/01_permutation/01_permutation.ipynb", NOTEBOOK)
        for number in range(3):
            bundle.writestr(f"mal/{deep}/x{number}", "")
        bundle.writestr("mal/01_permutation/" + "/".join(["e"] * (MAX_NAME_PARTS - 2)), "")  # as deep as allowed
    with ZipTree.open(archive, lambda name: False) as tree:
        assert max(len(parts) for parts in tree.folders) == MAX_NAME_PARTS - 1
        assert [warning for warning in tree.warnings if "parts deep" in warning] == [(
            f"mal: names more than {MAX_NAME_PARTS} parts deep in the zip were not read (the first: "
            f"mal/{'/'.join(['d'] * (MAX_NAME_PARTS - 1))}/...)")]
    collection = collect(archive, ASSIGNMENTS, tmp_path / "received")
    assert [submission.student for submission in collection.submissions if submission.path] == ["ada"]


def test_a_zip_whose_directory_is_too_large_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """zipfile parses a zip's whole directory into memory; its size is read from the end records first.
    66,000 members of 60-byte names: 66,000 x (46 + 60) bytes of directory, declared in the zip64 record."""
    from autograder.intake import zip_tree

    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for number in range(66_000):
            bundle.writestr(f"{number:060d}", "")
    assert zip_tree.directory_bytes(archive) == 66_000 * (46 + 60)

    def no_parse(*arguments, **keywords):
        raise AssertionError("the directory was parsed")

    monkeypatch.setattr(zip_tree.zipfile, "ZipFile", no_parse)
    with pytest.raises(ValueError, match=r"declares a directory of members of 6996000 bytes; at most 6000000 are read"):
        collect(archive, ("04_relative",), tmp_path / "received")


def test_the_directory_size_of_a_small_zip_is_its_headers(tmp_path):
    from autograder.intake.zip_tree import directory_bytes

    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for name in ("ana/04_relative/04_relative.ipynb", "bob/04_relative/04_relative.ipynb"):
            bundle.writestr(name, "{}")
        bundle.comment = b"a comment after the end record's fields"
    assert directory_bytes(archive) == 2 * (46 + len("ana/04_relative/04_relative.ipynb"))
    (tmp_path / "not-a-zip.zip").write_bytes(b"just text")
    assert directory_bytes(tmp_path / "not-a-zip.zip") is None


def test_the_directory_size_is_read_from_the_record_zipfile_reads(tmp_path):
    """An end record whose directory-offset field holds the record's own signature: a search backwards for the
    signature lands inside the record; zipfile finds the record, ignores the offset and reads the directory."""
    from autograder.intake.zip_tree import directory_bytes

    archive = tmp_path / "forged.zip"
    names = [f"{number:040d}" for number in range(50)]
    with zipfile.ZipFile(archive, "w") as bundle:
        for name in names:
            bundle.writestr(name, "")
    data = bytearray(archive.read_bytes())
    end = len(data) - 22  # no comment: the 22-byte record ends the file
    assert data[end:end + 4] == b"PK\x05\x06"
    data[end + 16:end + 20] = b"PK\x05\x06"  # the directory's offset field
    archive.write_bytes(bytes(data))
    with zipfile.ZipFile(archive) as bundle:
        assert [member.filename for member in bundle.infolist()] == names  # zipfile reads it all the same
    assert directory_bytes(archive) == 50 * (46 + 40)
