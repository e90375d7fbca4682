"""Stand-ins for the parts of nbgrader's package that a grading stage never runs.

``import nbgrader`` imports its four Jupyter server extensions (the assignment list, the course list, the
validator and the formgrader), and with them jupyter_server, nbgrader's applications and its exchange: about
0.1 s of every stage's start, for servers that the stage does not start. The stage grades with nbgrader's
converters and gradebook only, which import none of them. So before anything imports nbgrader, each extension's
module is replaced by a stand-in whose one function, the one ``nbgrader/__init__.py`` takes from it, refuses to
load it.
"""

from __future__ import annotations

import sys
import types

SERVER_EXTENSIONS = ("assignment_list", "course_list", "validate_assignment", "formgrader")


class ServerExtensionStandIn(RuntimeError):
    """A stage was asked to load one of nbgrader's server extensions, which it replaced."""


def stand_in_for_nbgrader_server_extensions() -> None:
    """Each of :data:`SERVER_EXTENSIONS` as a module that refuses to load (in this process only; call it before
    nbgrader is imported, or it changes nothing)."""
    for name in SERVER_EXTENSIONS:
        module = types.ModuleType(
            f"nbgrader.server_extensions.{name}", f"a stand-in for nbgrader's {name} extension"
        )

        def load_jupyter_server_extension(app, name=name):
            raise ServerExtensionStandIn(
                f"nbgrader's {name} server extension is not loaded in a grading stage"
            )

        module.load_jupyter_server_extension = load_jupyter_server_extension
        sys.modules.setdefault(module.__name__, module)
