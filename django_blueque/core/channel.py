"""The hand-over: how a listener gives a task to the process it forked for it, and how the
process says its task has ended.

Before the fork, the listener makes a socket pair. Once the take has recorded the process's
pid, the listener writes one JSON line: the queue, the reservation's token, the task's id and
fields, and the listener's monotonic time when it sent the take. Closing its end with nothing
written tells the process it has nothing to run. The process records its task's end itself,
then writes one byte back (``TASK_ENDED``) just before it exits: the listener frees its slot
at once, without waiting for ``waitpid`` (an exit takes about 2 ms here, as the kernel first
tears down the process's memory), and learns how the process exited from ``waitpid`` as ever.
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


TASK_ENDED = b"e"


def read_line(fd: int) -> bytes:
    """The line written on ``fd`` (b'': the listener closed it, nothing to run)."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def write_line(fd: int, line: bytes) -> bool:
    """Write the hand-over; False if the process is gone."""
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        return True
    except OSError:
        return False
