"""The formgrader's file manager serves DIR's top-level files and its served folders, and nothing else; it changes
nothing anywhere (round 27)."""

from __future__ import annotations

import asyncio
import os

import nbformat
import pytest
from tornado.web import HTTPError

from autograder.formgrader.contents import SERVED_FOLDERS, ServedFolders, served


@pytest.fixture
def manager(tmp_path):
    out = tmp_path / "graded"
    for folder in ("autograded/alice/04_relative", "submitted/alice/04_relative", "logs/alice", "feedback/alice"):
        (out / folder).mkdir(parents=True)
    notebook = nbformat.v4.new_notebook()
    for folder in ("autograded/alice/04_relative", "submitted/alice/04_relative"):
        nbformat.write(notebook, out / folder / "04_relative.ipynb")
    (out / "report.txt").write_text("report\n")
    (out / "logs/alice/04_relative.log").write_text("log\n")
    os.symlink(out / "submitted/alice/04_relative/04_relative.ipynb", out / "linked.ipynb")
    os.symlink("../../../submitted", out / "autograded/alice/04_relative/link")  # inside a served folder
    return ServedFolders(root_dir=str(out))


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_top_listing_shows_the_served_folders_and_plain_files_only(manager):
    names = {entry["name"] for entry in run(manager.get(""))["content"]}
    assert names == {"autograded", "feedback", "report.txt"}


@pytest.mark.parametrize("path", ["submitted", "submitted/alice/04_relative/04_relative.ipynb", "logs/alice",
                                  "logs/alice/04_relative.log", "linked.ipynb", "/submitted/", "nothing/here",
                                  "autograded/../submitted/alice/04_relative/04_relative.ipynb",
                                  "source/../logs/alice/04_relative.log", "feedback/./../submitted",
                                  "autograded/alice/04_relative/link/alice/04_relative/04_relative.ipynb",
                                  "autograded/alice/04_relative/link"])
def test_every_other_path_is_refused_for_reading_and_writing(manager, path):
    for call in (lambda: manager.get(path), lambda: manager.is_hidden(path)):
        with pytest.raises(HTTPError) as refused:
            run(call())
        assert refused.value.status_code == 403 and "Not served by the formgrader" in refused.value.log_message
    for call in (lambda: manager.save({"type": "file", "format": "text", "content": "x"}, path + "/x.txt"),
                 lambda: manager.delete_file(path)):
        with pytest.raises(HTTPError) as refused:
            run(call())
        assert refused.value.status_code == 403


def test_a_copy_from_a_path_that_leaves_the_served_folders_is_refused(manager):
    with pytest.raises(HTTPError) as refused:
        run(manager.copy("autograded/../submitted/alice/04_relative/04_relative.ipynb", "autograded"))
    assert refused.value.status_code == 403


def test_served_folders_are_listed_and_read_whole(manager):
    listing = run(manager.get("autograded/alice/04_relative"))
    assert [entry["name"] for entry in listing["content"]] == ["04_relative.ipynb"]  # the link: not listed
    model = run(manager.get("autograded/alice/04_relative/04_relative.ipynb"))
    assert model["type"] == "notebook" and model["content"]["nbformat"] == 4
    assert run(manager.get("report.txt"))["content"] == "report\n"

def test_nothing_is_written_even_where_everything_is_read(manager):
    root = manager.root_dir
    before = sorted(os.listdir(root))
    changes = (
        lambda: manager.save({"type": "file", "format": "text", "content": "notes"}, "notes.txt"),
        lambda: manager.save({"type": "file", "format": "text", "content": "import os"}, "report.txt"),
        lambda: manager.new_untitled("autograded", type="file", ext=".py"),
        lambda: manager.copy("report.txt", "feedback"),
        lambda: manager.rename_file("report.txt", "moved.txt"),
        lambda: manager.delete_file("report.txt"),
        lambda: manager.create_checkpoint("report.txt"),
    )
    for call in changes:
        with pytest.raises(HTTPError) as refused:
            run(call())
        assert refused.value.status_code == 403 and "read-only" in refused.value.log_message
    assert sorted(os.listdir(root)) == before and run(manager.get("report.txt"))["content"] == "report\n"


def test_the_rule_itself():
    assert served("", False) and served("report.txt", True) and not served("report.txt", False)
    assert all(served(f"{folder}/a/b", False) for folder in SERVED_FOLDERS)
    assert not served("submitted/a", False) and not served("a/autograded", False)
