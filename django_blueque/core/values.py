"""Task-field values read and written the same way by the engine and the Django app: numbers
parsed leniently from what Redis holds (anyone may have written it), an exception as the
error fields of a task hash, an id as a log line, and take.lua's reply. Standard library only,
like the rest of the engine."""

import json
import math
import traceback
from collections.abc import Mapping
from typing import Any, TypedDict, overload


@overload
def parse_number(value: object, kind: type[int]) -> int | None: ...
@overload
def parse_number(value: object, kind: type[float] = ...) -> float | None: ...
def parse_number(value: Any, kind: type[int] | type[float] = float) -> int | float | None:
    """``kind(value)`` (int or float) of a stored string, or None when it does not parse. No
    bounds: ``float`` gives inf and nan as they are (see finite_number)."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


def finite_number(value: object) -> float | None:
    """A finite float from what Redis holds, else None (no inf, no nan)."""
    number = parse_number(value)
    return number if number is not None and math.isfinite(number) else None


def positive_seconds(value: object) -> float | None:
    """A positive finite number of seconds from a task field written by anyone, or None."""
    seconds = finite_number(value)
    return seconds if seconds is not None and seconds > 0 else None


def error_type(kind: type[BaseException]) -> str:
    """The ``error_type`` a task hash records for an exception class: its qualified name."""
    return f"{kind.__module__}.{kind.__qualname__}"


def error_fields(exc: BaseException) -> tuple[str, str, str]:
    """(message, qualified type, traceback) of an exception, as a task hash records a failure:
    ``error``, ``error_type`` and ``traceback``."""
    kind = type(exc)
    return str(exc) or kind.__name__, error_type(kind), "".join(traceback.format_exception(exc))


def error_code(exc: BaseException) -> str:
    """The ``code`` attribute of an exception (Django's ValidationError, an HTTP error...) as
    a string, or '' when it has none (an error history entry's ``code``)."""
    code = getattr(exc, "code", None)
    if code is None or isinstance(code, bool) or not isinstance(code, (str, int)):
        return ""
    return str(code)


class ErrorEntry(TypedDict):
    """One failed run of a task's error history, as finish.lua writes it."""

    type: str
    message: str
    code: str
    time: float | None
    node: str
    attempt: int | None
    traceback: str


def _entry(raw: Mapping[str, object]) -> ErrorEntry:
    def text(name: str) -> str:
        value = raw.get(name)
        return "" if value is None else str(value)

    return ErrorEntry(type=text("type"), message=text("message"), code=text("code"),
                      time=finite_number(raw.get("time")), node=text("node"),
                      attempt=parse_number(raw.get("attempt"), int), traceback=text("traceback"))


def parse_errors(fields: Mapping[str, str | None]) -> list[ErrorEntry]:
    """A task's error history from its hash: one entry per failed run, oldest first. A task
    failed before the history existed (or by blueque 1.0) reads as its one recorded error; a
    history someone else garbled reads as empty, and its odd values as text, never raising."""
    raw = fields.get("errors")
    if raw is None:
        message = fields.get("error") or fields.get("last_error")
        if message is None:
            return []
        return [_entry({"type": fields.get("error_type"), "message": message,
                        "time": fields.get("finished") or fields.get("updated"),
                        "node": fields.get("node"), "attempt": fields.get("attempts"),
                        "traceback": fields.get("traceback")})]
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(entries, list):
        return []
    return [_entry(entry) for entry in entries if isinstance(entry, dict)]


def printable(text: str) -> str:
    """An id or name from Redis as one log line: control characters escaped."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


Taken = tuple[str, str, "dict[str, str] | int | str", bool]
"""What a take found: see Protocol.take."""


def taken(found: str | None) -> Taken | None:
    """take.lua's reply (a JSON text) as Protocol.take returns it."""
    if found is None:
        return None
    task_id, outcome, reply, *more = json.loads(found)
    return task_id, outcome, reply, bool(more and more[0])
