"""Task-field values read and written the same way by the engine and the Django app: numbers
parsed leniently from what Redis holds (anyone may have written it), and an exception as the
error fields of a task hash. Standard library only, like the rest of the engine."""

import json
import math
import traceback

from .keys import ERROR_FIELDS


def parse_number(value, kind=float):
    """``kind(value)`` (int or float) of a stored string, or None when it does not parse. No
    bounds: ``float`` gives inf and nan as they are (see finite_number)."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


def finite_number(value):
    """A finite float from what Redis holds, else None (no inf, no nan)."""
    number = parse_number(value)
    return number if number is not None and math.isfinite(number) else None


def positive_seconds(value):
    """A positive finite number of seconds from a task field written by anyone, or None."""
    seconds = finite_number(value)
    return seconds if seconds is not None and seconds > 0 else None


def error_fields(exc):
    """(message, qualified type, traceback) of an exception, as a task hash records a failure:
    ``error``, ``error_type`` and ``traceback``."""
    kind = type(exc)
    qualified = f"{kind.__module__}.{kind.__qualname__}"
    return str(exc) or kind.__name__, qualified, "".join(traceback.format_exception(exc))


def error_code(exc):
    """The ``code`` attribute of an exception (Django's ValidationError, an HTTP error...) as
    a string, or '' when it has none (an error history entry's ``code``)."""
    code = getattr(exc, "code", None)
    if code is None or isinstance(code, bool) or not isinstance(code, (str, int)):
        return ""
    return str(code)


def parse_errors(fields):
    """A task's error history from its hash: one dict per failed run (ERROR_FIELDS), oldest
    first. A task failed before the history existed (or by blueque 1.0) reads as its one
    recorded error; a history someone else garbled reads as empty rather than raising."""
    raw = fields.get("errors")
    if raw is None:
        message = fields.get("error") or fields.get("last_error")
        if message is None:
            return []
        return [{"type": fields.get("error_type") or "", "message": message, "code": "",
                 "time": finite_number(fields.get("finished") or fields.get("updated")),
                 "node": fields.get("node") or "", "attempt": parse_number(
                     fields.get("attempts"), int), "traceback": fields.get("traceback") or ""}]
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(entries, list):
        return []
    return [{name: entry.get(name) for name in ERROR_FIELDS}
            for entry in entries if isinstance(entry, dict)]
