"""What crosses back from the grading stage, checked before the grader uses any of it.

The stage (:mod:`autograder.sandbox.stage`) handled the student's bytes; its answer is one JSON document of
bounded size (the stage's standard output is cut at :data:`autograder.sandbox.stage.MAX_RESPONSE_BYTES`).
:func:`read_answer` accepts it only as this exact shape, every value typed and bounded:

- ``items``: one per graded cell of the released notebook, in its order, with the release's grade_id and
  points; a score between 0 and the points; a status from :data:`STATUSES`; a message of at most
  :data:`MAX_MESSAGE` characters;
- ``notes``: at most :data:`MAX_NOTES` texts of at most :data:`MAX_NOTE` characters;
- ``reason``: why nothing could be graded, or null; ``failure``: a failure of the grader's own code;
- ``feedback``: the page nbconvert rendered from the cleaned notebook, at most :data:`MAX_PAGE` characters:
  the worker puts the Content-Security-Policy in front of it and the grader's notes after its ``<body>``;
- ``autograded``: the cleaned notebook, a valid nbformat 4 notebook whose outputs hold only
  :data:`OUTPUT_TYPES` with typed metadata (:func:`check_autograded`);
- ``log``: text for the instructor's log file (nbgrader's log), and ``kernel_log``: the end of what the kernel
  wrote, each at most :data:`MAX_LOG` characters; the worker escapes and marks every line of both
  (:mod:`autograder.pipeline`);
- ``marks``: the moments the stage marked, names from :data:`autograder.sandbox.phases.STAGE_MARKS` and finite
  numbers (:func:`autograder.sandbox.phases.checked_stage_marks`), used for the bench's profile only.

Anything else (another key, a wrong type, a number out of range, a grade_id the release does not have) makes
the whole answer a failure of the grader for that submission: never kept as a grade
(:mod:`autograder.records`), always graded again.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from autograder.sandbox.phases import checked_stage_marks
from autograder.types import Item, LayoutItem

STATUSES = frozenset({"passed", "failed", "manual"})
MAX_MESSAGE = 700
MAX_NOTES = 200
MAX_NOTE = 2000
MAX_REASON = 2000
MAX_PAGE = 48 * 1024 * 1024
MAX_NOTEBOOK = 40 * 1024 * 1024
MAX_LOG = 512 * 1024
KEYS = frozenset(
    {"items", "notes", "reason", "failure", "feedback", "autograded", "log", "kernel_log", "kernel_failed", "marks"}
)
OUTPUT_TYPES = frozenset({"text/plain", "text/html", "image/png", "image/jpeg"})
IMAGE_METADATA = frozenset({"width", "height"})
# What the stage's rebuild keeps of a cell's metadata (autograder/feedback/outputs.py): nbgrader's, and the number
# of a graded cell's item ({"autograder": {"item": "4.2"}}, a short string).
CELL_METADATA = frozenset({"nbgrader", "autograder"})
MAX_ITEM_LABEL = 40
# nbgrader's fields that the stage's rebuild keeps (autograder.feedback.outputs.rebuilt_cell_metadata), of these
# types, a text only as a plain id (NBGRADER_TEXT): nbgrader's formgrade template writes grade_id unescaped.
NBGRADER_METADATA = {
    "grade": bool, "solution": bool, "locked": bool, "task": bool, "grade_id": str, "cell_type": str,
    "checksum": str, "points": (int, float), "score": (int, float), "schema_version": int,
}  # fmt: skip
NBGRADER_TEXT = re.compile(r"[A-Za-z0-9_.-]{1,100}")  # grade ids, a checksum's hex digits, a cell type


class AnswerError(ValueError):
    """The stage's answer is not of the shape :func:`read_answer` accepts."""


@dataclass
class Answer:
    items: list[Item] | None
    notes: list[str] = field(default_factory=list)
    reason: str | None = None
    failure: str | None = None
    feedback: str | None = None
    autograded: str | None = None
    log: str = ""
    kernel_log: str = ""
    kernel_failed: bool = False
    marks: dict[str, float] = field(default_factory=dict)  # moments of the stage (autograder.sandbox.phases)


def _text(value: object, limit: int, what: str) -> str:
    if not isinstance(value, str):
        raise AnswerError(f"{what} is {type(value).__name__}, not text")
    if len(value) > limit:
        raise AnswerError(f"{what} has {len(value)} characters; at most {limit} are accepted")
    return value


def _optional_text(value: object, limit: int, what: str) -> str | None:
    return None if value is None else _text(value, limit, what)


def _items(value: object, layout: tuple[LayoutItem, ...]) -> list[Item]:
    if not isinstance(value, list) or len(value) != len(layout):
        raise AnswerError(f"items must be a list of {len(layout)} items, one per graded cell")
    items = []
    for raw, expected in zip(value, layout, strict=True):
        if not isinstance(raw, dict) or set(raw) != {"grade_id", "score", "max_score", "status", "message"}:
            raise AnswerError(f"item {expected.grade_id!r} is not of the form of an item")
        score = raw["score"]
        if raw["grade_id"] != expected.grade_id or raw["max_score"] != expected.points:
            raise AnswerError(f"item {expected.grade_id!r} names another cell or other points")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise AnswerError(f"the score of {expected.grade_id!r} is not a number")
        if not 0 <= score <= expected.points:
            raise AnswerError(f"the score of {expected.grade_id!r} is {score}, outside 0..{expected.points}")
        if raw["status"] not in STATUSES:
            raise AnswerError(f"the status of {expected.grade_id!r} is not one of {sorted(STATUSES)}")
        message = _text(raw["message"], MAX_MESSAGE, f"the message of {expected.grade_id!r}")
        items.append(Item(expected.grade_id, float(score), expected.points, raw["status"], message))
    return items


def read_answer(data: bytes, layout: tuple[LayoutItem, ...]) -> Answer:
    """The stage's answer ``data`` (JSON), checked against the release's ``layout``.

    Raises:
        AnswerError: ``data`` is not JSON of exactly the shape of the module docstring.
    """
    try:
        value = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise AnswerError(f"the answer is not JSON ({type(error).__name__})") from error
    if not isinstance(value, dict) or not set(value) <= KEYS:
        raise AnswerError(f"the answer must be an object with keys among {sorted(KEYS)}")
    notes = value.get("notes", [])
    if not isinstance(notes, list) or len(notes) > MAX_NOTES:
        raise AnswerError(f"notes must be a list of at most {MAX_NOTES} texts")
    answer = Answer(
        items=None,
        notes=[_text(note, MAX_NOTE, "a note") for note in notes],
        reason=_optional_text(value.get("reason"), MAX_REASON, "the reason"),
        failure=_optional_text(value.get("failure"), MAX_REASON, "the failure"),
        feedback=_optional_text(value.get("feedback"), MAX_PAGE, "the feedback page"),
        autograded=_optional_text(value.get("autograded"), MAX_NOTEBOOK, "the autograded notebook"),
        log=_text(value.get("log", ""), MAX_LOG, "the log"),
        kernel_log=_text(value.get("kernel_log", ""), MAX_LOG, "the kernel's log"),
        kernel_failed=value.get("kernel_failed", False) is True,
    )
    try:
        answer.marks = checked_stage_marks(value.get("marks", {}))
    except ValueError as error:
        raise AnswerError(str(error)) from error
    if answer.failure is None and answer.reason is None:
        answer.items = _items(value.get("items"), layout)
        if answer.feedback is None or answer.autograded is None:
            raise AnswerError("a graded answer must hold the feedback page and the autograded notebook")
        check_autograded(answer.autograded)
    return answer


def check_autograded(text: str) -> None:
    """Raise :class:`AnswerError` unless ``text`` is a valid nbformat 4 notebook whose code outputs hold only
    :data:`OUTPUT_TYPES` as text, image metadata only as positive integer width and height, and no cell or
    output metadata beyond nbgrader's fields of their types and a graded cell's item number. What its HTML says
    is not checked here: the renderers outside the stage clean it again
    (:func:`autograder.feedback.outputs.cleaned_again`)."""
    import nbformat

    try:
        notebook = nbformat.reads(text, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:
        raise AnswerError(f"the autograded notebook is not a valid notebook ({type(error).__name__})") from error
    for cell in notebook.cells:
        metadata = cell.get("metadata", {})
        if not set(metadata) <= CELL_METADATA:
            raise AnswerError(f"a cell of the autograded notebook has metadata outside the allowlist: {sorted(metadata)[:10]}")
        if "nbgrader" in metadata and not _is_nbgrader_metadata(metadata["nbgrader"]):
            raise AnswerError("a cell of the autograded notebook has nbgrader metadata outside the allowlist")
        if "autograder" in metadata and not _is_item_label(metadata["autograder"]):
            raise AnswerError("a cell of the autograded notebook names its item otherwise than as a short text")
        for output in cell.get("outputs", []):
            _check_output(output)


def _is_nbgrader_metadata(value: object) -> bool:
    """Whether ``value`` holds only nbgrader's fields that the stage's rebuild keeps, each of its type
    (:data:`NBGRADER_METADATA`), a text a plain id (:data:`NBGRADER_TEXT`)."""
    if not isinstance(value, dict) or not set(value) <= set(NBGRADER_METADATA):
        return False
    for key, field_value in value.items():
        kind = NBGRADER_METADATA[key]
        if isinstance(field_value, bool) != (kind is bool) or not isinstance(field_value, kind):
            return False
        if isinstance(field_value, float) and not math.isfinite(field_value):
            return False
        if isinstance(field_value, str) and not NBGRADER_TEXT.fullmatch(field_value):
            return False
    return True


def _is_item_label(value: object) -> bool:
    """Whether ``value`` is ``{"item": text}``, the text at most :data:`MAX_ITEM_LABEL` characters."""
    return (
        isinstance(value, dict) and set(value) == {"item"}
        and isinstance(value["item"], str) and 0 < len(value["item"]) <= MAX_ITEM_LABEL
    )  # fmt: skip


def _check_output(output: dict) -> None:
    if output.get("output_type") not in ("display_data", "execute_result"):
        return  # streams and errors are text only, which nbformat's schema already checked
    data, metadata = output.get("data", {}), output.get("metadata", {})
    if not set(data) <= OUTPUT_TYPES or not all(isinstance(value, str) for value in data.values()):
        raise AnswerError(f"an output holds types outside the allowlist: {sorted(data)[:10]}")
    for kind, values in metadata.items():
        if kind not in ("image/png", "image/jpeg") or not isinstance(values, dict):
            raise AnswerError(f"an output holds metadata outside the allowlist: {kind!r}")
        for key, number in values.items():
            if key not in IMAGE_METADATA or isinstance(number, bool) or not isinstance(number, int) or number <= 0:
                raise AnswerError(f"an image's metadata {key!r} is not a positive integer width or height")
