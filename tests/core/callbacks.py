"""The task callback the test runner (runner_script.py) runs in its forked task processes.

What a task does is chosen by its parameters, a JSON object; anything else just echoes. Keys,
applied in this order:

    "ignore_sigterm": true       ignore SIGTERM (so only SIGKILL stops the process)
    "concurrency": KEY           INCR KEY while running (RPUSH KEY:seen the value), DECR at the end
    "progress": [PERCENT, MSG]   report progress through current_task()
    "kill_on_attempt": N         SIGKILL itself on attempt N
    "sleep": SECONDS             sleep
    "wait_for": KEY              wait until KEY exists in Redis (at most two minutes)
    "until_stopped": KEY         loop until current_task().should_stop(), then RPUSH KEY "stopped"
    "mark": KEY                  RPUSH KEY "done" after the waits (shows the code ran to the end)
    "collect_garbage": KEY       run a full garbage collection; RPUSH KEY the KiB of memory it
                                 made this process copy from its listener (Private_Dirty growth)
    "raise": MESSAGE             raise ValueError(MESSAGE)
    "fail_before": N             raise CodedError (code "E<attempt>") on the attempts before N
    "return": VALUE              return VALUE (any JSON value)
    "return_object": true        return object() (which JSON cannot encode)
    "random": true               return random.random() (as its repr)

Every run is recorded first: RPUSH RUNS_KEY {"id", "pid", "attempt"}.
"""

import gc
import json
import os
import random
import signal
import time

import redis
from redis.cluster import RedisCluster

from django_blueque.core import current_task

RUNS_KEY = "core_test_runs"
URL = None  # set by runner_script.py before the runner starts; the forked children inherit it
CLUSTER = False  # the same: URL names a node of a Redis Cluster


class CodedError(Exception):
    """An exception with a ``code`` attribute, as Django's ValidationError has."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def directives(parameters):
    try:
        value = json.loads(parameters)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _wait_until(predicate, timeout=120.0):
    """Poll until predicate() is true; a Redis outage (a test restarting it) counts as false."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except redis.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.05)


def callback(task):
    todo = directives(task.parameters)
    conn = (RedisCluster if CLUSTER else redis.Redis).from_url(URL, decode_responses=True)
    running = current_task()
    conn.rpush(RUNS_KEY, json.dumps({"id": task.id, "pid": os.getpid(),
                                     "attempt": running.attempt}))
    if todo.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    counter = todo.get("concurrency")
    if counter:
        conn.rpush(f"{counter}:seen", conn.incr(counter))
    try:
        if "progress" in todo:
            running.report_progress(*todo["progress"])
        if todo.get("kill_on_attempt") == running.attempt:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(todo.get("sleep", 0)))
        if "wait_for" in todo:
            _wait_until(lambda: conn.exists(todo["wait_for"]))
        if "until_stopped" in todo:
            _wait_until(running.should_stop)
            conn.rpush(todo["until_stopped"], "stopped")
        if "mark" in todo:
            conn.rpush(todo["mark"], "done")
        if "collect_garbage" in todo:
            before = _private_dirty_kib()
            gc.collect()
            conn.rpush(todo["collect_garbage"], _private_dirty_kib() - before)
    finally:
        if counter:
            conn.decr(counter)
    if "raise" in todo:
        raise ValueError(todo["raise"])
    if running.attempt < todo.get("fail_before", 0):
        raise CodedError(f"attempt {running.attempt} failed", code=f"E{running.attempt}")
    if todo.get("return_object"):
        return object()
    if todo.get("random"):
        return repr(random.random())
    if "return" in todo:
        return todo["return"]
    return f"done:{task.parameters}"


def _private_dirty_kib():
    with open("/proc/self/smaps_rollup") as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Private_Dirty:"))


def slow_end(task, outcome, value, error_type):
    """An on_task_end (a signal receiver, say) that takes longer than a lease renewal."""
    time.sleep(12)
    redis.Redis.from_url(URL).rpush("ended", f"{task.id} {outcome}")
