"""The soak's tasks. Each writes a ``start`` line when its code begins and an ``end`` line when
its work is done (``ok``, or ``fail`` just before a designed failure is raised) to the side
channel: ``<event> <task id> <attempt> <pid> <real time> [outcome]``.

Times are read from CLOCK_REALTIME, not ``time.time()``, which the skewed listener (and the
task processes it forks) has shifted."""

import ctypes
import os
import time

from django.conf import settings

from django_blueque import blueque_task, current_task


class DesignedFailure(Exception):
    """The failure a flaky or doomed task raises on purpose: failed by design, not lost."""


def record(event, outcome=""):
    running = current_task()
    line = (f"{event} {running.id} {running.attempt} {os.getpid()} "
            f"{time.clock_gettime(time.CLOCK_REALTIME):.6f} {outcome}").rstrip() + "\n"
    fd = os.open(settings.SOAK_EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small write on O_APPEND: never interleaved
    finally:
        os.close(fd)


def work(seconds):
    record("start")
    time.sleep(seconds)


@blueque_task(queue="soak.short")
def short(n, ms=5):
    """A task of milliseconds: most of the load."""
    work(ms / 1000)
    record("end", "ok")
    return n


@blueque_task(queue="soak.sleep")
def sleeper(n, seconds=1.0):
    """A task of seconds: the one most faults land on while it runs."""
    work(seconds)
    record("end", "ok")
    return n


@blueque_task(queue="soak.eta")
def later(n):
    """A short task enqueued with an eta: the scheduler moves it."""
    work(0.005)
    record("end", "ok")
    return n


@blueque_task(queue="soak.flaky")
def flaky(n, succeed_on=2):
    """Fails by design until its ``succeed_on``-th attempt (the queue retries with backoff)."""
    work(0.005)
    attempt = current_task().attempt
    if attempt < succeed_on:
        record("end", "fail")
        raise DesignedFailure(f"attempt {attempt} fails by design")
    record("end", "ok")
    return n


@blueque_task(queue="soak.doomed")
def doomed(n):
    """Fails by design on every attempt: ends failed once its retries are spent."""
    work(0.005)
    record("end", "fail")
    raise DesignedFailure(f"attempt {current_task().attempt} fails by design")


@blueque_task(queue="soak.step")
def step(n, ms=5):
    """A step of a workflow (a chain with a group in its middle): its dependencies' ends come
    before its start, each step runs once (the ledger checks both)."""
    work(ms / 1000)
    record("end", "ok")
    return n


@blueque_task(queue="soak.gil")
def gil(n, seconds=25):
    """One C call that holds its process's GIL for longer than a lease: its lease thread cannot
    run, its listener keeps the lease; it must run once."""
    record("start")
    ctypes.PyDLL(None).sleep(int(seconds))
    record("end", "ok")
    return n


@blueque_task(queue="soak.limited")
def limited(n, seconds=0.5):
    """A task of a queue with MAX_RUNNING (settings.py): at most that many run at any moment
    across the listeners, the soak's faults included (the ledger checks it)."""
    work(seconds)
    record("end", "ok")
    return n


@blueque_task(queue="soak.keyed")
def keyed(n, seconds=0.5):
    """A task enqueued with a concurrency key of a few (load.py), on a queue with
    MAX_RUNNING_PER_KEY: the runs of one key never overlap (the ledger checks it)."""
    work(seconds)
    record("end", "ok")
    return n


@blueque_task(queue="soak.checkpoint")
def resumable(n, steps=4, seconds=0.5):
    """Steps that checkpoint their progress: a run after a fault resumes at the step after
    the last checkpoint. Returns the step its last run began at."""
    record("start")
    running = current_task()
    first = (running.checkpoint_state or {"step": 0})["step"] + 1
    for done in range(first, steps + 1):
        time.sleep(seconds)
        running.checkpoint({"step": done})
    record("end", "ok")
    return first
