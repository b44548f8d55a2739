"""Checkpoints: the JSON state a run saves so that a later run of the same task (a retry after
a crash, a timeout, a kill, a lost node) resumes from it instead of starting over. Stored in
the task hash's ``checkpoint`` field by checkpoint.lua, guarded by the run's lease token."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from .outages import Outage, is_transient

if TYPE_CHECKING:
    from .protocol_runs import RunOperations

logger = logging.getLogger("django_blueque.task")

MAX_CHECKPOINT_BYTES = 1024 * 1024
"""The largest checkpoint, encoded: a checkpoint is read and written whole with its task
hash; larger state belongs elsewhere (a file, an object store), with its name checkpointed."""


class CheckpointError(ValueError):
    """A task's ``checkpoint`` field holds something no checkpoint() wrote (not JSON)."""


def encode_checkpoint(state: Any) -> str:
    """``state`` as JSON, or TypeError / ValueError saying why it cannot be a checkpoint."""
    try:
        encoded = json.dumps(state, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"a checkpoint must be JSON: {exc}") from None
    size = len(encoded.encode())
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"a checkpoint of {size} bytes is over the limit of "
                         f"{MAX_CHECKPOINT_BYTES} bytes: checkpoint where the state is kept "
                         f"(a file name, an object key) rather than the state itself")
    return encoded


def decode_checkpoint(task_id: str | None, raw: str | None) -> Any:
    """The state a ``checkpoint`` field holds (None without one); CheckpointError if it is not
    JSON (written by something else than checkpoint())."""
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"task {task_id}: its checkpoint field holds no JSON ({exc}): "
                              f"{raw[:80]!r}") from None


def save_checkpoint(runs: RunOperations, task_id: str, token: str, encoded: str,
                    should_stop: Callable[[], bool]) -> bool:
    """Store a run's checkpoint, waiting while Redis is away (a checkpoint is the work done: it
    is not dropped as a progress report may be). True if stored, False if the run no longer
    holds its lease ``token`` (a newer run's checkpoint is never overwritten), or gave up
    waiting because ``should_stop()`` turned true meanwhile (its lease could not be renewed
    for a while: the reaper may give the task to another run, whose checkpoint is the one to
    keep). Never a Redis outage's error: the task's code is told to stop, not failed."""
    outage = Outage(logger, f"task {task_id}: saving a checkpoint")
    while True:
        try:
            stored = runs.save_checkpoint(task_id, token, encoded)
        except redis.RedisError as exc:
            if not is_transient(exc):
                raise
            if should_stop():
                logger.warning("task %s: checkpoint not saved: Redis did not answer before the "
                               "run was told to stop", task_id)
                return False
            time.sleep(outage.failed(exc))
        else:
            outage.recovered()
            return stored
