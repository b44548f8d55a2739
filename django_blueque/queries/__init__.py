"""Read-only Redis queries behind the admin pages, the metrics and ``bq_status``.

Every page reads in a fixed number of round trips (at most four pipelines or script calls),
and only what it shows: counts are LLEN / ZCARD / SCARD, lists are windows read with their
tasks' fields by one script (long values cut to a preview), a task page reads its hash through
a script that cuts it to what the page shows. Nothing here scans the keyspace or reads a whole
list; what grows with stored data is bounded (see QUEUES_PER_PAGE, METRICS_QUEUES,
LISTENER_QUEUES, STARTED_READ).

Data someone else wrote may be of the wrong type: every read goes through ``Reader.read``,
which turns a failed reply into the empty value and notes the key in ``Reader.unreadable``,
so a page shows what it can and says what it could not read.

One Reader per request, its queries in modules by concern: base.py (the reads every query
makes), queue_readers.py (queues, the dashboard, the metrics, a queue's page, bulk jobs),
task_readers.py (a task's page, the listeners page), workflow_readers.py (a task's
dependencies, a workflow).
"""

from .base import MAX_NAME, PREVIEW_BYTES, ReaderBase
from .queue_readers import (
    METRICS_QUEUES,
    QUEUES_PER_PAGE,
    ROW_FIELDS,
    SEARCH_CALLS,
    STARTED_READ,
    QueueReaders,
)
from .task_readers import (
    FIELD_BYTES,
    HELD_FIELDS,
    LISTENER_QUEUES,
    MAX_HELD,
    MORE_FIELDS,
    TEXT_BYTES,
    TEXT_FIELDS,
    TaskReaders,
)
from .workflow_readers import MAX_EDGES, MAX_WORKFLOW, WorkflowReaders

__all__ = [
    "FIELD_BYTES", "HELD_FIELDS", "LISTENER_QUEUES", "MAX_EDGES", "MAX_HELD", "MAX_NAME",
    "MAX_WORKFLOW", "METRICS_QUEUES",
    "MORE_FIELDS", "PREVIEW_BYTES", "QUEUES_PER_PAGE", "ROW_FIELDS", "Reader", "ReaderBase",
    "SEARCH_CALLS", "STARTED_READ", "TEXT_BYTES", "TEXT_FIELDS",
]


class Reader(QueueReaders, TaskReaders, WorkflowReaders):
    """The queries for one request, on the configured client."""
