"""The formgrader's files: only what the grader wrote for the instructor, never a student's raw bytes.

JupyterLab reads and writes the served folder DIR through the server's contents manager (the file browser, the
notebook editor and ``/view/`` through ``/api/contents`` and its checks, every one of which turns an API path
into a file path with ``_get_os_path``) and through the manager's files handler (``/files/``, tornado's static
file handler on DIR). This manager (``--ServerApp.contents_manager_class``, set by
:mod:`autograder.formgrader.server`) and its files handler refuse, with 403, every path outside an allowlist:

- the files at DIR's top level (the grader's own: its report, the course configuration, the gradebook; and a
  file the instructor put there), but no link;
- the folders of :data:`SERVED_FOLDERS` and everything under them: ``autograded/`` (each submission rebuilt
  with its texts, code and outputs capped, :mod:`autograder.feedback.outputs`), ``feedback/`` (the pages the
  grading stage made), ``source/`` and ``release/`` (the course's own notebooks).

Nothing is changed through it (:class:`ServedFolders` refuses every write). Everything else -- ``submitted/``, where ``collect`` puts each student's notebook as it came (up to the
intake's cap, parsed by nothing outside the grading stage), the grader's logs, its records -- is refused and
left out of every listing. An allowlist, not a list of known folders: a folder a later version adds is
refused until it is named here.
"""

from __future__ import annotations

import os
import re
import stat
from contextvars import ContextVar

from jupyter_server.base.handlers import AuthenticatedFileHandler
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from nbgrader.api import MissingEntry
from nbgrader.server_extensions.formgrader.handlers import SubmissionFilesHandler
from tornado.web import HTTPError
from traitlets import default

SERVED_FOLDERS = frozenset({"autograded", "feedback", "source", "release"})


def served(api_path: str, top_level_is_file: bool) -> bool:
    """Whether the formgrader serves ``api_path`` (``/``-separated, relative to DIR): DIR itself, a file at
    its top level (``top_level_is_file``: the first part names a file), or anything in a served folder."""
    parts = [part for part in api_path.strip("/").split("/") if part]
    if not parts:
        return True
    if parts[0] in SERVED_FOLDERS:
        return True
    return len(parts) == 1 and top_level_is_file


class ConfinedSubmissionFiles(SubmissionFilesHandler):
    """nbgrader's ``/formgrader/submissions/<id>/<file>``, which serves the files beside a submission's autograded
    notebook, confined to that folder: a path that leaves it once decoded and normalized (``..``, ``%2e%2e``,
    ``%2F``) or through a link answers 403 (nbgrader's own joins the path to the folder and serves anything
    under the course's root). Taken before nbgrader's route by :mod:`autograder.formgrader.refusals`."""

    def parse_url_path(self, url_path):
        match = re.match(r"([^/]+)/(.*)", url_path.lstrip("/"))
        if match is None:
            raise HTTPError(404, "no submission's file named")
        submission_id, path = match.groups()
        try:
            submission = self.gradebook.find_submission_notebook_by_id(submission_id)
        except MissingEntry:
            raise HTTPError(404, "no such submission") from None
        folder = os.path.abspath(self.coursedir.format_path(
            self.coursedir.autograded_directory, submission.student.id, submission.assignment.assignment.name))
        full_path = os.path.normpath(os.path.join(folder, path))
        if not _inside(full_path, folder) or not _inside(os.path.realpath(full_path), os.path.realpath(folder)):
            raise HTTPError(403, "Not served by the formgrader: the path leaves the submission's folder")
        return super(SubmissionFilesHandler, self).parse_url_path(full_path)


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def _refusal(name: str) -> HTTPError:
    return HTTPError(403, f"Not served by the formgrader: {name} is not a file at the top of the folder nor one "
                          f"of the folders it shows ({', '.join(sorted(SERVED_FOLDERS))})")


class ServedFilesHandler(AuthenticatedFileHandler):
    """``/files/``: jupyter_server serves a file manager's files straight from the disk (tornado's static file
    handler), so the manager's rule (:meth:`ServedFolders._refused`) is applied here too, to the absolute path
    that handler resolved (after decoding, ``..`` removed) and to where its links lead."""

    def validate_absolute_path(self, root: str, absolute_path: str) -> str | None:
        resolved = super().validate_absolute_path(root, absolute_path)
        if (refused := self.contents_manager._refused(os.path.normpath(resolved))) is not None:
            raise _refusal(refused)
        return resolved


_LISTING = ContextVar("listing", default=None)  # the API path of the folder being listed (per request)


READ_ONLY = ("the formgrader's files are read-only: grades and comments go into the gradebook through the "
             "formgrader's pages; change a file with the course's commands or in a terminal of your own")


class ServedFolders(AsyncLargeFileManager):
    """JupyterLab's file manager, refusing (403) and hiding every path that :func:`served` does not allow, and
    refusing every change (403): no write, new file, copy, rename, deletion or checkpoint. The formgrader grades
    through nbgrader's gradebook, never through files; a page that runs script in the formgrader's origin, or
    a token that leaks, could otherwise write the course's ``nbgrader_config.py``, which every nbgrader command
    run in the folder executes as the instructor."""

    async def save(self, model, path=""):
        raise HTTPError(403, READ_ONLY)

    async def delete_file(self, path):
        raise HTTPError(403, READ_ONLY)

    async def rename_file(self, old_path, new_path):
        raise HTTPError(403, READ_ONLY)

    async def copy(self, from_path, to_path=None):
        raise HTTPError(403, READ_ONLY)

    async def create_checkpoint(self, path):
        raise HTTPError(403, READ_ONLY)

    async def restore_checkpoint(self, checkpoint_id, path):
        raise HTTPError(403, READ_ONLY)

    async def delete_checkpoint(self, checkpoint_id, path):
        raise HTTPError(403, READ_ONLY)

    @default("files_handler_class")
    def _files_handler_class_default(self):
        return ServedFilesHandler

    def _refused(self, os_path: str) -> str | None:
        """Why ``os_path`` (normalized, inside the root) is not served, or None: the path as named, then where
        its links lead, must each be a served place under the root."""
        root = os.path.abspath(self.root_dir)
        for where, base in ((os_path, root), (os.path.realpath(os_path), os.path.realpath(root))):
            relative = os.path.relpath(where, base).replace(os.sep, "/")
            relative = "" if relative == "." else relative
            parts = [part for part in relative.split("/") if part]
            if parts[:1] == [".."]:
                return "a link out of the folder"
            if not served(relative, len(parts) == 1 and _is_plain_file(where)):
                return parts[0]
        return None

    def _get_os_path(self, path):
        os_path = super()._get_os_path(path)  # normalized: ".." removed, inside the root
        if (refused := self._refused(os_path)) is not None:
            raise _refusal(refused)
        return os_path

    async def _dir_model(self, path, content=True):
        token = _LISTING.set(str(path))
        try:
            return await super()._dir_model(path, content=content)
        finally:
            _LISTING.reset(token)

    def should_list(self, name):
        """Leave out of a listing what :meth:`_get_os_path` refuses."""
        listing = _LISTING.get()
        if not super().should_list(name) or listing is None:
            return super().should_list(name)
        child = os.path.normpath(os.path.join(os.path.abspath(self.root_dir), listing.strip("/"), name))
        return self._refused(child) is None


def _is_plain_file(os_path: str) -> bool:
    """A regular file that is not a symbolic link (``lstat``: a link at the top is not followed), or nothing
    yet (a file the instructor creates there)."""
    try:
        return stat.S_ISREG(os.lstat(os_path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False
