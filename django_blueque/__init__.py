"""django_blueque: very long tasks for Django on Redis, speaking the Blueque protocol.

The public surface::

    from django_blueque import (blueque_task, cancel, chain, current_task, get_result,
                                group, RedisUnavailable, StopRequested, TaskTimeout,
                                workflow_task_ids)

They are imported on first use, so ``django_blueque.core`` (the engine) loads without Django.
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["RedisUnavailable", "StopRequested", "TaskTimeout", "blueque_task", "cancel",
           "chain", "current_task", "get_result", "group", "workflow_task_ids"]

if TYPE_CHECKING:  # imported on first use (__getattr__); named here for type checkers
    from .core import StopRequested, current_task
    from .registry import blueque_task
    from .results import TaskTimeout, get_result
    from .unreachable import RedisUnavailable
    from .workflows import chain, group, workflow_task_ids


def cancel(task_id: str) -> str | None:
    """Cancel a task from any process: 'cancelled' (it was waiting: it fails at once),
    'requested' (it is running: its listener stops it within seconds), the status of a task
    already finished, or None for an unknown task."""
    from .conf import get_client, get_settings
    from .results import get_result
    from .unreachable import reaching_redis

    if get_settings().eager:  # eager tasks ran at enqueue: there is nothing left to stop
        return get_result(task_id).status
    with reaching_redis():
        return get_client().cancel(task_id)


def __getattr__(name: str) -> object:
    if name == "blueque_task":
        from .registry import blueque_task

        return blueque_task
    if name == "get_result":
        from .results import get_result

        return get_result
    if name == "RedisUnavailable":
        from .unreachable import RedisUnavailable

        return RedisUnavailable
    if name == "TaskTimeout":
        from .results import TaskTimeout

        return TaskTimeout
    if name in ("chain", "group", "workflow_task_ids"):
        from . import workflows

        return getattr(workflows, name)
    if name in ("current_task", "StopRequested"):
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module 'django_blueque' has no attribute {name!r}")
