"""The failover tests' task: it appends a line to the file FAILOVER_RUNS names when it begins
and when it ends, so that the tests count the runs of each task (and which ran to the end)."""

import os
import time

from django_blueque import blueque_task, current_task


def _record(number, event):
    with open(os.environ["FAILOVER_RUNS"], "a") as runs:
        runs.write(f"{number} {event} {current_task().id} {os.getpid()}\n")


@blueque_task(queue="failover.work")
def work(number, seconds=0.2):
    _record(number, "begin")
    time.sleep(seconds)
    _record(number, "end")
    return number
