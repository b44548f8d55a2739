"""The Blueque engine: Redis queues for very long tasks, wire-compatible with blueque 1.0.

No Django in here: redis-py and the standard library only. Its ``Client`` and
``ForkingRunner`` are blueque 1.0's API.
"""

from .client import Client, Listener, Processor, Queue
from .context import RunningTask, StopRequested, current_task
from .keys import COMPLETE, FAILED, PENDING, RESERVED, SCHEDULED, STARTED, STATUSES, Keys
from .maintenance import Action, enqueue_due_tasks, reap
from .runner import ForkingRunner
from .task import Task
from .timings import Timings

__all__ = [
    "Action", "Client", "COMPLETE", "FAILED", "ForkingRunner", "Keys", "Listener", "PENDING",
    "Processor", "Queue", "RESERVED", "RunningTask", "SCHEDULED", "STARTED", "STATUSES",
    "StopRequested", "Task", "Timings", "current_task", "enqueue_due_tasks", "reap",
]
