"""The cluster's bridge: the grader reads JSON from it and accepts a result only in the shape it makes; the
bridge runs as nobody with the network, a private /tmp and nothing of the grader's to read or write."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest
from planted import sandbox_missing

from autograder import REPOSITORY
from autograder.executors import bridge
from autograder.executors.bridge import BridgeBroken, bytes_of, parse_result, read_messages
from autograder.types import LayoutItem, Task

LAYOUT = (LayoutItem("a", 2.0, "code"), LayoutItem("b", 3.0, "code"))


def task(tmp_path: Path) -> Task:
    return Task(student="ada", assignment="04_relative", notebook=tmp_path / "n.ipynb", template=tmp_path,
                directory=tmp_path / "ada", layout=LAYOUT, notes=(), feedback=tmp_path / "f.html",
                log=tmp_path / "log.txt", timeout=None)


def fields(**changes) -> dict:
    result = {"student": "ada", "assignment": "04_relative", "notes": ["n"], "reason": None, "grader_failure": False,
              "seconds": {"kernel": 1.5},
              "items": [{"grade_id": "a", "score": 2.0, "max_score": 2.0, "status": "passed", "message": ""},
                        {"grade_id": "b", "score": 0.0, "max_score": 3.0, "status": "failed", "message": "no"}]}
    return {**result, **changes}


def test_a_result_of_the_graders_shape_is_accepted(tmp_path):
    result = parse_result(fields(), task(tmp_path))
    assert (result.student, result.score, result.max_score, result.seconds) == ("ada", 2.0, 5.0, {"kernel": 1.5})


@pytest.mark.parametrize("changes", [
    {"student": "bob"},  # another student's grade
    {"assignment": "01_permutation"},
    {"items": [{"grade_id": "a", "score": 9.0, "max_score": 2.0, "status": "passed", "message": ""}]},  # over
    {"items": [{"grade_id": "a", "score": 9.0, "max_score": 9.0, "status": "passed", "message": ""}]},  # points
    {"items": [{"grade_id": "z", "score": 1.0, "max_score": 1.0, "status": "passed", "message": ""}]},  # no such
    {"items": [{"grade_id": "a", "score": 1.0, "max_score": 2.0, "status": "passed", "message": ""}] * 2},
    {"items": [{"grade_id": "a", "score": float("nan"), "max_score": 2.0, "status": "passed", "message": ""}]},
    {"items": [{"grade_id": "a", "score": True, "max_score": 2.0, "status": "passed", "message": ""}]},
    {"items": [{"grade_id": "a", "score": 1.0, "max_score": 2.0, "status": "pwned", "message": ""}]},
    {"items": [{"grade_id": "a", "score": 1.0, "max_score": 2.0, "status": "passed", "message": "", "x": 1}]},
    {"notes": "not a list"}, {"reason": 5}, {"grader_failure": "no"}, {"seconds": [1]},
])
def test_any_other_shape_is_refused_with_what_does_not_fit(tmp_path, changes):
    with pytest.raises((TypeError, ValueError)):
        parse_result(fields(**changes), task(tmp_path))


def _messages(lines: list[bytes]):
    process = subprocess.Popen(["true"])
    return list(read_messages(io.BytesIO(b"".join(lines)), process, io.BytesIO(b"\x1b]0;title\x07boom")))


def test_the_bridges_lines_are_read_as_json_and_nothing_else():
    done = json.dumps({"kind": "done"}).encode() + b"\n"
    warn = json.dumps({"kind": "warn", "message": "w"}).encode() + b"\n"
    assert _messages([warn, done]) == [{"kind": "warn", "message": "w"}]
    with pytest.raises(BridgeBroken, match="not JSON"):
        _messages([pickle.dumps({"kind": "result"}) + b"\n"])  # a pickle is never loaded
    with pytest.raises(BridgeBroken, match="no known kind"):
        _messages([json.dumps({"kind": "exec"}).encode() + b"\n"])
    with pytest.raises(BridgeBroken, match=r"ended .* before its last message: \\x1b\]0;title\\x07boom"):
        _messages([warn])  # no "done": the bridge's standard error is quoted, its escapes shown, not run


def test_a_line_longer_than_a_message_ends_the_batch(monkeypatch):
    monkeypatch.setattr(bridge, "MAX_LINE", 64)
    with pytest.raises(BridgeBroken, match="longer than 64 bytes"):
        _messages([json.dumps({"kind": "warn", "message": "w" * 100}).encode() + b"\n"])


def _shipped(tmp_path, **files) -> dict:
    encoded = {name: base64.b64encode(files.get(name, b"")).decode() for name in ("feedback", "log", "autograded")}
    return {"kind": "result", "index": 0, "result": fields(), **encoded}


def test_a_workers_files_are_held_to_what_the_local_grader_writes(tmp_path):
    import nbformat

    from autograder.executors.dask import _shipped_result
    from autograder.feedback.pages import PAGE_PREFIX

    the_task = dataclasses.replace(task(tmp_path), autograded=tmp_path / "autograded.ipynb")
    page, log = b"<script>alert(1)</script><h1>5 / 5</h1>", b"kernel | \x1b]0;title\x07\x1b[2J\n"
    result = _shipped_result(the_task, _shipped(tmp_path, feedback=page, log=log))
    assert result.reason is None and result.score == 2.0
    written = (tmp_path / "f.html").read_bytes()
    assert written.startswith(PAGE_PREFIX.encode()) and written.endswith(page)  # the policy before any byte
    assert b"\x1b" not in (tmp_path / "log.txt").read_bytes() and b"\\x1b]0;title" in (tmp_path / "log.txt").read_bytes()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output(
        "display_data", data={"application/javascript": "alert(1)", "text/html": "<script>1</script>"})])])
    refused = _shipped_result(the_task, _shipped(tmp_path, autograded=nbformat.writes(notebook).encode()))
    assert refused.grader_failure and "does not accept" in refused.reason
    assert not (tmp_path / "autograded.ipynb").exists()


def test_bytes_are_base64_and_bounded():
    assert bytes_of({"feedback": base64.b64encode(b"page").decode()}, "feedback") == b"page"
    for bad in ({"feedback": "not base64!"}, {"feedback": 5}, {"feedback": "A" * (bridge.MAX_BYTES * 2)}):
        with pytest.raises(BridgeBroken):
            bytes_of(bad, "feedback")


def test_the_bridges_environment_holds_nothing_of_the_graders(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "secret")
    monkeypatch.setenv("JUPYTER_TOKEN", "token")
    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", "5s")
    environment = bridge.bridge_environment()
    assert "PGPASSWORD" not in environment and "JUPYTER_TOKEN" not in environment
    assert environment["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] == "5s" and environment["HOME"] == "/tmp"


@pytest.mark.skipif(sandbox_missing() is not None, reason=f"bubblewrap cannot run here: {sandbox_missing()}")
def test_the_bridge_runs_as_nobody_reads_none_of_the_graders_files_and_writes_only_its_tmp(tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_text("key")
    secret.chmod(0o600)
    probe = f"""
import os, json, socket
seen = {{"uid": os.getuid()}}
for path in ({str(secret)!r}, "/root/.pgpass", "/root/.ssh", "/etc/shadow", {str(tmp_path)!r},
             {str(REPOSITORY / "README.md")!r}, {str(REPOSITORY / "tests")!r}):
    try:
        open(path).read() if os.path.isfile(path) else os.listdir(path)
        seen[path] = "read"
    except OSError as error:
        seen[path] = type(error).__name__
for path in ({str(tmp_path / "written")!r}, "/usr/written", "/tmp/written"):
    try:
        open(path, "w").write("x")
        seen[path] = "written"
    except OSError as error:
        seen[path] = type(error).__name__
import autograder.executors.bridge  # the course's code is there, read-only
print(json.dumps(seen))
"""
    argv = bridge.bridge_argv()[:-3] + [bridge.bridge_argv()[-3], "-c", probe]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=bridge.bridge_environment(),
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen.pop("uid") == 65534
    assert seen.pop("/tmp/written") == "written"
    assert "read" not in seen.values() and "written" not in seen.values(), seen
    assert not (tmp_path / "written").exists() and os.path.exists(secret)
