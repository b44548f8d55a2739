"""bq_listen, bq_schedule and bq_reap as real processes against a real Redis."""

import datetime
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest
from demo.tasks import long_task, report

from devtools.servers import RedisServer
from django_blueque import cancel, get_result
from tests.django_app.conftest import MANAGE, wait_for


def started_count(r, queue="demo.long"):
    return r.scard(f"blueque_started_tasks_{queue}")


def test_burst_drains_the_queues_and_exits_0(manage, blueque):
    ids = [report.enqueue(title=str(n)) for n in range(5)]
    result = manage.run("bq_listen", "--burst", "-c", "2")
    assert result.returncode == 0, result.stderr
    assert all(get_result(task_id).status == "complete" for task_id in ids)
    assert "burst done" in result.stderr


def test_concurrency_is_respected(manage, blueque, r):
    ids = [long_task.enqueue(steps=10, delay=0.1) for _ in range(5)]
    listener = manage.start("bq_listen", "demo.long", "--noreload", "-c", "2")
    most = 0
    deadline = time.monotonic() + 30
    while not all(get_result(t).status == "complete" for t in ids):
        assert time.monotonic() < deadline, "tasks did not complete"
        most = max(most, started_count(r))
        time.sleep(0.02)
    assert most == 2
    assert listener.poll() is None


def test_sigterm_mid_task_finishes_it_and_exits_cleanly(manage, blueque, r):
    task_id = long_task.enqueue(steps=10, delay=0.2)
    waiting = long_task.enqueue(steps=1, delay=0)
    listener = manage.start("bq_listen", "demo.long", "--noreload", "-c", "1")
    wait_for(lambda: get_result(task_id).status == "started", message="task start")
    listener.send_signal(signal.SIGTERM)
    output, _ = listener.communicate(timeout=30)
    assert listener.returncode == 0, output
    assert get_result(task_id).status == "complete"
    assert get_result(waiting).status == "pending"  # not taken after SIGTERM, not lost
    assert r.smembers("blueque_listeners_demo.long") == set()
    assert r.zscore("blueque_queues", "demo.long") == 0


def test_second_sigterm_exits_at_once_and_the_task_still_completes(manage, blueque, r):
    # 15 s: still running once the listener has gone, however busy the machine
    task_id = long_task.enqueue(steps=30, delay=0.5)
    listener = manage.start("bq_listen", "demo.long", "--noreload", "-c", "1")
    wait_for(lambda: get_result(task_id).status == "started", message="task start")
    listener.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    listener.send_signal(signal.SIGTERM)
    # wait(), not communicate(): the task's process still holds the output pipe
    assert listener.wait(timeout=5) == 1  # not a clean stop: a task was left running
    assert get_result(task_id).status == "started"
    assert get_result(task_id).wait(timeout=60).status == "complete"


@pytest.mark.slow
def test_sigkill_of_listener_and_tasks_is_recovered_by_bq_reap_on_another_node(
        manage, blueque, r):
    ids = [long_task.enqueue(steps=600, delay=0.1) for _ in range(2)]
    listener = manage.start("bq_listen", "demo.long", "--noreload", "-c", "2")
    wait_for(lambda: started_count(r) == 2, message="two tasks started")
    children = [int(member.split()[1]) for member in
                r.smembers("blueque_started_tasks_demo.long")]
    # the node dies: the listener and its task processes, all at once
    listener.send_signal(signal.SIGKILL)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    listener.wait()
    killed_at = time.monotonic()
    reaped = []

    def recovered():
        result = manage.run("bq_reap", "--once")
        assert result.returncode == 0, result.stderr
        reaped.append(result.stdout)
        return all(get_result(t).status == "failed" for t in ids)

    wait_for(recovered, timeout=40, message="recovery by bq_reap")
    assert time.monotonic() - killed_at < 35
    for task_id in ids:
        assert get_result(task_id).error.startswith("listener lost")
    output = "".join(reaped)
    assert "released listener" in output and "failed" in output
    assert r.smembers("blueque_listeners_demo.long") == set()
    assert r.scard("blueque_started_tasks_demo.long") == 0


def test_bq_schedule_moves_a_scheduled_task_on_time(manage, blueque):
    # a first task, due at once, shows the scheduler is up: its start-up (seconds on a busy
    # machine) is not part of the delay measured
    first = report.schedule(datetime.timedelta(seconds=0.2), title="first")
    scheduler = manage.start("bq_schedule", "--interval", "0.5")
    wait_for(lambda: get_result(first).status == "pending", timeout=60, message="start")
    task_id = report.schedule(datetime.timedelta(seconds=1.5), title="on time")
    due = time.time() + 1.5
    wait_for(lambda: get_result(task_id).status == "pending", timeout=10, message="move")
    assert time.time() - due < 1.5  # within its interval (plus a pass's slack)
    scheduler.send_signal(signal.SIGTERM)
    assert scheduler.wait(10) == 0


def test_bq_schedule_once(manage, blueque, r):
    task_id = report.schedule(time.time() + 0.2, title="x")
    time.sleep(0.3)
    result = manage.run("bq_schedule", "--once")
    assert result.returncode == 0, result.stderr
    assert "moved 1 due task" in result.stdout
    assert r.lrange("blueque_pending_tasks_demo.report", 0, -1) == [task_id]


def test_bq_reap_dry_run_changes_nothing_and_once_does_it(manage, blueque, r):
    dead = "gone-host_999999"
    r.zadd("blueque_queues", {"demo.long": 1})
    r.sadd("blueque_listeners_demo.long", dead)
    r.zadd("blueque_listener_leases_demo.long", {dead: time.time() - 60})
    r.lpush(f"blueque_reserved_tasks_demo.long_{dead}", "some-id")
    for n, expires in enumerate([time.time() - 30] * 3 + [time.time() + 3600]):
        r.hset(f"blueque_task_old{n}", mapping={"status": "failed", "queue": "demo.long",
                                               "updated": "1.0", "expires": repr(expires)})
        r.lpush("blueque_failed_tasks_demo.long", f"old{n}")  # oldest at the tail
    before = {key: r.dump(key) for key in r.keys("*")}
    result = manage.run("bq_reap", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "would release listener" in result.stdout and dead in result.stdout
    assert "would delete 3 failed tasks" in result.stdout
    assert dead not in result.stderr  # printed once, not logged as well
    assert {key: r.dump(key) for key in r.keys("*")} == before
    result = manage.run("bq_reap", "--once")
    assert "deleted 3 failed tasks" in result.stdout
    assert r.lrange("blueque_failed_tasks_demo.long", 0, -1) == ["old3"]


@pytest.mark.parametrize("args,needle", [
    (["bq_listen", "no.such.queue"], "no task registered for queue(s) no.such.queue"),
    (["bq_listen", "--concurrency", "0"], "--concurrency must be at least 1"),
    (["bq_schedule", "--interval", "-1"], "--interval must be positive"),
    (["bq_reap", "--interval", "-1"], "--interval must be positive"),
    (["bq_reap", "--interval", "0"], "--interval must be positive"),
])
def test_bad_arguments_exit_non_zero_with_one_clear_line(manage, blueque, args, needle):
    result = manage.run(*args)
    assert result.returncode != 0
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_redis_not_answering_is_one_clear_line(manage):
    manage.env["BLUEQUE_URL"] = "redis://127.0.0.1:1/0"
    result = manage.run("bq_listen", "--noreload", "--burst")
    assert result.returncode != 0
    assert "Redis does not answer" in result.stderr
    assert "Traceback" not in result.stderr


def test_bq_status_prints_queues_listeners_and_running_tasks(manage, blueque, r):
    task_id = long_task.enqueue(steps=100, delay=0.1)
    report.enqueue(title="waiting: no listener on demo.report")
    manage.start("bq_listen", "demo.long", "--noreload")
    wait_for(lambda: (get_result(task_id).progress or 0) > 0, message="progress")
    result = manage.run("bq_status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    report_row = next(line for line in lines if line.startswith("demo.report "))
    assert report_row.split()[1:3] == ["0", "1"]  # scheduled 0, pending 1
    long_row = next(line for line in lines if line.startswith("demo.long "))
    assert long_row.split()[4] == "1"  # started
    listener_row = next(line for line in lines if line.split()[2:3] == ["live"])
    assert listener_row.split()[1] == "demo.long"
    task_row = next(line for line in lines if line.startswith(task_id))
    assert "% step" in task_row


def test_sighup_restarts_the_listener_gracefully_with_fresh_code(manage, blueque, r):
    running = long_task.enqueue(steps=10, delay=0.1)
    listener = manage.start("bq_listen", "demo.long", "--noreload")
    wait_for(lambda: get_result(running).status == "started", message="task start")
    listener.send_signal(signal.SIGHUP)
    assert get_result(running).wait(timeout=20).status == "complete"  # finished, not lost
    after = long_task.enqueue(steps=1, delay=0)
    assert get_result(after).wait(timeout=20).status == "complete"  # served after the restart
    assert listener.poll() is None  # the same process, re-executed
    assert r.smembers("blueque_listeners_demo.long") == {
        get_result(after).node}  # registered again under the same id, once
    listener.terminate()
    output, _ = listener.communicate(timeout=20)
    assert output.count("started on demo.long") == 2


def test_bq_reap_and_bq_schedule_go_on_over_bad_data(manage, blueque, r):
    """Issue 10: keys of the wrong type (for a queue in blueque_queues, and in the shared
    indexes) made bq_reap, bq_schedule and bq_status exit with a traceback, the looping forms
    included. As real processes: each --once exits 0, each loop keeps running and still does
    its work for the healthy queue, and none prints a traceback."""
    r.zadd("blueque_queues", {"broken": 0, "demo.report": 0})
    for key in ("blueque_listeners_broken", "blueque_failed_tasks_broken",
                "blueque_started_tasks_broken", "blueque_scheduled_tasks_broken",
                "blueque_due_queues", "blueque_lease_expiries", "blueque_listener_expiries",
                "blueque_expiring_queues"):
        r.set(key, "garbage")
    for args in (["bq_reap", "--once"], ["bq_schedule", "--once"], ["bq_status"]):
        result = manage.run(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stdout + result.stderr, args
    task_id = report.schedule(time.time() + 1, title="after the garbage")
    reaper = manage.start("bq_reap", "--interval", "0.3")
    scheduler = manage.start("bq_schedule", "--interval", "0.3")
    wait_for(lambda: get_result(task_id).status == "pending", timeout=20,
             message="the scheduler's loop moving the healthy queue's task")
    time.sleep(1)
    assert reaper.poll() is None and scheduler.poll() is None
    for process in (reaper, scheduler):
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=15)
        assert process.returncode == 0 and "Traceback" not in output, output


@pytest.mark.parametrize("buffered", [False, True])
def test_bq_status_into_a_pipe_closed_early_stops_quietly(manage, blueque, buffered):
    """``bq_status | head``: the reader goes away before the command's last line; the command
    stops as ``ls | head`` does, with no traceback on stderr (its output written line by line,
    or at once when it ends)."""
    for n in range(30):
        report.enqueue(title=str(n))
    env = dict(manage.env)
    if buffered:
        del env["PYTHONUNBUFFERED"]
    read, write = os.pipe()
    os.close(read)  # a reader that left before the first line
    done = subprocess.run([sys.executable, str(MANAGE), "bq_status"], env=env,
                          stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 1


def test_bq_status_lists_a_running_task_whose_listener_is_gone(manage, blueque, r):
    """A listener stopped at once (a second SIGTERM) leaves its running task to its own
    process, and unregisters: bq_status lists that task from its queue's started set, its
    listener marked gone, not only the tasks of the listeners it finds."""
    task_id = long_task.enqueue(steps=300, delay=0.1)
    listener = manage.start("bq_listen", "demo.long", "--noreload")
    wait_for(lambda: (get_result(task_id).progress or 0) > 0, message="progress")
    node = get_result(task_id).node
    listener.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    listener.send_signal(signal.SIGTERM)
    listener.wait(20)
    wait_for(lambda: not r.smembers("blueque_listeners_demo.long"), message="unregistered")
    assert get_result(task_id).status == "started"
    result = manage.run("bq_status")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith(task_id))
    assert row.split()[1:4] == ["demo.long", node, "(gone)"] and "% step" in row, row
    running = json.loads(manage.run("bq_status", "--json").stdout)["running"]
    assert [(task["id"], task["listener"], task["listener_live"]) for task in running] == [
        (task_id, node, False)]
    cancel(task_id)  # its process, listener-less, stops itself (its lease keeper sees to it)


def test_bq_status_watch_outlives_a_redis_that_stops_answering(manage, blueque, tmp_path):
    """``bq_status --watch`` left open as a monitor says Redis does not answer, and shows the
    queues again once it does, instead of exiting."""
    server = RedisServer().start()
    try:
        manage.env["BLUEQUE_URL"] = server.url
        watch = manage.start("bq_status", "--watch", "0.2")
        lines = []

        def saw(text):
            return any(text in line for line in lines)

        def read_until(text, timeout=20):
            deadline = time.monotonic() + timeout
            while not saw(text) and time.monotonic() < deadline:
                ready, _, _ = select.select([watch.stdout], [], [], 0.5)
                if ready:
                    lines.append(watch.stdout.readline())
            assert saw(text), "".join(lines[-20:])

        read_until("QUEUE")
        server.stop()
        read_until("Redis does not answer")
        lines.clear()
        server.start()
        read_until("QUEUE")
        assert watch.poll() is None
    finally:
        server.close()


def test_a_listener_told_to_stop_shows_as_stopping_while_its_task_runs(manage, blueque, r):
    """A first SIGTERM makes a listener take no new task and wait for its running ones, for
    hours maybe: bq_status (and the admin pages, through the same rows) show it stopping,
    not plainly live, while its queue's pending tasks wait."""
    task_id = long_task.enqueue(steps=300, delay=0.1)
    listener = manage.start("bq_listen", "demo.long", "--noreload")
    wait_for(lambda: get_result(task_id).status == "started", message="task start")

    def states():
        return {row["id"]: (row["state"], row["stopping"]) for row in json.loads(
            manage.run("bq_status", "--json").stdout)["listeners"]}

    node = get_result(task_id).node
    assert states() == {node: ("live", False)}
    listener.send_signal(signal.SIGTERM)
    wait_for(lambda: states() == {node: ("live", True)}, timeout=10, message="stopping")
    row = next(line for line in manage.run("bq_status").stdout.splitlines()
               if line.startswith(node))
    assert row.split()[1:3] == ["demo.long", "stopping"], row
    cancel(task_id)
    assert listener.wait(30) == 0
