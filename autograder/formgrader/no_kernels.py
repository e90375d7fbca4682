"""The formgrader's JupyterLab starts no kernel.

A kernel started there would run a notebook's code (a student's, opened from ``autograded/``) as the grader's
user, root where the grader runs as root, outside any sandbox; grading by hand needs none. So the server's
kernel manager (``--ServerApp.kernel_manager_class``, set by :mod:`autograder.formgrader.server`) is jupyter_server's
own with its one way to start a kernel refused: every route that would start one (``POST /api/kernels``,
``POST /api/sessions``, JupyterLab's launcher and "Open With > Notebook") answers ``403`` with the reason.
"""

from __future__ import annotations

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web

REFUSAL = ("the formgrader starts no kernel: a kernel here would run a notebook's code as the grader's user, "
           "outside the grader's sandbox (python -m autograder grade runs submissions in it)")


class NoKernels(AsyncMappingKernelManager):
    """jupyter_server's kernel manager, with :meth:`start_kernel` refused."""

    async def start_kernel(self, *, kernel_id=None, path=None, **kwargs) -> str:
        raise web.HTTPError(403, REFUSAL)
