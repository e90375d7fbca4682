"""What the stage changes of nbgrader (autograder.sandbox.stand_ins): what the stage imports
from nbgrader still works, the servers' packages are no longer imported, and the stand-ins refuse to load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autograder import REPOSITORY

SERVER_PACKAGES = ("jupyter_server", "nbgrader.apps", "nbgrader.exchange")


def _fresh_interpreter(code: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPOSITORY, timeout=120, check=True
    )
    return json.loads(completed.stdout.splitlines()[-1])


def test_without_the_stand_ins_nbgrader_imports_its_servers():
    # The premise: the cost the stand-ins remove is there without them.
    loaded = _fresh_interpreter(
        "import json, sys\n"
        "import nbgrader.converters\n"
        f"print(json.dumps([name for name in {SERVER_PACKAGES!r} if name in sys.modules]))\n"
    )
    assert set(loaded) == set(SERVER_PACKAGES)


def test_with_the_stand_ins_the_stage_imports_what_it_grades_with_and_no_server():
    result = _fresh_interpreter(
        "import json, sys\n"
        "from autograder.sandbox.stand_ins import ServerExtensionStandIn, stand_in_for_nbgrader_server_extensions\n"
        "stand_in_for_nbgrader_server_extensions()\n"
        "import nbgrader\n"
        "from nbgrader.converters import Autograde, GenerateFeedback\n"
        "from nbgrader.api import Gradebook\n"
        "from nbgrader.coursedir import CourseDirectory\n"
        "from nbgrader.preprocessors import Execute\n"
        "import autograder.sandbox.grading_stage\n"
        "from autograder.feedback.template import exporter_config\n"
        "refused = []\n"
        "for name in ('load_assignments', 'load_courses', 'load_validate', 'load_formgrader'):\n"
        "    try:\n"
        "        getattr(nbgrader, name)(None)\n"
        "    except ServerExtensionStandIn as error:\n"
        "        refused.append(str(error))\n"
        f"loaded = [name for name in {SERVER_PACKAGES!r} if name in sys.modules]\n"
        "print(json.dumps({'loaded': loaded, 'refused': refused,\n"
        "                  'templates': exporter_config()['extra_template_basedirs'][1]}))\n"
    )
    assert result["loaded"] == []
    assert len(result["refused"]) == 4
    assert all("not loaded in a grading stage" in reason for reason in result["refused"])
    # The feedback template's folder is found by path, inside the real package, not the stand-in.
    assert result["templates"].endswith("server_extensions/formgrader/templates")


def test_the_stage_entry_installs_the_stand_ins_before_it_imports_the_stage():
    entry = (REPOSITORY / "autograder" / "sandbox" / "__main__.py").read_text()
    assert entry.index("stand_in_for_nbgrader_server_extensions()") < entry.index("from autograder.sandbox.stage import")


# ------------------------------------------------------------------------------- nbgrader's schema, checked once


def _v3_schema() -> dict:
    from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

    return MetadataValidatorV3().schema


GOOD = {"grade": True, "solution": False, "locked": True, "points": 2, "grade_id": "t1", "schema_version": 3}
BAD = [
    {**GOOD, "points": "2"},
    {**GOOD, "grade": "yes"},
    {**GOOD, "schema_version": "3"},
    {**GOOD, "unknown": 1},
]


def test_the_once_checked_validate_accepts_and_refuses_as_jsonschema_does():
    import jsonschema

    from autograder.sandbox.stand_ins import SchemaCheckedOnce

    schema, once = _v3_schema(), SchemaCheckedOnce()
    assert jsonschema.validate(GOOD, schema) is None and once.validate(GOOD, schema) is None
    for metadata in BAD:
        with pytest.raises(jsonschema.ValidationError) as theirs:
            jsonschema.validate(metadata, schema)
        with pytest.raises(jsonschema.ValidationError) as ours:
            once.validate(metadata, schema)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(jsonschema.SchemaError):
        once.validate(GOOD, {"type": "no such type"})


def test_each_schema_is_checked_once(monkeypatch):
    import jsonschema

    from autograder.sandbox.stand_ins import SchemaCheckedOnce

    schema = _v3_schema()
    kind = jsonschema.validators.validator_for(schema)
    checked = []
    real = kind.check_schema
    monkeypatch.setattr(kind, "check_schema", classmethod(lambda cls, s: checked.append(1) or real(s)))
    once = SchemaCheckedOnce()
    for _ in range(5):
        once.validate(GOOD, schema)
        once.validate(GOOD, json.loads(json.dumps(schema)))  # an equal schema, another object
    assert len(checked) == 1


def test_nbgrader_refuses_bad_metadata_with_its_schema_checked_once():
    result = _fresh_interpreter(
        "import json\n"
        "from autograder.sandbox.stand_ins import check_nbgrader_schemas_once, stand_in_for_nbgrader_server_extensions\n"
        "stand_in_for_nbgrader_server_extensions()\n"
        "check_nbgrader_schemas_once()\n"
        "import nbformat\n"
        "from nbgrader.nbgraderformat import ValidationError, common\n"
        "from nbgrader.nbgraderformat.v3 import MetadataValidatorV3\n"
        "cell = nbformat.v4.new_code_cell('x = 1', metadata={'nbgrader': {'grade': 'yes', 'solution': False,\n"
        "    'locked': True, 'points': 1, 'grade_id': 'a', 'schema_version': 3}})\n"
        "try:\n"
        "    MetadataValidatorV3().validate_cell(cell)\n"
        "    refused = None\n"
        "except Exception as error:\n"
        "    refused = type(error).__name__\n"
        "print(json.dumps({'refused': refused, 'stand_in': type(common.jsonschema).__name__}))\n"
    )
    assert result == {"refused": "ValidationError", "stand_in": "SchemaCheckedOnce"}
