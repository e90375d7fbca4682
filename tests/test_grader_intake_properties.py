"""Generated hostile archives and notebooks thrown at the intake (hypothesis).

- A zip of any member names (absolute, ``..``, backslashes, duplicates, links, folders, very long names) is
  extracted into its destination and nowhere else, holds only folders and regular ``.ipynb`` files there, and
  what ``collect`` then copies is exactly the bytes of a member at ``<student>/<assignment>/<name>.ipynb``.
- Any JSON value, and any bytes, given as a notebook: ``prepare`` (which runs in the grading stage) never
  raises, and either returns a valid nbformat 4 notebook or a reason; never both, never neither.
"""

from __future__ import annotations

import io
import json
import stat
import tempfile
import warnings
import zipfile
from pathlib import Path

import nbformat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planted import ROOT

from autograder.intake.submissions import collect
from autograder.student.sanitize import prepare

ASSIGNMENT = "01_permutation"
RELEASED = nbformat.read(ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb", as_version=4)

PARTS = st.sampled_from(
    ["ada", "bob", ASSIGNMENT, "02_sinusoidal", "..", ".", "", "__MACOSX", ".hidden", "x" * 300, "a\\b", "é", "\x00"]
)
NAMES = st.builds(
    lambda absolute, parts, leaf: ("/" if absolute else "") + "/".join([*parts, leaf]),
    st.booleans(),
    st.lists(PARTS, max_size=4),
    st.sampled_from([f"{ASSIGNMENT}.ipynb", "notes.ipynb", "x.py", "", "../../escape.ipynb"]),
)
MEMBERS = st.lists(
    st.tuples(NAMES, st.sampled_from(["file", "folder", "link"]), st.binary(max_size=64)), max_size=12
)


def _zip(members) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as bundle:
        warnings.simplefilter("ignore", UserWarning)  # duplicate names are part of the attack
        for name, kind, content in members:
            if "\x00" in name or not name:
                continue
            info = zipfile.ZipInfo(name + ("/" if kind == "folder" else ""))
            if kind == "link":
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                content = b"/etc/passwd"
            bundle.writestr(info, b"" if kind == "folder" else content)
    return buffer.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MEMBERS)
def test_a_generated_zip_is_copied_inside_received_as_plain_files_of_its_members(members):
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        archive = work / "class.zip"
        archive.write_bytes(_zip(members))
        received = work / "received"
        collection = collect(archive, (ASSIGNMENT, "02_sinusoidal"), received)
        outside = {path for path in work.rglob("*")} - {archive, received} - set(received.rglob("*"))
        assert outside == set()
        for path in received.rglob("*"):
            assert not path.is_symlink()
            assert path.is_dir() or (path.is_file() and path.name.endswith((".ipynb", ".txt")))
        member_bytes = {}
        with zipfile.ZipFile(archive) as bundle:
            for info in bundle.infolist():
                if not info.is_dir():
                    member_bytes.setdefault(info.filename.strip("/"), set()).add(bundle.read(info))
        for submission in collection.submissions:
            if submission.path is None:
                continue
            relative = submission.path.relative_to(received).as_posix()
            assert len(Path(relative).parts) == 3
            assert any(
                submission.path.read_bytes() in contents for name, contents in member_bytes.items()
                if name.endswith(relative)
            ), relative


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30,
)
CELLISH = st.fixed_dictionaries(
    {"cell_type": st.sampled_from(["code", "markdown", "raw", "other", 3]), "source": st.text(max_size=30) | JSON},
    optional={"metadata": JSON, "outputs": JSON, "id": JSON, "execution_count": JSON},
)
NOTEBOOKISH = st.fixed_dictionaries(
    {"cells": st.lists(CELLISH, max_size=5) | JSON, "nbformat": st.sampled_from([4, 3, "4", 5]),
     "nbformat_minor": st.sampled_from([0, 4, 5, -1]), "metadata": JSON},
)


def _check_prepared(path: Path) -> None:
    prepared = prepare(path, RELEASED)
    assert (prepared.notebook is None) != (prepared.reason is None)
    if prepared.notebook is not None:
        nbformat.validate(prepared.notebook)
        nbformat.writes(prepared.notebook).encode("utf-8")
    assert all(isinstance(note, str) for note in prepared.notes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NOTEBOOKISH | JSON)
def test_any_json_as_a_notebook_is_graded_or_refused_with_a_reason(value):
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / "n.ipynb"
        path.write_text(json.dumps(value))
        _check_prepared(path)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_a_notebook_are_refused_with_a_reason(data):
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / "n.ipynb"
        path.write_bytes(data)
        _check_prepared(path)
