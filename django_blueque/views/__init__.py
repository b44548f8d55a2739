"""The Blueque admin pages: thin views over the read-only queries (the queries package) and
the actions (actions.py), rendered inside the Django admin's look.

Staff only: anonymous users are sent to the admin login, users without the permission get a
403. GET never changes anything; every action is a POST (CSRF-protected) that first renders a
confirmation page and acts only once confirmed. A malformed or unknown name is a 404.
"""

from .actions import (
    bulk_job,
    bulk_start,
    bulk_step,
    bulk_stop,
    requeue_listener,
    task_action,
)
from .metrics import metrics, metrics_json
from .pages import dashboard, find, listeners, queue, task, task_progress

__all__ = ["bulk_job", "bulk_start", "bulk_step", "bulk_stop", "dashboard", "find", "listeners",
           "metrics", "metrics_json", "queue", "requeue_listener", "task", "task_action",
           "task_progress"]
