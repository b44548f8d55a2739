"""Waiting in tests for something real processes do: poll, and fail with a clear message."""

import time


def wait_for(predicate, timeout=20.0, message="condition", interval=0.05):
    """Poll predicate() until it returns something truthy, and return that; after ``timeout``
    seconds fail with ``message`` (a string, or a callable giving one, e.g. a process's log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout} s waiting for {detail}")
        time.sleep(interval)
