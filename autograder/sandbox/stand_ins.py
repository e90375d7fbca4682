"""What a grading stage changes of nbgrader's package, for speed, without changing what nbgrader does.

- **Its server extensions, replaced.** ``import nbgrader`` imports its four Jupyter server extensions (the
  assignment list, the course list, the validator and the formgrader), and with them jupyter_server, nbgrader's
  applications and its exchange: about 0.1 s of every stage's start, for servers that the stage does not start.
  The stage grades with nbgrader's converters and gradebook only, which import none of them. So before anything
  imports nbgrader, each extension's module is replaced by a stand-in whose one function, the one
  ``nbgrader/__init__.py`` takes from it, refuses to load it (:func:`stand_in_for_nbgrader_server_extensions`).
- **Its schema, checked once.** nbgrader validates each cell's metadata with ``jsonschema.validate``, which
  first checks the schema itself against its meta-schema, at every call: about 0.05 s of each notebook nbgrader
  reads, twice a submission. :func:`check_nbgrader_schemas_once` gives nbgrader's module a ``validate`` that does
  the same validation and raises the same errors, with each schema checked once per process
  (:class:`SchemaCheckedOnce`).
"""

from __future__ import annotations

import json
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


class SchemaCheckedOnce:
    """``jsonschema``'s ``validate``, as nbgrader's metadata validator calls it, with each schema (by its JSON
    text) checked against its meta-schema the first time only; the validation and its errors are
    ``jsonschema.validate``'s: ``SchemaError`` for a schema that is not one, the best match of the instance's
    errors as ``ValidationError``."""

    def __init__(self) -> None:
        self.validators: dict[str, object] = {}

    def validate(self, instance, schema) -> None:
        import jsonschema

        key = json.dumps(schema, sort_keys=True)
        validator = self.validators.get(key)
        if validator is None:
            kind = jsonschema.validators.validator_for(schema)
            kind.check_schema(schema)
            validator = self.validators[key] = kind(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error


def check_nbgrader_schemas_once() -> None:
    """nbgrader's metadata validator, in this process, with :class:`SchemaCheckedOnce` in place of the
    ``jsonschema`` module it calls (the one name it takes from it)."""
    from nbgrader.nbgraderformat import common

    if not isinstance(common.jsonschema, SchemaCheckedOnce):
        common.jsonschema = SchemaCheckedOnce()
