"""Task-field values read and written the same way by the engine and the Django app: numbers
parsed leniently from what Redis holds (anyone may have written it), and an exception as the
error fields of a task hash. Standard library only, like the rest of the engine."""

import math
import traceback
from typing import Any, overload


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


def error_fields(exc: BaseException) -> tuple[str, str, str]:
    """(message, qualified type, traceback) of an exception, as a task hash records a failure:
    ``error``, ``error_type`` and ``traceback``."""
    kind = type(exc)
    qualified = f"{kind.__module__}.{kind.__qualname__}"
    return str(exc) or kind.__name__, qualified, "".join(traceback.format_exception(exc))
