"""The hand-over: how a listener gives a task to the process it forked for it.

The listener forks the process first (the take records its pid), then takes the task, then
writes one JSON line on a pipe made before the fork: the queue, the reservation's token, the
task's id and fields, and the listener's monotonic time when it sent the take. Closing the
pipe with nothing written tells the process it has nothing to run. Nothing else goes through
the pipe: the process records its task's end itself, and the listener learns that it ended
from ``waitpid``.
"""

from __future__ import annotations

import json
import os
from typing import Any


def task_line(queue: str, token: str, task_id: str, fields: dict[str, Any],
              taken_at: float) -> bytes:
    """The line a listener writes to hand a task over; ``handed_task`` reads it."""
    return json.dumps({"queue": queue, "token": token, "id": task_id, "fields": fields,
                       "taken_at": taken_at}).encode() + b"\n"


def handed_task(line: bytes) -> tuple[str, str, str, dict[str, Any], float]:
    """The queue, token, task id, fields and take time of a ``task_line``."""
    handed = json.loads(line)
    return (handed["queue"], handed["token"], handed["id"], handed["fields"],
            float(handed["taken_at"]))


def read_line(fd: int) -> bytes:
    """Everything written on the pipe ``fd`` until its writer closed it (b'': nothing to
    run); closes ``fd``."""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def write_line(fd: int, line: bytes) -> bool:
    """Write the hand-over and close the pipe; False if the process is gone."""
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
