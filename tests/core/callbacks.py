"""The task callback the test runner (runner_script.py) runs in its forked task processes.

What a task does is chosen by its parameters, a JSON object; anything else just echoes. Keys,
applied in this order:

    "marks": KEY                 RPUSH KEY {"id", "attempt", "event": "start", "at"} first and
                                 the same with "event": "end" after the waits (each tried again
                                 while Redis is away): the run's own interval, as it saw it
    "ignore_sigterm": true       ignore SIGTERM (so only SIGKILL stops the process)
    "concurrency": KEY           INCR KEY while running (RPUSH KEY:seen the value), DECR at the end
    "progress": [PERCENT, MSG]   report progress through current_task()
    "progress_every": [N, S]     report progress N times (i of N done), every S seconds, and
                                 ask should_stop() each time, without any Redis call of its own
    "kill_on_attempt": N         SIGKILL itself on attempt N
    "steps": [N, K]              steps 1..N from the step after its checkpoint's (RPUSH
                                 "<id>:began" that step, "<id>:steps" each), checkpoint
                                 {"step": i} after each; SIGKILL itself after checkpointing
                                 step K on attempt 1; "step_sleep": S sleeps S seconds
                                 before each step (its marks wait while Redis is away)
    "read_checkpoint": true      return current_task().checkpoint_state
    "allocate_mib": N            allocate N MiB (touched), hold it, then let it go
    "keep_mib": N                allocate N MiB (touched) and keep it until the process exits
                                 (the kernel frees it then: a slow exit)
    "spin": SECONDS              burn that much CPU time
    "ignore_sigxcpu": true       ignore SIGXCPU (so the kernel's SIGKILL ends a CPU limit)
    "sleep": SECONDS             sleep
    "hold_gil": SECONDS          one C call that holds the GIL that long (libc's sleep)
    "wait_for": KEY              wait until KEY exists in Redis (at most two minutes)
    "until_stopped": KEY         loop until current_task().should_stop(), then RPUSH KEY "stopped"
    "mark": KEY                  RPUSH KEY "done" after the waits (shows the code ran to the end)
    "collect_garbage": KEY       run a full garbage collection; RPUSH KEY the KiB of memory it
                                 made this process copy from its listener (Private_Dirty growth)
    "dependencies": KEY          RPUSH KEY {"id", "results"}: current_task().dependency_results
    "raise": MESSAGE             raise ValueError(MESSAGE)
    "fail_before": N             raise CodedError (code "E<attempt>") on the attempts before N
    "return": VALUE              return VALUE (any JSON value)
    "return_object": true        return object() (which JSON cannot encode)
    "random": true               return random.random() (as its repr)

Every run is recorded first: RPUSH RUNS_KEY {"id", "pid", "attempt"}.
"""

import ctypes
import gc
import json
import os
import random
import signal
import time

import redis
from redis.cluster import RedisCluster

from django_blueque.core import StopRequested, current_task

RUNS_KEY = "core_test_runs"
KEPT = []  # "keep_mib"'s memory, until the process exits
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
    run = json.dumps({"id": task.id, "pid": os.getpid(), "attempt": running.attempt})
    _wait_until(lambda: conn.rpush(RUNS_KEY, run))  # a test may be restarting Redis
    marks = todo.get("marks")
    if marks:
        _mark(conn, marks, task.id, running.attempt, "start")
    if todo.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    counter = todo.get("concurrency")
    if counter:
        conn.rpush(f"{counter}:seen", conn.incr(counter))
    try:
        if todo.get("look_once"):  # watches should_stop(), then stops looking
            running.should_stop()
        if "progress" in todo:
            running.report_progress(*todo["progress"])
        if "progress_every" in todo:
            count, every = todo["progress_every"]
            for done in range(1, count + 1):
                time.sleep(every)
                running.report_progress(100 * done / count, f"{done} of {count}")
                running.should_stop()
        if "steps" in todo:
            _steps(conn, task.id, running, *todo["steps"], pause=todo.get("step_sleep", 0))
        if "allocate_mib" in todo:
            block = bytearray(todo["allocate_mib"] * 1024 * 1024)
            del block
        if "keep_mib" in todo:
            KEPT.append(bytearray(todo["keep_mib"] * 1024 * 1024))
        if todo.get("ignore_sigxcpu"):
            signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        if "spin" in todo:
            until = time.process_time() + todo["spin"]
            while time.process_time() < until:
                pass
        if todo.get("kill_on_attempt") == running.attempt:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(todo.get("sleep", 0)))
        if "hold_gil" in todo:
            ctypes.PyDLL(None).sleep(int(todo["hold_gil"]))
        if "wait_for" in todo:
            _wait_until(lambda: conn.exists(todo["wait_for"]))
        if "wait_file" in todo:  # a gate that needs no Redis: the test may have cut it off
            while not os.path.exists(todo["wait_file"]):
                time.sleep(0.05)
        if "until_stopped" in todo:
            _wait_until(running.should_stop)
            conn.rpush(todo["until_stopped"], "stopped")
        if "sleep_noting_stop" in todo:  # code that never looks: StopRequested interrupts it
            try:
                time.sleep(120)
            except StopRequested:
                conn.rpush(todo["sleep_noting_stop"], f"should_stop={running.should_stop()}")
                raise
        if marks:
            _mark(conn, marks, task.id, running.attempt, "end")
        if "mark" in todo:
            conn.rpush(todo["mark"], "done")
        if "collect_garbage" in todo:
            before = _private_dirty_kib()
            gc.collect()
            conn.rpush(todo["collect_garbage"], _private_dirty_kib() - before)
    finally:
        if counter:
            conn.decr(counter)
    if "dependencies" in todo:
        conn.rpush(todo["dependencies"], json.dumps(
            {"id": task.id, "results": list(running.dependency_results.items())}))
    if "raise" in todo:
        raise ValueError(todo["raise"])
    if running.attempt < todo.get("fail_before", 0):
        raise CodedError(f"attempt {running.attempt} failed", code=f"E{running.attempt}")
    if todo.get("read_checkpoint"):
        return running.checkpoint_state
    if todo.get("return_object"):
        return object()
    if todo.get("random"):
        return repr(random.random())
    if "return" in todo:
        return todo["return"]
    return f"done:{task.parameters}"


def _mark(conn, key, task_id, attempt, event):
    line = json.dumps({"id": task_id, "attempt": attempt, "event": event, "at": time.time()})
    _wait_until(lambda: conn.rpush(key, line))


def _steps(conn, task_id, running, count, kill_at, pause=0):
    state = running.checkpoint_state
    first = state["step"] + 1 if state else 1
    conn.rpush(f"{task_id}:began", first)
    for step in range(first, count + 1):
        time.sleep(pause)
        running.checkpoint({"step": step})  # the step's work, then its mark
        _wait_until(lambda step=step: conn.rpush(f"{task_id}:steps", step))
        if step == kill_at and running.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def _private_dirty_kib():
    with open("/proc/self/smaps_rollup") as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Private_Dirty:"))


def note_end(task, outcome, value, error_type):
    """An on_task_end that RPUSHes "<id> <outcome>" to 'ended' (what the Django app's signals
    are told)."""
    redis.Redis.from_url(URL).rpush("ended", f"{task.id} {outcome}")


def slow_end(task, outcome, value, error_type):
    """An on_task_end (a signal receiver, say) that takes longer than a lease renewal."""
    time.sleep(12)
    note_end(task, outcome, value, error_type)
