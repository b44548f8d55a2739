"""Signals a project can connect to. ``sender`` is the BluequeTask; ``task_id`` is always given.

``task_enqueued`` is sent in the enqueuing process; the others in the task's own process.
"""

from django.dispatch import Signal

task_enqueued = Signal()   # task_id, arguments
task_started = Signal()    # task_id, attempt
task_succeeded = Signal()  # task_id, result
task_failed = Signal()     # task_id, error, error_type
task_retried = Signal()    # task_id, error, attempt
