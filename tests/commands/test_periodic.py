"""Periodic tasks: enqueued once per due time however many schedulers run, no catch-up burst."""

import subprocess
import sys
import time

from demo.tasks import tick

from django_blueque.services import enqueue_periodic, latest_due, next_periodic_runs
from tests.django_app.conftest import MANAGE

KEY = "blueque_periodic_demo.tick"
PENDING = "blueque_pending_tasks_demo.tick"


def test_first_sight_records_the_due_time_without_running(blueque, r):
    at = 1_800_000_030.0
    assert enqueue_periodic(at) == []
    assert float(r.get(KEY)) == 1_800_000_000.0  # tick runs every 60 s
    assert r.llen(PENDING) == 0


def test_each_due_time_runs_once_and_missed_runs_are_not_caught_up(blueque, r):
    due = latest_due(tick.periodic, 1_800_000_030.0)
    r.set(KEY, repr(due - 600))  # ten runs missed while nothing was scheduling
    started = enqueue_periodic(1_800_000_030.0)
    assert len(started) == 1 and r.lrange(PENDING, 0, -1) == started
    assert enqueue_periodic(1_800_000_059.0) == []  # same due time: nothing more
    assert len(enqueue_periodic(1_800_000_061.0)) == 1  # next due time
    assert r.llen(PENDING) == 2


def test_racing_schedulers_enqueue_a_due_run_exactly_once(manage, blueque, r):
    first_due = latest_due(tick.periodic, time.time())
    r.set(KEY, repr(first_due - 60))
    processes = [subprocess.Popen([sys.executable, str(MANAGE), "bq_schedule", "--once"],
                                  env=manage.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for process in processes:
        assert process.wait(60) == 0, process.stderr.read()
    # once per due time: a minute that turned while the schedulers started is a second one
    # (CI once started them across a minute's turn, and two runs were right)
    due_times = 1 + round((latest_due(tick.periodic, time.time()) - first_due) / 60)
    assert r.llen(PENDING) == due_times


def test_next_runs_are_listed(blueque):
    runs = dict((task.queue, when) for task, when in next_periodic_runs(1_800_000_030.0))
    assert runs["demo.tick"] == 1_800_000_060.0
