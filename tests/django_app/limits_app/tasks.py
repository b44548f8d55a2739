"""Tasks that mark their own runs, for the limits' tests (test_admission.py): each appends
``{"id", "event": "start" or "end", "at"}`` to the Redis list MARKS, so that a test can tell
how many ran at once as the task processes saw it."""

import json
import time

from django_blueque import blueque_task, current_task
from django_blueque.conf import get_client

MARKS = "test_limits_marks"


def mark(event):
    line = json.dumps({"id": current_task().id, "event": event, "at": time.time()})
    get_client().redis.rpush(MARKS, line)


def marked_run(seconds):
    mark("start")
    time.sleep(seconds)
    mark("end")


@blueque_task(queue="limits.encode")
def encode(seconds=0.3):
    """A queue given MAX_RUNNING in the test's settings."""
    marked_run(seconds)


@blueque_task(queue="limits.import")
def import_rows(seconds=0.3):
    """A queue given MAX_RUNNING_PER_KEY; enqueued with a concurrency key."""
    marked_run(seconds)
